"""The arithmetic of the soak benchmark (benchmarks/serving/soak.py), apart from the server so it
is tested on made-up inputs: sums over Prometheus samples (parsed by
adaserve.loadgen.serve_process.parse_metrics), failure counts from the load generator's
records, the capacity a probe measured, and the RSS slope."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from adaserve.loadgen.records import Record


def total(metrics: dict[str, float], name: str) -> float:
    """Sum of a metric over all its label sets (0 if the server exports none)."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


@dataclass(frozen=True, slots=True)
class Failures:
    """What went wrong, per request, as the client saw it."""

    sent: int
    ok: int
    http_5xx: int  # any status >= 500, the 503 of a full queue included
    http_4xx: int
    other: int  # an error event inside a 200 stream, a stream cut short, a transport error
    pending: int  # never finished (the run was stopped)

    @property
    def failed(self) -> int:
        return self.sent - self.ok


def http_status(r: Record) -> int | None:
    """The HTTP status of a request that did not get a 200, if the record says one."""
    if r.status == "rejected":
        return 503
    if r.status == "error" and r.error and r.error.startswith("HTTP "):
        code = r.error[5:].split(":", 1)[0]
        return int(code) if code.isdigit() else None
    return None


def failures(records: Iterable[Record]) -> Failures:
    sent = ok = e5 = e4 = other = pending = 0
    for r in records:
        sent += 1
        code = http_status(r)
        if r.status == "ok":
            ok += 1
        elif r.status == "pending":
            pending += 1
        elif code is not None and code >= 500:
            e5 += 1
        elif code is not None and code >= 400:
            e4 += 1
        else:
            other += 1
    return Failures(sent, ok, e5, e4, other, pending)


def completion_rate(finish_s: Sequence[float], start_s: float, end_s: float) -> float:
    """Requests finished per second within [start_s, end_s)."""
    if not end_s > start_s:
        raise ValueError(f"the window must have end > start, got [{start_s}, {end_s})")
    return sum(start_s <= t < end_s for t in finish_s) / (end_s - start_s)


def soak_requests(rate: float, minutes: float) -> int:
    """Requests that a Poisson schedule at ``rate`` spreads over ``minutes`` on average."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"the soak rate must be > 0 requests/s, got {rate!r}")
    if not (math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"--minutes must be > 0, got {minutes!r}")
    return max(1, round(rate * minutes * 60))


@dataclass(frozen=True, slots=True)
class Slope:
    mib_per_min: float
    intercept_mib: float  # the fitted line at t = 0
    stderr: float  # standard error of the slope (nan with fewer than 3 samples)
    samples: int


def rss_slope(t_s: Sequence[float], rss_mib: Sequence[float], start_s: float,
              end_s: float) -> Slope:
    """Least-squares slope of RSS against time over the samples in [start_s, end_s]."""
    t = np.asarray(t_s, dtype=float)
    y = np.asarray(rss_mib, dtype=float)
    keep = (t >= start_s) & (t <= end_s)
    t, y = t[keep] / 60.0, y[keep]  # minutes
    if t.size < 2 or np.ptp(t) == 0:
        raise ValueError(f"need samples at two times in [{start_s}, {end_s}] s to fit a "
                         f"slope, got {t.size}: sample more often (--sample-seconds)")
    slope, icpt = np.polyfit(t, y, 1)
    stderr = math.nan
    if t.size > 2:
        resid = y - (slope * t + icpt)
        stderr = math.sqrt(resid @ resid / (t.size - 2) / ((t - t.mean()) @ (t - t.mean())))
    return Slope(float(slope), float(icpt), stderr, int(t.size))


def others_cores(start: tuple[float, float], end: tuple[float, float], wall_s: float) -> float:
    """Cores other processes kept busy between two (machine busy, ours) CPU-second
    readings ``wall_s`` apart: what a shared machine took from the measurement."""
    if not wall_s > 0:
        raise ValueError(f"wall_s must be > 0, got {wall_s!r}")
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / wall_s

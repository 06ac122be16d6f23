"""Open-loop arrival schedules: when each request is sent, fixed before the run starts.

Requests go out at their scheduled times whatever is still outstanding, so a slow server
cannot slow the offered load down (no coordinated omission). Poisson at a rate, bursty
(gamma inter-arrival times with a coefficient of variation > 1), replayed from a trace in
the Azure LLM inference trace schema (TIMESTAMP, ContextTokens, GeneratedTokens), or from a
paper trace (loadgen.paper_trace), which also gives each request's prompt length and SLO.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaserve.loadgen import paper_trace
from adaserve.loadgen.workload import (ORDERED_SETS, ClassMix, PromptSpec, prompt_set,
                                       sized_prompt)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One scheduled request."""

    index: int
    t: float  # seconds after the run starts
    slo_class: str
    prompt: PromptSpec
    max_tokens: int
    slo_ms: float | None = None  # its own TPOT SLO (a paper trace's), sent as X-SLO-TPOT-MS
    ignore_eos: bool = False  # run to max_tokens (a paper trace fixes the output length)

    def request(self) -> tuple[dict, dict]:
        """The streaming chat request's body and headers: the SLO is the request's own
        milliseconds if it has them, else its class."""
        body = {"messages": self.prompt.as_messages(), "max_tokens": self.max_tokens,
                "stream": True, "temperature": 0, "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        headers = ({"X-SLO-TPOT-MS": repr(self.slo_ms)} if self.slo_ms is not None
                   else {"X-SLO-Class": self.slo_class})
        return body, headers


def poisson_times(rate: float, n: int, seed: int = 0) -> np.ndarray:
    """n send times [s] of a Poisson process at ``rate`` requests/s (exponential gaps)."""
    return gamma_times(rate, 1.0, n, seed)


def gamma_times(rate: float, cv: float, n: int, seed: int = 0) -> np.ndarray:
    """n send times with gamma gaps of mean 1/rate and coefficient of variation ``cv``
    (cv = 1: Poisson; cv > 1: bursts and lulls at the same mean rate)."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be > 0 requests/s, got {rate!r}")
    if not (math.isfinite(cv) and cv > 0):
        raise ValueError(f"cv must be > 0, got {cv!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    shape = 1.0 / cv**2
    gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (shape * rate), size=n)
    return np.cumsum(gaps) - (gaps[0] if n else 0.0)  # the first request goes at t = 0


def wait_until(deadline: float, clock: Callable[[], float],
               sleep: Callable[[float], None], spin: float = 0.002) -> float:
    """Sleep until ``clock()`` reaches ``deadline``; returns that reading, never earlier.

    A sleep can end early: gevent's timers count from the event loop's cached time, which
    is stale by whatever ran since the loop last turned (the dispatcher's timers fired up
    to 9 ms early in the committed records), so the clock is read again after every sleep.
    The last ``spin`` seconds are sleep(0)s, which yield to the other greenlets but, unlike
    a short timer (millisecond resolution), do not overshoot."""
    while (now := clock()) < deadline:
        left = deadline - now
        sleep(left - spin if left > spin else 0)
    return now


@dataclass(frozen=True, slots=True)
class TraceRow:
    t: float  # seconds after the trace's first request
    context_tokens: int
    generated_tokens: int


def read_trace(path: Path | str, time_scale: float = 1.0, limit: int | None = None
               ) -> list[TraceRow]:
    """Rows of an Azure LLM inference trace CSV. ``time_scale`` multiplies the gaps
    (0.5 replays twice as fast)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if not need <= set(reader.fieldnames or ()):
            raise ValueError(f"{path}: a trace needs the columns {sorted(need)}, "
                             f"got {reader.fieldnames}")
        for i, r in enumerate(reader):
            if limit is not None and i >= limit:
                break
            try:
                t = _timestamp(r["TIMESTAMP"])
                rows.append((t, int(r["ContextTokens"]), int(r["GeneratedTokens"])))
            except ValueError as e:
                raise ValueError(f"{path}, row {i + 2}: {e}") from None
    if not rows:
        return []
    rows.sort(key=lambda x: x[0])
    t0 = rows[0][0]
    return [TraceRow((t - t0) * time_scale, c, g) for t, c, g in rows]


def _timestamp(text: str) -> float:
    """Seconds since the epoch; the Azure traces write '2023-11-16 18:15:46.6805900'
    (7 fractional digits, which fromisoformat refuses), plain seconds also work."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    main, _, frac = text.partition(".")
    stamp = dt.datetime.fromisoformat(main).replace(tzinfo=dt.timezone.utc).timestamp()
    return stamp + (float("0." + frac) if frac else 0.0)


def schedule(times: np.ndarray, mix: ClassMix, prompts: list[PromptSpec], seed: int = 0,
             max_tokens: list[int] | None = None, mix_draw: str = "iid") -> list[Arrival]:
    """Arrivals at ``times``: classes from ``mix`` (``mix_draw``: "exact" counts or "iid"
    draws, see ClassMix.assign), prompts taken in turn, output lengths from ``max_tokens``
    (a trace's GeneratedTokens) or the prompt's own."""
    if not prompts:
        raise ValueError("no prompts to send")
    rng = random.Random(seed)
    classes = mix.assign(len(times), rng, mix_draw)
    out = []
    for i, t in enumerate(np.asarray(times, dtype=float).tolist()):
        p = prompts[i % len(prompts)]
        m = p.max_tokens if max_tokens is None else max(1, int(max_tokens[i]))
        out.append(Arrival(i, t, classes[i], p, m))
    return out


def paper_plan(path: Path | str, requests: int, rate: float, baseline_ms: float | None,
               time_scale: float = 1.0, max_tokens: int = 0) -> list[Arrival]:
    """A paper trace's first ``requests`` rows as the simulator serves them
    (adaserve.sim.workload.read_paper_trace, at_rate): the gaps scaled to the mean ``rate``
    (0: the trace's own times x ``time_scale``), classes as it names them, prompts of about
    input_length tokens (sized_prompt), max_tokens = output_length (``max_tokens`` > 0
    instead) run to the end (ignore_eos), the TPOT SLO in ms (slo_ratio > 0: x
    ``baseline_ms``)."""
    rows = paper_trace.read_rows(path, limit=requests)
    if not rows:
        raise ValueError(f"{path}: no rows")
    if baseline_ms is None and any(r.slo_ratio > 0 for r in rows):
        raise ValueError(f"{path}: slo_ratio > 0 is a multiple of the baseline latency: "
                         "give --baseline-ms or a server whose /server_info has it")
    times = (paper_trace.at_rate([r.t for r in rows], rate) if rate > 0
             else [(r.t - min(x.t for x in rows)) * time_scale for r in rows])
    return [Arrival(i, t, r.slo_class, sized_prompt(r.input_length, r.output_length, seed=i),
                    max_tokens or r.output_length, r.slo_ms(baseline_ms or 0.0), True)
            for i, (t, r) in enumerate(zip(times, rows))]


def build_plan(opts, baseline_ms: float | None = None) -> list[Arrival]:
    """The run's arrivals from the loadgen's options (the locustfile sends them; the
    simulator replays a measured run from them). ``baseline_ms``: the server's, for a paper
    trace's relative SLOs when the options give none."""
    if opts.arrival == "paper":
        base = opts.baseline_ms if opts.baseline_ms > 0 else baseline_ms
        return paper_plan(opts.trace, opts.requests, opts.rate, base, opts.time_scale,
                          opts.max_tokens)
    mix = ClassMix.parse(opts.mix)
    if opts.urgent >= 0:
        mix = mix.with_urgent(opts.urgent)
    gen_tokens = None
    if opts.arrival == "trace":
        rows = read_trace(opts.trace, opts.time_scale, limit=opts.requests)
        times = [r.t for r in rows]
        gen_tokens = [r.generated_tokens for r in rows]
    else:
        cv = 1.0 if opts.arrival == "poisson" else opts.cv
        times = gamma_times(opts.rate, cv, opts.requests, opts.seed)
    # a stream (ORDERED_SETS) has a prompt per request; the others cycle through 512 at most
    n = len(times) if opts.prompts in ORDERED_SETS else min(len(times), 512)
    prompts = prompt_set(opts.prompts, max(1, n), opts.seed)
    if opts.max_tokens > 0:
        gen_tokens = [opts.max_tokens] * len(times)
    return schedule(times, mix, prompts, opts.seed, gen_tokens, opts.mix_draw)

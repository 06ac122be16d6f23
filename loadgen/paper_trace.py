"""Paper traces: the AdaServe artifact's CSV (emission_time_ms, input_length, output_length,
slo_ratio; ../shared/paper-scale/README.md). Read here for both backends: the load generator
sends them to a server (build_plan, --arrival paper) and the simulator serves them
(adaserve.sim.workload.read_paper_trace), the same rows, times and classes."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("emission_time_ms", "input_length", "output_length", "slo_ratio")


def paper_class(slo_ratio: float) -> str:
    """The class a paper trace's slo_ratio names: x<ratio> of the baseline, or <ms>ms."""
    return f"x{slo_ratio:g}" if slo_ratio > 0 else f"{-slo_ratio:g}ms"


@dataclass(frozen=True, slots=True)
class PaperRow:
    t: float  # seconds: the emission time
    input_length: int  # prompt tokens
    output_length: int
    slo_ratio: float  # > 0: a multiple of the baseline latency; < 0: minus a TPOT SLO in ms

    @property
    def slo_class(self) -> str:
        return paper_class(self.slo_ratio)

    def slo_ms(self, baseline_ms: float) -> float:
        return self.slo_ratio * baseline_ms if self.slo_ratio > 0 else -self.slo_ratio


def read_rows(path: Path | str, limit: int | None = None) -> list[PaperRow]:
    """The first ``limit`` rows (all with None); ValueError names a bad file or row."""
    out = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: a paper trace has the columns {COLUMNS}, "
                             f"got {reader.fieldnames}")
        for i, row in enumerate(reader):
            if limit is not None and i >= limit:
                break
            try:
                ratio = float(row["slo_ratio"])
                if ratio == 0 or not math.isfinite(ratio):
                    raise ValueError(f"slo_ratio must be non-zero, got {ratio}")
                out.append(PaperRow(float(row["emission_time_ms"]) / 1e3,
                                    int(row["input_length"]), int(row["output_length"]), ratio))
            except ValueError as e:
                raise ValueError(f"{path}, row {i + 2}: {e}") from None
    return out


def mean_rate(times: Sequence[float]) -> float:
    """Requests per second between the first arrival and the last."""
    span = max(times) - min(times) if times else 0.0
    if len(times) < 2 or span <= 0:
        raise ValueError("a rate needs at least two requests at different times")
    return (len(times) - 1) / span


def at_rate(times: Sequence[float], rate: float) -> list[float]:
    """``times`` from the first one, every gap scaled so that their mean rate is ``rate``."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be > 0 requests/s, got {rate!r}")
    scale = mean_rate(times) / rate
    t0 = min(times)
    return [(t - t0) * scale for t in times]


def trace_serve_args(extra: str, trace: Path | str | None, requests: int) -> str:
    """The servers' flags ``extra`` for a sweep of ``trace``'s first ``requests`` rows, with
    a --max-context that fits its longest request (prompt + output, the prompt with 10% +
    32 tokens to spare for its words-to-tokens estimate, rounded up to 64) where the
    default would not; ``extra`` as it is without a trace. ValueError where ``extra`` sets
    a smaller one."""
    if trace is None:
        return extra
    import argparse
    import shlex

    from adaserve.server.options import add_args as add_serve_args

    rows = read_rows(trace, limit=requests)
    if not rows:
        raise ValueError(f"{trace}: no rows")
    need = max(math.ceil(1.1 * r.input_length) + 32 + r.output_length for r in rows)
    need = 64 * math.ceil(need / 64)
    p = argparse.ArgumentParser(add_help=False)
    add_serve_args(p)
    default = p.get_default("max_context")
    p.set_defaults(max_context=None)
    given = p.parse_known_args(shlex.split(extra))[0].max_context
    if given is not None and given < need:
        raise ValueError(f"--serve-args sets --max-context {given}, and the trace's first "
                         f"{requests} requests need up to {need} tokens (prompt + "
                         "output, with room for the prompt estimate): raise it or drop it")
    if given is None and need > default:
        extra = f"{extra} --max-context {need}"
    return extra

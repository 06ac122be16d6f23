"""A trace's rate scaled by N for a fleet of N replicas (issue 28), its duration kept.

The trace is played N times back to back, each copy N times faster: copy k's request at
time t arrives at (t + k * span) / N. The arrival process keeps its shape (every gap is
divided by N, as `at_rate` scales a trace), the class and length mix is the authors', and
the run lasts as long as the original, so N replicas see about the load one replica sees
at the original rate. Request i of copy k gets the index k * len + i, so they draw
their own acceptance seeds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from adaserve.sim.workload import SimRequest


def span_s(requests: Sequence[SimRequest]) -> float:
    """The trace's length: the last arrival plus one mean gap (so the next copy starts
    about one gap after this one's last request)."""
    times = sorted(r.t for r in requests)
    if len(times) < 2:
        return times[-1] + 1.0 if times else 0.0
    return times[-1] + (times[-1] - times[0]) / (len(times) - 1)


def scale_rate(requests: Sequence[SimRequest], n: int) -> list[SimRequest]:
    """``requests`` at ``n`` times their rate over the same span; ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"rate scale must be >= 1, got {n}")
    if n == 1:
        return list(requests)
    span, m = span_s(requests), len(requests)
    return [dataclasses.replace(r, index=k * m + i, t=(r.t + k * span) / n)
            for k in range(n) for i, r in enumerate(requests)]

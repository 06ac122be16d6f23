"""The SLO-aware endpoint picker (issue 39): which replica a request should go to, from
what the replicas report (report.py). One policy for the real fleet (the SLO front,
adaserve/sglang/front.py, names the replica to sglang-router) and the simulated one
(adaserve/sim/routers.py, router ``picker``).

For each replica it predicts the request's TPOT and TTFT there and their margins against
the request's SLOs, and picks the replica with the largest margin: where the request is
most likely to attain. The prediction, and why:

- **Demand.** A request weighs the tokens per baseline iteration it needs to keep its TPOT
  SLO, ``w = baseline / SLO`` (seed 002 Eq. 3 at a baseline iteration; best effort
  ``BEST_EFFORT_WEIGHT``, a root token). AdaServe's SLO phase serves the tightest requests
  first, so a request competes with the replica's requests at least as tight as itself at
  their full weight and with the looser ones at a root token each:
  ``L = w + sum(n_g * w_g for w_g >= w) + sum(n_g * BEST_EFFORT_WEIGHT for w_g < w)``.
- **TPOT.** Within ``capacity`` (the demand a replica serves at its SLOs) every request
  gets what it needs; past it, the requests it competes with slow down together:
  ``SLO * max(1, L / capacity)``. A replica does no better for the class than it just
  did: ``tpot = max(that, recent median TPOT of the class)``. The TPOT margin is the
  headroom, ``min(capacity / L, SLO / recent median TPOT)``: how far the load could grow
  before the request misses, so replicas within capacity still differ.
- **TTFT.** SGLang's waiting queue is first come, first served, so a new request waits
  for the prefill of every request waiting there, then its own: ``model = prefill_ms *
  (1 + waiting)``, and again ``ttft = max(model, recent median TTFT of the class)``.
- **Margin.** The smallest of the TPOT margin and ``TTFT SLO / ttft`` over the
  objectives the request has (>= 1: predicted to attain). A request with neither (best effort) takes the replica
  with the most spare capacity, ``capacity / L``.

Ties go to the replica with fewer requests in flight, then the lower index. When any
report is missing or older than ``stale_s``, the picker names no replica and the caller
falls back to its router's own policy: a stale report would send a burst to whichever
replica looked idle when it was last read.

Pure Python, no tensors: tests/picker/ runs it on fabricated reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from adaserve.picker.report import Ask, ReplicaReport

# a best-effort request still occupies a batch slot and verifies its root each iteration
BEST_EFFORT_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class PickerConfig:
    """What the picker knows of the replicas beyond their reports."""

    baseline_ms: float  # the target's plain decode step, the unit of the weights
    capacity: float  # demand a replica serves within its SLOs (tokens per baseline iteration)
    prefill_ms: float | None = None  # prefill of one waiting request; None: baseline_ms
    stale_s: float = 2.0  # a report older than this is not trusted

    def __post_init__(self) -> None:
        for name in ("baseline_ms", "capacity", "stale_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"the picker's {name} must be a number > 0, got {v!r}")
        if self.prefill_ms is not None and not (math.isfinite(self.prefill_ms)
                                                and self.prefill_ms > 0):
            raise ValueError(f"the picker's prefill_ms must be > 0, got {self.prefill_ms!r}")

    @property
    def prefill(self) -> float:
        return self.baseline_ms if self.prefill_ms is None else self.prefill_ms


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the picker expects for the request on one replica."""

    demand: float  # L: the request's weight plus what it competes with
    tpot_ms: float | None  # None: best effort (no TPOT SLO to predict against)
    ttft_ms: float
    margin: float  # >= 1: predicted to attain every objective the request has


@dataclass(frozen=True, slots=True)
class Pick:
    """The picker's answer: a replica index, or None to leave the choice to the router."""

    replica: int | None
    predictions: tuple[Prediction, ...]  # per replica; empty when it fell back
    why: str


def weight(tpot_slo_ms: float | None, baseline_ms: float) -> float:
    """Tokens per baseline iteration a request needs to keep its TPOT SLO."""
    return BEST_EFFORT_WEIGHT if tpot_slo_ms is None else baseline_ms / tpot_slo_ms


def predict(ask: Ask, report: ReplicaReport, cfg: PickerConfig) -> Prediction:
    """The request's TPOT, TTFT and margin on the replica that reported ``report``."""
    w = weight(ask.tpot_slo_ms, cfg.baseline_ms)
    demand = w
    for ld in report.loads:
        wg = weight(ld.tpot_slo_ms, cfg.baseline_ms)
        demand += ld.count * (wg if wg >= w else BEST_EFFORT_WEIGHT)
    over = max(1.0, demand / cfg.capacity)
    recent = report.recent_of(ask.slo_class)
    ttft = cfg.prefill * (1 + report.waiting)
    if recent is not None and recent.ttft_ms is not None:
        ttft = max(ttft, recent.ttft_ms)
    margins = []
    tpot = None
    if ask.tpot_slo_ms is not None:
        tpot = ask.tpot_slo_ms * over
        margins.append(cfg.capacity / demand)
        # a median TPOT of 0 (the class's recent outputs came whole in the step after
        # their first token, as a simulated fleet's N = 4 runs at Fig. 8's rates had
        # them) gives no pace to weigh: the load's prediction stands alone
        if recent is not None and recent.tpot_ms:
            tpot = max(tpot, recent.tpot_ms)
            margins.append(ask.tpot_slo_ms / recent.tpot_ms)
    if ask.ttft_slo_ms is not None:
        margins.append(ask.ttft_slo_ms / ttft)
    margin = min(margins) if margins else cfg.capacity / demand
    return Prediction(demand, tpot, ttft, margin)


def stale(reports: Sequence[ReplicaReport | None], now: float, cfg: PickerConfig) -> str | None:
    """Why the reports cannot be trusted at ``now``, or None."""
    if not reports:
        return "no replicas"
    for i, r in enumerate(reports):
        if r is None:
            return f"no report from replica {i}"
        if now - r.read_at > cfg.stale_s:
            return f"replica {i}'s report is {now - r.read_at:.1f} s old"
    return None


def pick(ask: Ask, reports: Sequence[ReplicaReport | None], now: float,
         cfg: PickerConfig) -> Pick:
    """The replica where ``ask`` is most likely to attain, or None when the reports are
    stale (the caller's router decides)."""
    why = stale(reports, now, cfg)
    if why is not None:
        return Pick(None, (), why)
    preds = tuple(predict(ask, r, cfg) for r in reports)  # type: ignore[arg-type]
    best = max(range(len(preds)),
               key=lambda i: (preds[i].margin, -reports[i].in_flight, -i))  # type: ignore
    return Pick(best, preds, f"margin {preds[best].margin:.2f}")

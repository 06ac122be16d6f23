"""Option ``prefill=yield``: a prefill chunk waits where it would push a decoding request
off its SLO.

The engine prefills a chunk of prompt tokens every iteration and the running requests
decode in the same forward (Sarathi-Serve's piggybacking). At short prompts a chunk adds
little. At 2-8k-token contexts on the served CPU a 128-token chunk over a long prefix took
the iteration from ~45 ms to ~0.5 s, prefill took 91-98% of the servers' time, and every
request decoding beside a long prefill got that step as its TPOT: an urgent request (70
ms) and a moderate one fell off their SLOs whatever the draft did (results/served-longctx-
credit). A drafted tree cannot buy that back; the chunk's timing can.

So before an iteration prefills, the policy asks, with the recent measured durations of
a plain decode step (t0) and of a step that prefilled (t1), whether the chunk breaks
anybody: a decoding request with a TPOT SLO that stands within it after a step of t0 (its
need at the SLO at most one token, ``authors.holds``) and not after a step of t1. If
one does, the chunk waits this iteration and the requests decode alone; requests already
past saving at t0, or at ease at t1, do not hold it. Nothing here reads where an output
ends: a decoding request finishes when it finishes, and a waiting prompt is prefilled as
soon as no decoding request needs the short step. The waiting prompt's TTFT pays; the
end-to-end reading (TTFT within its SLO too) shows what that costs.
"""

from __future__ import annotations

import math

import numpy as np

from adaserve.scheduler.authors import AdaServeRules, holds
from adaserve.scheduler.slo import BatchView

# weight of the newest iteration in a step kind's running mean: the last few iterations
# of a kind (the chunks of one long prompt cost alike; the next prompt's may not)
STEP_WEIGHT = 0.25


class StepTimes:
    """Running means of the measured seconds of decode-only iterations and of iterations
    that prefilled a chunk; NaN until one of the kind is seen."""

    def __init__(self) -> None:
        self.plain_s = math.nan
        self.prefill_s = math.nan

    def observe(self, seconds: float, prefilled: int) -> None:
        if prefilled:
            self.prefill_s = _mean(self.prefill_s, seconds)
        else:
            self.plain_s = _mean(self.plain_s, seconds)


def _mean(old: float, new: float) -> float:
    return new if math.isnan(old) else (1 - STEP_WEIGHT) * old + STEP_WEIGHT * new


def chunk_breaks(batch: BatchView, t_plain_s: float, t_prefill_s: float,
                 rules: AdaServeRules) -> bool:
    """Whether a step of ``t_prefill_s`` pushes a decoding request off its SLO that a step
    of ``t_plain_s`` keeps on it (module docstring); False until both are measured."""
    if math.isnan(t_plain_s) or math.isnan(t_prefill_s) or t_prefill_s <= t_plain_s:
        return False
    plain = holds(batch, t_plain_s, rules)  # [n], False for best effort
    return bool(np.any(plain & ~holds(batch, t_prefill_s, rules)))

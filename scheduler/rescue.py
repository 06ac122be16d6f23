"""Option ``rescue``: draft for the requests behind their pace where the throughput rule
plans no draft.

The cost-aware planning (``policy_base._worthwhile_depth``, ``budget.goodput_budget``)
drafts where the batch's tokens per second gain. On the served CPU they seldom do once two
requests run: at 2-4 running a drafted step took 53-58 ms for 2.7-4.8 tokens, a plain one
39-42 ms for 2-4 (the preset's iterations on the development seed 100 at 1.5 req/s,
results/dev-served-intel-refuse-missed), so the plan mostly drafted nothing. But the
urgent class's SLO is the one-request step (44.9 ms), and a plain step of 39-42 ms leaves
it a few milliseconds a token to absorb the prompts prefilled beside it: a 40-token prompt
took 160-250 ms there, and an urgent request's 64 tokens met 2-4 of them, 5-14 ms a token.
Of the 11 urgent requests admitted there that missed, 5 missed by 0.8-6.9 ms a token, and
(the server's iterations matched to the requests' times, roughly) had drafted in 14-54% of
their iterations. A chain for the urgent
request alone gives it ~1.8 tokens a drafted step, ~30 ms a token; throughput cannot see
that, the SLO is a threshold per request (the gate's argument, ``gate.py``, turned
around).

So where the plan drafts nothing, ``rescue_plan`` prices a d-deep chain (d = 1 .. D) for
each request behind ``fraction`` x its SLO after a plain step (``pacing.pace_cap`` above
one), the step verifying the roots and those chains only, and drafts the depth at which
the most more requests keep that pace than at the plain step (the shallower on a tie;
none where none does). A request keeps the pace at a step when the step's seconds over the
tokens it is expected to commit there (a chain's sum_{j<=d} alpha^j, one for a request
without a chain) are at most ``fraction`` x its SLO: a rate, not the one-step test of the
gate (``authors.holds``), because a prompt's prefill sets an urgent request back by 3.5-5.5
tokens at once, which no single step makes up and steady drafting does. A request that
keeps the pace at the plain step and not at the drafted one counts against the draft. The
pace is the option ``pace``'s fraction (0.7, fitted on the simulated development set for
the cap), not a constant of its own: aiming there, not at the SLO, leaves the margin the
prefills to come take. The policy's SLO phase then serves the chained requests their need
at the pace. Nothing here reads where an output ends, or what has not arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from adaserve.scheduler.acceptance import expected_chain_tokens
from adaserve.scheduler.authors import AdaServeRules
from adaserve.scheduler.pacing import pace_cap
from adaserve.scheduler.slo import BatchView


@dataclass(frozen=True, slots=True)
class Rescue:
    """The draft ``rescue_plan`` chose: chains of ``depth`` for the requests behind their
    pace, ``verify`` tokens in all (roots included), predicted to take ``seconds``."""

    depth: int
    verify: int
    seconds: float


def rescue_plan(batch: BatchView, alphas: np.ndarray, max_depth: int, t_plain_s: float,
                seconds: Callable[[int, int], float], fraction: float,
                rules: AdaServeRules) -> Rescue | None:
    """The rescue draft for ``batch`` (module docstring), or None where no depth up to
    ``max_depth`` keeps more requests at ``fraction`` x their SLO than the plain step of
    ``t_plain_s``. ``alphas`` [n]: per-request acceptance rates; ``seconds(d, verify)``: the
    predicted latency of d draft steps and ``verify`` verified tokens."""
    pace_s = fraction * batch.tpot_slo_s  # [n], NaN best effort
    behind = pace_cap(batch, t_plain_s, fraction, rules) > 1.0  # [n]; best effort: inf
    behind &= ~np.isnan(pace_s)
    k = int(behind.sum())
    if not k:
        return None
    a = np.clip(np.asarray(alphas, np.float64), 0.0, 1.0)  # [n]
    with np.errstate(invalid="ignore"):  # NaN (best effort) keeps no pace
        plain = t_plain_s <= pace_s  # [n]
    best: tuple[int, Rescue] | None = None
    for d in range(1, max_depth + 1):
        verify = batch.n + d * k
        t = seconds(d, verify)
        tokens = np.where(behind, expected_chain_tokens(a, d), 1.0)  # [n]
        with np.errstate(invalid="ignore"):
            drafted = t / tokens <= pace_s  # [n]
        gain = int(np.sum(drafted & ~plain)) - int(np.sum(plain & ~drafted))
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, Rescue(d, verify, t))
    return None if best is None else best[1]

"""The gate: draft only where it keeps more requests on pace than it pushes off.

A draft step lengthens every request's iteration. On a GPU beside a 70B target that is a
few percent; on the served CPU a planned tree made a step 1.39x the plain one for 1.16
tokens a request (5-8 running, results/served-overload-seeds), and `adaserve` then lost
to `incremental` under overload: the requests it drafted for (the urgent class, 1.0x the
baseline) were past saving, and the moderate class, on its SLO at the plain step, fell
off it at the drafted one. Rates of tokens per second (``depth.MeasuredDepth``,
``policy_base._worthwhile_depth``) cannot see this: it is a threshold per request.

So the gate counts requests. At the plain step's predicted latency t0 a request holds its
pace when one token meets its need there; at the planned depth d (latency t_d) when the
chain it is expected to commit, sum_{j<=d} alpha^j (the acceptance tracker's rate),
meets its need at t_d. The need is the authors' (``authors.raw_need``: catch-up
included, not clipped) at ``pace`` x the SLO, the fraction pacing keeps requests at. The
plan drafts only if the requests it saves (held at d, not at 0) outnumber the ones it
breaks (held at 0, not at d); on a tie, nobody gained, the plain step is kept, shorter
for every request. Best-effort requests count on neither side.
"""

from __future__ import annotations

import numpy as np

from adaserve.scheduler.acceptance import expected_chain_tokens
from adaserve.scheduler.authors import AdaServeRules, holds
from adaserve.scheduler.slo import BatchView


def drafting_pays(batch: BatchView, alphas: np.ndarray, depth: int, t_plain_s: float,
                  t_draft_s: float, fraction: float, rules: AdaServeRules) -> bool:
    """Whether a depth-``depth`` draft (predicted ``t_draft_s``) keeps more requests at
    ``fraction`` x their SLO than the plain step (``t_plain_s``) does (module docstring).
    ``alphas`` [n]: each request's per-depth acceptance rate."""
    has_slo = ~np.isnan(batch.tpot_slo_s)  # [n]
    tokens = expected_chain_tokens(np.clip(alphas, 0.0, 1.0), depth)  # [n]
    plain = holds(batch, t_plain_s, rules, fraction=fraction)  # [n]
    drafted = holds(batch, t_draft_s, rules, tokens, fraction)  # [n]
    saves = int(np.sum(has_slo & drafted & ~plain))
    breaks = int(np.sum(has_slo & plain & ~drafted))
    return saves > breaks

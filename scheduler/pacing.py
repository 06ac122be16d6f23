"""Pacing: how many tokens keep a request on a pace ahead of its SLO, and no faster.

AdaServe's throughput phase hands its leftover budget to the most probable nodes, so a
request far ahead of a lenient SLO (a 150 ms summary on a server iterating every 100 ms)
keeps taking tokens it does not need, and every request pays for them in iteration time:
verification of B tokens costs more than of fewer. Under load the requests that miss are
the ones a few percent over their SLO (docs/scheduler.md, improvement policies), so those milliseconds are
what decides them. Pacing caps each request at the tokens that bring it to a fraction of
its SLO after this iteration; the budget nobody needs is not spent.
"""

from __future__ import annotations

import numpy as np

from adaserve.scheduler.authors import AdaServeRules, raw_need
from adaserve.scheduler.slo import BatchView


def pace_cap(batch: BatchView, t_iter_s: float, fraction: float,
             rules: AdaServeRules) -> np.ndarray:
    """[n] tokens (root included) that put each request at ``fraction`` x its SLO after
    this iteration: ceil((t_iter * correction + l) / (fraction * SLO) - o), at least 1 (the
    root is always verified); inf for best-effort requests (no pace to keep).

    The same terms as the authors' need (authors.slo_need) at a tighter SLO, so a request
    the SLO phase must serve is never capped below its need."""
    pace = raw_need(batch, t_iter_s, rules, fraction)
    return np.where(np.isnan(batch.tpot_slo_s), np.inf, np.maximum(np.ceil(pace), 1.0))

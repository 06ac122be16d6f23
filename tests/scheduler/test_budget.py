"""The per-iteration verify budget chosen by predicted goodput (scheduler/budget.py, option
budget=goodput): hand-computed rates, and the policy verifying past B where chains pay."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (AcceptanceTracker, IterationLatency, LatencyModel,
                                SchedulerConfig, make_policy)
from adaserve.scheduler.budget import goodput_budget
from adaserve.scheduler.slo import SLO, BatchView, RequestProgress


def _batch(n, tpot_ms=None):
    return BatchView.from_progress([RequestProgress(f"r{i}", SLO.from_ms(tpot_ms), 0.0, 0, 100)
                                    for i in range(n)])


def test_the_budget_is_the_chain_count_with_the_most_tokens_per_second():
    # the dev CPU's shape: a 50-ms forward + 2 ms a verified token, a 3.5-ms draft step
    def seconds(d, b):
        return 0.05 + 2e-3 * b + 3.5e-3 * d

    alphas = np.full(6, 0.6)
    got = goodput_budget(6, alphas, budget=4, max_depth=8, seconds=seconds)

    def rate(d):  # by hand: 6 chains of depth d, each sum_{j<=d} 0.6^j tokens
        return 6 * sum(0.6 ** j for j in range(d + 1)) / seconds(d, 6 * (d + 1))

    best = max(range(9), key=rate)
    assert best > 0 and got == 6 * (best + 1)


def test_never_below_the_profiles_budget_and_none_where_drafting_cannot_pay():
    # verification priced steeply and a draft the target rarely accepts: the roots win,
    # and the budget stays B (the roots of 2 requests fit in B = 4 anyway)
    got = goodput_budget(2, np.full(2, 0.05), budget=4, max_depth=8,
                         seconds=lambda d, b: 0.05 + 0.02 * b + 0.01 * d)
    assert got == 4


def test_the_option_needs_the_cost_aware_planning():
    target = LatencyModel(alpha=0.0, gamma=2e-3, delta=0.05)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=3.5e-3)
    p = make_policy("adaserve:budget=goodput",
                    SchedulerConfig(budget=4, cost_aware_depth=False),
                    IterationLatency(target, draft),
                    AcceptanceTracker(prior_alpha=0.7, prior_weight=1e9))
    assert not p.plan(_batch(6, tpot_ms=30.0)).speculates
    with pytest.raises(ValueError, match="budget"):
        make_policy("adaserve:budget=huge", SchedulerConfig(budget=4))

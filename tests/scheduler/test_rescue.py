"""Option rescue (scheduler/rescue.py): where the cost-aware plan drafts nothing, chains for
the requests behind their pace, at the depth that keeps the most more requests at it."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (
    SLO,
    AcceptanceTracker,
    BatchView,
    IterationLatency,
    LatencyModel,
    RequestProgress,
    SchedulerConfig,
    make_policy,
)
from adaserve.scheduler.authors import AdaServeRules
from adaserve.scheduler.tree import CandidateBatch, CandidateTree
from adaserve.scheduler.rescue import rescue_plan

RULES = AdaServeRules()


def _batch(*requests):
    """(SLO ms or None, l seconds, o tokens) per request."""
    return BatchView.from_progress([
        RequestProgress(f"r{i}", SLO.from_ms(slo), l, o, 100, max_tokens_left=50)
        for i, (slo, l, o) in enumerate(requests)])


# the served CPU's shape: a 40 ms plain step, and a drafted one of 40 ms + 10 ms a draft
# step + 3 ms a verified token past the roots
def _seconds(n: int):
    return lambda d, verify: 0.040 + 0.010 * d + 0.003 * (verify - n)


# an urgent request (45 ms SLO, pace 0.7 x 45 = 31.5 ms) at 34 ms a token: behind its pace
URGENT = (45.0, 0.34, 9)
# a moderate (108 ms) and a relaxed (360 ms) request well ahead of theirs
MODERATE, RELAXED = (108.0, 0.5, 9), (360.0, 1.0, 9)


def test_a_chain_rescues_the_request_behind_its_pace_at_the_shallowest_depth_that_does():
    b = _batch(URGENT, MODERATE, RELAXED)
    got = rescue_plan(b, np.full(3, 0.6), 4, 0.040, _seconds(3), 0.7, RULES)
    # depth 1: 53 ms for 1.6 tokens = 33 ms, over the 31.5-ms pace; depth 2: 66 ms for
    # 1.96 tokens = 33.7 ms; no depth gets there at alpha 0.6 ...
    assert got is None
    # ... at alpha 0.8 depth 1 gives 1.8 tokens in 53 ms (29.4 ms): the chain for the
    # urgent request alone (3 roots + 1), and the others keep their pace at 53 ms
    got = rescue_plan(b, np.full(3, 0.8), 4, 0.040, _seconds(3), 0.7, RULES)
    assert got is not None and (got.depth, got.verify) == (1, 4)
    assert got.seconds == pytest.approx(0.053)


def test_no_rescue_where_nobody_is_behind_or_the_draft_breaks_as_many_as_it_saves():
    ahead = _batch((45.0, 0.2, 9), MODERATE)  # urgent at 20 ms a token: ahead of its pace
    assert rescue_plan(ahead, np.full(2, 0.9), 4, 0.040, _seconds(2), 0.7, RULES) is None
    # a second tight request (40 ms, pace 28 ms) ahead of its pace at a 25 ms plain step:
    # the chain's step (38 ms) saves the urgent one and breaks it, a tie: no draft
    tight = _batch(URGENT, (40.0, 0.1, 9))
    slow = lambda d, verify: 0.025 + 0.010 * d + 0.003 * (verify - 2)  # noqa: E731
    assert rescue_plan(tight, np.full(2, 0.9), 1, 0.025, slow, 0.7, RULES) is None
    best_effort = _batch((None, 0.5, 9), RELAXED)
    assert rescue_plan(best_effort, np.full(2, 0.9), 4, 0.040, _seconds(2), 0.7, RULES) is None


def _policy(rescue: str):
    # a 34-ms plain step for 3 requests and a draft step as dear as 4 verified tokens: at
    # alpha 0.6 no chain gives the batch more tokens per second than the plain step (3
    # chains of 1: 4.8 tokens in 55 ms against 3 in 34), so the cost-aware plan drafts none;
    # the urgent request's chain alone gives it 1.6 tokens in 49 ms, 30.6 ms a token
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.025)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.012)
    tracker = AcceptanceTracker(prior_alpha=0.6, prior_weight=1e9)
    return make_policy(f"adaserve:rescue={rescue}", SchedulerConfig(budget=2),
                       IterationLatency(target, draft), tracker)


def test_the_policy_drafts_for_the_urgent_request_only_with_rescue_on():
    b = _batch(URGENT, MODERATE, RELAXED)
    off, on = _policy("off"), _policy("on")
    assert not off.plan(b).speculates
    plan = on.plan(b)
    assert plan.speculates and plan.width == 1 and plan.budget == 3 + plan.depth
    # the SLO phase gives the urgent request its chain; the others keep their roots
    n = plan.depth + 1
    chain = CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                     np.r_[0.0, np.full(n - 1, np.log(0.6))])
    cands = CandidateBatch.from_trees([chain] * 3)
    sel = on.select(b, plan, cands)
    assert plan.depth == 1 and sel.counts.tolist() == [2, 1, 1]
    assert plan.t_spec_s == pytest.approx(0.049)
    assert "rescue=on" in on.options.text() and "rescue=off" in off.options.text()

"""Triage (adaserve-triage): requests out of reach of their SLO are served best-effort."""

import math

import numpy as np
import pytest

from adaserve.scheduler import (SLO, BatchView, CandidateBatch, CandidateTree, RequestProgress,
                                SchedulerConfig, SpecPlan, make_policy)
from adaserve.scheduler.pacing import pace_cap
from adaserve.scheduler.selection import top_yield, trim
from adaserve.scheduler.triage import unreachable


def _chain(*edge_probs):
    n = len(edge_probs) + 1
    return CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                    np.log(np.r_[1.0, edge_probs]))


def _view(rows, remaining=True):
    """rows: (tpot_ms, l seconds, o, R)."""
    return BatchView.from_progress([
        RequestProgress(f"r{i}", SLO.from_ms(t), l, o, 100, r if remaining else None)
        for i, (t, l, o, r) in enumerate(rows)
    ])


def test_unreachable_is_the_best_final_tpot_against_the_slo():
    # (l + ceil(R / a) * t) / (o + R) with t = 30 ms, a = 2.5 tokens per iteration:
    # r0: (1.0 + 4 * 0.03) / (10 + 10) = 56 ms > 50 ms   -> lost
    # r1: (0.4 + 4 * 0.03) / (10 + 10) = 26 ms <= 50 ms  -> reachable
    # r2: (1.0 + 4 * 0.03) / 20 = 56 ms <= 60 ms        -> reachable (looser SLO)
    # r3: (9.0 + 40 * 0.03) / (10 + 100) = 92.7 ms > 50 -> lost even with a long horizon
    batch = _view([(50, 1.0, 10, 10), (50, 0.4, 10, 10), (60, 1.0, 10, 10),
                   (50, 9.0, 10, 100)])
    lost = unreachable(batch, np.full(4, 2.5), 0.03)
    np.testing.assert_array_equal(lost, [True, False, False, True])
    best = (1.0 + math.ceil(10 / 2.5) * 0.03) / 20
    assert best == pytest.approx(0.056)


def test_a_long_horizon_lets_a_request_catch_up():
    # 1 s behind a 50 ms SLO after 10 tokens: lost with 10 tokens left, savable with 1000
    # at 2.5 tokens per 30 ms iteration (12 ms per token steady state)
    short, long_ = _view([(50, 1.0, 10, 10)]), _view([(50, 1.0, 10, 1000)])
    assert unreachable(short, np.array([2.5]), 0.03)[0]
    assert not unreachable(long_, np.array([2.5]), 0.03)[0]


def test_a_larger_yield_keeps_a_request_in_reach():
    batch = _view([(50, 1.2, 10, 20)])
    # a = 1: 20 iterations, (1.2 + 0.6) / 30 = 60 ms; a = 2.5: 8, (1.2 + 0.24) / 30 = 48 ms
    assert unreachable(batch, np.array([1.0]), 0.03)[0]
    assert not unreachable(batch, np.array([2.5]), 0.03)[0]
    # a below 1 counts as 1: the root is a token every iteration
    assert unreachable(batch, np.array([0.5]), 0.03)[0]
    # one iteration costing more than the SLO per token is lost at a = 1, saved at a = 2
    tight = _view([(20, 0.0, 0, 50)])
    assert unreachable(tight, np.array([1.0]), 0.03)[0]
    assert not unreachable(tight, np.array([2.0]), 0.03)[0]


def test_never_unreachable_without_horizon_slo_or_tokens():
    hopeless = [(10, 100.0, 1, 1)]
    assert unreachable(_view(hopeless), np.ones(1), 0.03)[0]
    assert not unreachable(_view(hopeless, remaining=False), np.ones(1), 0.03)[0]
    best_effort = BatchView.from_progress([RequestProgress("x", SLO(None), 100.0, 1, 0, 1)])
    assert not unreachable(best_effort, np.ones(1), 0.03)[0]
    nothing = _view([(10, 0.0, 0, 0)])  # o + R = 0: no TPOT to miss
    assert not unreachable(nothing, np.ones(1), 0.03)[0]
    assert unreachable(_view([]), np.ones(0), 0.03).shape == (0,)


def test_zero_iteration_latency_gives_up_only_requests_lost_whatever_happens():
    # t = 0: TPOT_best = l / (o + R)
    batch = _view([(50, 1.0, 10, 10), (50, 1.1, 10, 10)])  # 50 ms (on it), 55 ms
    np.testing.assert_array_equal(unreachable(batch, np.ones(2), 0.0), [False, True])


def test_top_yield_sums_the_best_nodes_root_included():
    # two chains side by side: f = 0.9, 0.45 (0.9*0.5) and 0.6, 0.06
    c = CandidateBatch.from_trees([_chain(0.9, 0.5), _chain(0.6, 0.1)])
    np.testing.assert_allclose(top_yield(c, 1), [1.0, 1.0])
    np.testing.assert_allclose(top_yield(c, 2), [1.9, 1.6])
    np.testing.assert_allclose(top_yield(c, 3), [2.35, 1.66])
    np.testing.assert_allclose(top_yield(c, 10), [2.35, 1.66])  # fewer nodes than k


def test_batch_view_max_tokens_left_is_optional_and_checked():
    base = _view([(50, 0.1, 1, 5)], remaining=False)
    assert base.max_tokens_left is None
    np.testing.assert_array_equal(_view([(50, 0.1, 1, 5)]).max_tokens_left, [5])
    ids = ("a", "b")
    with pytest.raises(ValueError, match="max_tokens_left"):
        BatchView(ids, np.ones(2), np.zeros(2), np.zeros(2, np.int64), np.zeros(2, np.int64),
                  np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="max_tokens_left"):
        RequestProgress("x", SLO(None), max_tokens_left=-1)


def _policy(name):
    return make_policy(name, SchedulerConfig(budget=8))


def _two_behind(remaining=True):
    # "lost": 2 s behind a 50 ms SLO with 4 tokens to go; "savable": 0.55 s for 8 tokens
    # after the first, 200 tokens to go
    return _view([(50, 2.0, 8, 4), (50, 0.55, 8, 200)], remaining)


def test_triage_gives_the_budget_to_the_request_that_can_still_attain():
    batch = _two_behind()
    plan = SpecPlan(depth=6, width=1, t_spec_s=0.03)
    cands = CandidateBatch.from_trees([_chain(*[0.9] * 6), _chain(*[0.9] * 6)])
    ada = _policy("adaserve-authors").select(batch, plan, cands)
    tri = _policy("adaserve-authors:triage=on").select(batch, plan, cands)
    # need = (0.03 * 1.05 + l) / 0.05 - (o + 1): lost 40.6 - 9 -> capped at d + 1 = 7,
    # savable 11.63 - 9 = 2.63; n_max = int(1.2 * 8 / 2) = 4 nodes; 6 to spare.
    # adaserve, ascending need: savable takes 2 (1 + 0.9 + 0.81 >= 2.63), lost the other 4
    np.testing.assert_allclose(ada.target, [7.0, 2.63])
    assert ada.counts.tolist() == [5, 3] and not ada.slo_met[0] and ada.slo_met[1]
    # triage: the lost request's best final TPOT is (2.0 + 1 x 0.03) / 12 = 169 ms > 50 ms,
    # so it leaves the SLO phase; savable keeps its 2, and the throughput phase hands the
    # other 4 to the best f: lost's 0.9, 0.81, 0.729 and savable's 0.729 (depth tie: row 0)
    assert tri.target.tolist() == [1.0, pytest.approx(2.63)]
    assert tri.counts.tolist() == [4, 4]
    assert tri.tokens == ada.tokens == 8


def test_triage_is_adaserve_when_the_horizon_is_unknown_or_all_are_in_reach():
    plan = SpecPlan(depth=6, width=1, t_spec_s=0.03)
    cands = CandidateBatch.from_trees([_chain(*[0.9] * 6), _chain(*[0.8] * 6)])
    in_reach = _view([(50, 0.45, 8, 200), (50, 0.40, 8, 200)])
    for batch in (_two_behind(remaining=False), in_reach):
        ada = _policy("adaserve-authors").select(batch, plan, cands)
        tri = _policy("adaserve-authors:triage=on").select(batch, plan, cands)
        np.testing.assert_array_equal(tri.mask, ada.mask)
        np.testing.assert_array_equal(tri.target, ada.target)


def test_paced_triage_is_triage_then_pacing():
    # the lost request leaves the SLO phase (triage's targets), then every row is cut to
    # its pace cap (paced's trim): the composition, not a third rule
    batch = _two_behind()
    plan = SpecPlan(depth=6, width=1, t_spec_s=0.03)
    cands = CandidateBatch.from_trees([_chain(*[0.9] * 6), _chain(*[0.9] * 6)])
    config = SchedulerConfig(budget=8)
    tri = _policy("adaserve-authors:triage=on").select(batch, plan, cands)
    both = make_policy("adaserve-authors:pace=0.7,triage=on", config).select(batch, plan, cands)
    want = trim(cands, tri, pace_cap(batch, plan.t_spec_s, 0.7, config.rules))
    np.testing.assert_array_equal(both.mask, want.mask)
    np.testing.assert_array_equal(both.target, tri.target)
    # savable (0.55 s for 9 tokens, 50 ms at pace 0.7 = 35 ms) is behind its pace: it
    # keeps all 4; lost is far behind too and keeps what the throughput phase gave it
    assert both.counts.tolist() == tri.counts.tolist() == [4, 4]
    # ahead of pace instead, the same request gives tokens back
    ahead = _view([(50, 2.0, 8, 4), (50, 0.2, 8, 200)])
    paced_both = make_policy("adaserve-authors:pace=0.7,triage=on", config).select(ahead, plan, cands)
    assert paced_both.counts[1] < _policy("adaserve-authors:triage=on").select(ahead, plan, cands).counts[1]

"""The measured draft depth (scheduler/depth.py) and adaserve-paced-triage-depth: the depth
moves to the neighbour whose tight requests committed the most tokens per second, explores
one level either side, and counts an iteration at the depth it drafted."""

import numpy as np
import pytest

from adaserve.scheduler import (SLO, BatchView, CandidateBatch, CandidateTree, IterationLatency,
                                LatencyModel, RequestProgress, SchedulerConfig, make_policy)
from adaserve.scheduler.depth import MeasuredDepth, need_floor


def test_it_starts_at_the_cap_and_explores_either_side():
    rule = MeasuredDepth(period=4)
    # nothing measured: the cap; plans 2 and 4 (phase 2 and 0) probe one level each way
    assert [rule.next_depth(5) for _ in range(4)] == [5, 4, 5, 5]
    assert rule.depth == 5
    rule = MeasuredDepth(period=4)
    rule.depth = 1
    assert [rule.next_depth(1) for _ in range(4)] == [1, 1, 1, 1]  # no level 0, none past the cap


def test_it_moves_to_the_neighbour_with_the_most_tokens_per_second():
    rule = MeasuredDepth(period=100)
    rule.next_depth(4)  # at 4
    rule.record(4, 2.4, 0.060)  # 40 tok/s
    rule.record(3, 2.2, 0.050)  # 44 tok/s
    rule.record(5, 2.5, 0.070)  # 35.7 tok/s
    assert rule.next_depth(4) == 3
    # at 3 the neighbours are 2, 3, 4: 2 unmeasured, 4 measured worse
    assert rule.next_depth(4) == 3
    rule.record(2, 2.0, 0.040)  # 50 tok/s
    assert rule.next_depth(4) == 2
    # one level per iteration: 5 is never compared from 2, and the cap bounds the depth
    assert rule.next_depth(1) == 1 and rule.depth == 1


def test_a_tie_keeps_the_shallower_depth():
    rule = MeasuredDepth(period=100)
    rule.next_depth(3)
    rule.record(2, 2.0, 0.040)
    rule.record(3, 2.5, 0.050)  # both 50 tok/s
    assert rule.next_depth(3) == 2


def test_measurements_decay_toward_the_recent():
    rule = MeasuredDepth(decay=0.5)
    rule.record(2, 2.0, 0.04)
    rule.record(2, 3.0, 0.06)
    assert rule.rate(2) == pytest.approx(2.5 / 0.05)
    assert rule.rate(3) is None


@pytest.mark.parametrize("kwargs", [{"period": 1}, {"decay": 1.0}, {"decay": -0.1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        MeasuredDepth(**kwargs)


def test_a_floor_bounds_the_depth_and_its_probes():
    rule = MeasuredDepth(period=4)
    rule.next_depth(4)
    rule.record(1, 2.0, 0.030)  # the best rate by far
    rule.record(2, 2.0, 0.045)
    rule.record(3, 2.2, 0.050)
    rule.depth = 2
    # from 2 the best neighbour is 1, but the floor is 2: plans 2-5 stay at 2, the
    # shallower probe (plan 2) is not taken, the deeper one (plan 4) is
    assert [rule.next_depth(4, floor=2) for _ in range(4)] == [2, 2, 3, 2]
    assert rule.next_depth(4) == 1  # without the floor it moves to the best rate
    assert rule.next_depth(2, floor=3) == 2  # Eq. 8's cap wins over a higher floor
    with pytest.raises(ValueError):
        rule.next_depth(4, floor=0)


def test_the_need_floor_holds_the_median_tight_requests_need():
    ms = 1e-3
    slo = np.array([16.8, 16.8, 33.6, 150.0, np.nan]) * ms  # two urgent, one x1.2, loose, none
    # iterations of 45 / 50 / 55 / 60 ms at depths 1-4: the three first are tight, and the
    # median need (an urgent request's) is 2.81 tokens at depth 1 (which holds 2), 3.13 at
    # depth 2 (holds 3), 3.44 at depth 3 (holds 4): the floor is 3
    t = [0.045, 0.050, 0.055, 0.060]
    assert need_floor(slo, t, 1.05) == 3
    assert need_floor(slo[2:], t, 1.05) == 1  # x1.2 alone: 1.41 tokens, held by depth 1
    assert need_floor(np.array([20.0, 20.0]) * ms, [0.045, 0.060], 1.0) == 2  # 2.25, then 3.0
    assert need_floor(slo[3:], t, 1.05) == 1  # nobody tight
    assert need_floor(slo, [0.0] * 4, 1.05) == 1  # unpriced
    # a need no depth up to the cap holds: the depth that comes closest, usually the cap
    assert need_floor(np.array([10.0]) * ms, [0.040, 0.045, 0.050], 1.0) == 3  # 4, 4.5, 5
    # unless each level adds more latency than a token's worth: then the shallowest
    assert need_floor(np.array([10.0]) * ms, [0.040, 0.080, 0.120], 1.0) == 1  # 4, 8, 12


def test_bad_records_are_refused():
    rule = MeasuredDepth()
    for args in ((0, 2.0, 0.05), (2, 0.5, 0.05), (2, 2.0, -1.0)):
        with pytest.raises(ValueError):
            rule.record(*args)
    with pytest.raises(ValueError):
        rule.next_depth(0)


# --- the policy ------------------------------------------------------------------------

def _latency(draft=True):
    target = LatencyModel(alpha=0.0, gamma=1e-3, delta=0.030)  # 30 ms + 1 ms a token
    step = LatencyModel(alpha=0.0, gamma=0.0, delta=0.005)  # 5 ms a draft step
    return IterationLatency(target, step if draft else None)


def _batch():
    # "tight": a 25 ms SLO, shorter than any iteration here (>= 35 ms): it needs drafting,
    # under 2 tokens a step (so the need floor stays at depth 1); "loose": 500 ms, far
    # ahead (pacing trims it to its root whatever the depth)
    return BatchView.from_progress([RequestProgress("tight", SLO.from_ms(25), 0.2, 9, 100),
                                    RequestProgress("loose", SLO.from_ms(500), 0.2, 9, 100)])


def _chains(batch, depth, p=0.9):
    n = depth + 1
    tree = CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                    np.log(np.r_[1.0, np.full(depth, p)]))
    return CandidateBatch.from_trees([tree] * batch.n)


def _policy(draft=True, budget=16):
    return make_policy("adaserve",
                       SchedulerConfig(budget=budget, max_depth=4, max_width=1), _latency(draft))


def test_the_policy_selects_as_paced_triage_at_its_depth():
    batch = _batch()
    ours = _policy()
    plan = ours.plan(batch)
    base = make_policy("adaserve-authors:pace=0.7,triage=on", ours.config, _latency()).plan(batch)
    assert plan == base  # nothing measured yet: Eq. 8's depth, priced the same
    cands = _chains(batch, plan.depth)
    sel = ours.select(batch, plan, cands)
    ref = make_policy("adaserve-authors:pace=0.7,triage=on", ours.config, _latency()).select(batch, plan, cands)
    np.testing.assert_array_equal(sel.mask, ref.mask)
    assert sel.counts[1] == 1  # the loose request is paced to its root


def test_only_tight_requests_are_counted_at_the_depth_drafted():
    batch = _batch()
    policy = _policy()
    plan = policy.plan(batch)
    sel = policy.select(batch, plan, _chains(batch, plan.depth))
    # the loose request "accepted" 3 (impossible for a root, but it must not be read)
    policy.observe(batch.request_ids, sel, np.array([2, 3]))
    assert policy.depth._tokens == {plan.depth: 3.0}  # 1 + the tight request's 2
    predicted = policy.predict_latency(batch, plan, sel.tokens)
    assert policy.depth._seconds[plan.depth] == pytest.approx(predicted)


def test_a_late_report_is_counted_at_the_depth_that_iteration_drafted():
    # the SGLang worker reports an iteration one step late: two plans before the first
    # observe, at different depths; each report must land on its own depth
    batch = _batch()
    policy = _policy()
    policy.depth = MeasuredDepth(period=2)  # plan 1 probes one level shallower, plan 2 not
    p1 = policy.plan(batch)
    s1 = policy.select(batch, p1, _chains(batch, p1.depth))
    p2 = policy.plan(batch)
    s2 = policy.select(batch, p2, _chains(batch, p2.depth))
    assert (p1.depth, p2.depth) == (1, 2)  # Eq. 8 gives 2 here
    policy.observe(batch.request_ids, s1, np.array([1, 0]))
    policy.observe(batch.request_ids, s2, np.array([2, 0]))
    assert policy.depth._tokens == {1: 2.0, 2: 3.0}
    policy.observe(batch.request_ids, s1, np.array([0, 0]))  # reported twice: ignored
    assert policy.depth._tokens == {1: 2.0, 2: 3.0}


def test_the_depth_follows_what_the_tight_requests_got():
    # the shallower level gave the tight request as many tokens in less time: it moves
    # there; had the deeper one given enough more, it would have stayed
    for deeper_accepts, expected in ((1, 1), (2, 2)):
        batch = _batch()
        policy = _policy()
        policy.depth = MeasuredDepth(period=2)
        p1 = policy.plan(batch)  # depth 1 (the probe)
        s1 = policy.select(batch, p1, _chains(batch, p1.depth))
        p2 = policy.plan(batch)  # depth 2
        s2 = policy.select(batch, p2, _chains(batch, p2.depth))
        policy.observe(batch.request_ids, s1, np.array([1, 0]))  # 2 tokens in 39 ms
        policy.observe(batch.request_ids, s2, np.array([deeper_accepts, 0]))  # in 46 ms
        policy.plan(batch)  # plan 3 probes below its choice (period 2), so read the choice
        assert policy.depth.depth == expected


def test_without_a_priced_draft_the_depth_is_eq8s():
    batch = _batch()
    policy = _policy(draft=False)
    ref = make_policy("adaserve-authors:pace=0.7,triage=on", policy.config, _latency(draft=False))
    for _ in range(25):  # through the exploration phases
        plan = policy.plan(batch)
        assert plan == ref.plan(batch)
        sel = policy.select(batch, plan, _chains(batch, plan.depth))
        policy.observe(batch.request_ids, sel, np.array([0, 0]))
    assert policy.depth.depth is None and not policy._pending


def test_a_report_of_the_requests_still_running_counts_their_rows():
    # the SGLang worker drops requests that finished since and sends their sub-selection
    from adaserve.scheduler import Selection
    batch = _batch()
    policy = _policy()
    plan = policy.plan(batch)
    sel = policy.select(batch, plan, _chains(batch, plan.depth))
    loose_only = Selection(sel.mask[[1]], sel.expected_accepted[[1]], sel.target[[1]])
    policy.observe(["loose"], loose_only, np.array([0]))  # no tight request in it
    assert policy.depth._tokens == {} and not policy._pending
    plan = policy.plan(batch)
    sel = policy.select(batch, plan, _chains(batch, plan.depth))
    tight_only = Selection(sel.mask[[0]], sel.expected_accepted[[0]], sel.target[[0]])
    other = Selection(~sel.mask[[0]], sel.expected_accepted[[0]], sel.target[[0]])
    policy.observe(["tight"], other, np.array([2]))  # another iteration's nodes: not this one
    assert policy.depth._tokens == {}
    policy.observe(["tight"], tight_only, np.array([2]))
    assert policy.depth._tokens == {plan.depth: 3.0}


def test_urgent_requests_keep_the_draft_deep_enough_for_their_need():
    # measured rates favour depth 1; requests whose SLO needs 3.5 tokens a step make the
    # policy draft at depth 3 (4 tokens) instead; milder tight requests let it go to 1
    def depth_for(slo_ms):
        policy = make_policy("adaserve",
                             SchedulerConfig(budget=16, max_depth=4, max_width=1,
                                             cost_aware_depth=False), _latency())
        policy.depth = MeasuredDepth(period=1000)  # no probes here
        policy.depth.depth = 2
        for depth, tokens, seconds in ((1, 2.0, 0.039), (2, 2.0, 0.046), (3, 2.1, 0.053)):
            policy.depth.record(depth, tokens, seconds)
        batch = BatchView.from_progress(
            [RequestProgress(f"r{i}", SLO.from_ms(slo_ms), 0.1, 9, 100) for i in range(2)]
            + [RequestProgress("loose", SLO.from_ms(500), 0.2, 9, 100)])
        return policy.plan(batch).depth
    assert depth_for(17) == 3
    assert depth_for(35) == 1

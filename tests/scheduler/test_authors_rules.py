"""`adaserve` decides as its authors' code does (scheduler/authors.py): one hand-built batch
per rule, each expectation computed by hand from the rule."""

import numpy as np
import pytest

from adaserve.scheduler import (SLO, AdaServeRules, BatchView, CalibratedLatency, CandidateBatch,
                                CandidateTree, IterationLatency, LatencyModel, RequestProgress,
                                SchedulerConfig, SpecPlan, make_policy)
from adaserve.scheduler.authors import in_slo_phase, slo_need, slo_token_cap, tree_shape


def _chain(*edge_probs):
    n = len(edge_probs) + 1
    return CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                    np.log(np.r_[1.0, edge_probs]))


def _view(*rows):
    """rows: (tpot_ms or None, l seconds, o, relative)."""
    return BatchView.from_progress([
        RequestProgress(f"r{i}", SLO.from_ms(t, rel) if t else SLO(None), l, o, 100)
        for i, (t, l, o, rel) in enumerate(rows)])


def test_need_is_the_iteration_and_the_catch_up_in_slo_tokens_counting_the_prefill_token():
    # 40 ms SLO, l = 0.4 s, o = 8 tokens after the first: 9 decoded as the authors count.
    # t = 60 ms: (0.06 * 1.05 + 0.4) / 0.04 - 9 = 11.575 - 9 = 2.575
    batch = _view((40, 0.4, 8, True), (40, 0.1, 8, True), (40, 2.0, 8, True),
                  (None, 0.4, 8, False))
    need = slo_need(batch, 0.06, 5, AdaServeRules())
    # r1 is ahead (2.8 - 9 < 1): clipped up to 1; r2 far behind: clipped to d + 1 = 6;
    # best effort: 1
    np.testing.assert_allclose(need, [2.575, 1.0, 6.0, 1.0])
    # the text's count (o, not o + 1) asks one token more
    text = slo_need(batch, 0.06, 5, AdaServeRules(count_prefill_token=False))
    assert text[0] == pytest.approx(3.575)
    # the correction factor scales only the iteration: 1.0 drops 0.06 * 0.05 / 0.04
    assert slo_need(batch, 0.06, 5, AdaServeRules(correction=1.0))[0] == pytest.approx(2.5)


def test_the_slo_phase_serves_the_smallest_need_first():
    # two requests behind a 40 ms SLO, chains of 0.9; B = 4 leaves 2 to spare.
    # need: r0 (0.3 + 0) / 0.04 - 6 = 1.5, r1 (0.5) / 0.04 - 6 = 6.5 -> capped at d + 1 = 4
    batch = _view((40, 0.3, 5, True), (40, 0.5, 5, True))
    plan = SpecPlan(depth=3, width=1)
    cands = CandidateBatch.from_trees([_chain(0.9, 0.9, 0.9), _chain(0.9, 0.9, 0.9)])
    ours = make_policy("adaserve-authors", SchedulerConfig(budget=4)).select(batch, plan, cands)
    # ascending: r0 takes one node (1 + 0.9 >= 1.5), r1 the other spare one
    assert ours.counts.tolist() == [2, 2]
    assert ours.target.tolist() == [1.5, 4.0]
    # most-behind first (the text's order, same needs): r1 takes both spare nodes
    text_order = make_policy("adaserve-authors", SchedulerConfig(
        budget=4, rules=AdaServeRules(ascending=False))).select(batch, plan, cands)
    assert text_order.counts.tolist() == [1, 3]


def test_a_request_takes_at_most_n_max_nodes_past_its_root_in_the_slo_phase():
    # n_max = int(1.2 B / n): B = 10, n = 2 -> 6
    assert slo_token_cap(10, 2, AdaServeRules()) == 6
    assert slo_token_cap(10, 2, AdaServeRules(n_max_factor=0.5)) == 2
    # r0 needs d + 1 = 9 (far behind) on a chain of 8 nodes of f 0.99; r1 is best effort
    # with a better chain (f = 1 - 1e-9): the SLO phase gives r0 exactly 6 nodes, the
    # throughput phase the remaining 2 spare to r1's best nodes
    batch = _view((20, 5.0, 5, True), (None, 0.0, 5, False))
    plan = SpecPlan(depth=8, width=1)
    cands = CandidateBatch.from_trees([_chain(*[0.99] * 8), _chain(*[1 - 1e-9] * 8)])
    sel = make_policy("adaserve-authors", SchedulerConfig(budget=10)).select(batch, plan, cands)
    assert sel.counts.tolist() == [7, 3]


def test_requests_with_a_millisecond_slo_can_be_kept_out_of_the_slo_phase():
    # r0: SLO as a multiple of the baseline (relative), r1: the same SLO in milliseconds
    batch = _view((40, 0.5, 5, True), (40, 0.5, 5, False))
    authors = AdaServeRules(absolute_in_slo_phase=False)
    np.testing.assert_array_equal(in_slo_phase(batch, authors), [True, False])
    np.testing.assert_array_equal(in_slo_phase(batch, AdaServeRules()), [True, True])
    plan = SpecPlan(depth=3, width=1)
    cands = CandidateBatch.from_trees([_chain(0.5, 0.5, 0.5), _chain(0.9, 0.9, 0.9)])
    # B = 5, 3 to spare; both need d + 1 = 4 (6.5 capped). Authors: only r0 is served in
    # the SLO phase (its whole chain, 3 nodes); the throughput phase has nothing left for r1
    sel = make_policy("adaserve-authors", SchedulerConfig(budget=5, rules=authors)).select(
        batch, plan, cands)
    assert sel.counts.tolist() == [4, 1]
    assert sel.target.tolist() == [4.0, 1.0]
    # default: both served with equal needs; ties keep batch order, so r0 still takes its
    # n_max = int(1.2 * 5 / 2) = 3 and nothing is left for r1, which is asked for its need
    both = make_policy("adaserve-authors", SchedulerConfig(budget=5)).select(batch, plan, cands)
    assert both.target.tolist() == [4.0, 4.0] and both.counts.tolist() == [4, 1]
    # an engine that does not say how an SLO was stated: every SLO counts as relative
    unknown = BatchView(batch.request_ids, batch.tpot_slo_s, batch.decode_latency_s,
                        batch.decoded_tokens, batch.context_tokens)
    np.testing.assert_array_equal(in_slo_phase(unknown, authors), [True, True])


@pytest.mark.parametrize("n, budget, b2, dmin, c1, c2, want", [
    (1, 256, 96, 4, 0, 0, (8, 3)),    # floor(256/1) - 1 = 255 -> D_max 8; 96 / 1 -> W_max 3
    (30, 256, 96, 4, 0, 0, (7, 3)),   # floor(256/30) - 1 = 7; floor(96/30) = 3
    (40, 256, 96, 4, 0, 0, (5, 2)),   # 6 - 1 = 5; 2
    (60, 256, 96, 4, 0, 0, (4, 1)),   # 4 - 1 = 3 -> D_min 4; 1
    (10, 256, 96, 4, 22, 0, (7, 3)),  # c1: floor(256/32) - 1 = 7
    (60, 256, 96, 4, 0, 1, (4, 2)),   # c2: floor(96/60) + 1 = 2
    (200, 128, 80, 3, 0, 0, (3, 1)),  # 0 - 1 -> D_min 3; 0 -> at least 1
])
def test_depth_and_width_follow_the_eurosys_eq_8_and_9(n, budget, b2, dmin, c1, c2, want):
    rules = AdaServeRules(depth_offset=c1, width_offset=c2)
    assert tree_shape(n, budget, b2, dmin, 8, 3, rules) == want
    cfg = SchedulerConfig(budget=budget, max_depth=8, max_width=3, min_depth=dmin,
                          draft_budget=b2, rules=rules)
    if n < budget:  # the roots alone do not fill B: the policy plans that shape
        plan = make_policy("adaserve-authors", cfg).plan(BatchView.from_progress(
            [RequestProgress(i, SLO(None)) for i in range(n)]))
        assert (plan.depth, plan.width) == want


def test_the_authors_predictor_prices_the_draft_as_one_constant_and_never_adapts():
    verify = LatencyModel(alpha=0.0, gamma=1e-4, delta=0.03)
    pred = CalibratedLatency(IterationLatency(verify, None, draft_fixed_s=0.07), adapt=False)
    # 70 ms for any draft shape, + the verify model's 30 ms + 0.1 ms per token
    assert pred.predict(0, [4, 12, 12], 256) == pytest.approx(0.07 + 0.03 + 0.0256)
    assert pred.predict(0, [4], 256) == pytest.approx(0.07 + 0.03 + 0.0256)
    assert pred.predict(0, [], 4) == pytest.approx(0.03 + 0.0004)  # no draft: no draft cost
    pred.observe(0, [4], 256, 1.0)  # a slow iteration changes nothing
    assert pred.predict(0, [4], 256) == pytest.approx(0.1256)
    with pytest.raises(ValueError, match="needs a base"):
        CalibratedLatency(None, adapt=False)

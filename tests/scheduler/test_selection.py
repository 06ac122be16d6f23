"""Algorithm 2 selection against Algorithm 1 (the oracle) and a brute-force optimum."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaserve.scheduler import (
    CandidateBatch,
    CandidateTree,
    algorithm1,
    capped_requirement,
    select_all,
    select_equal_share,
    select_global_greedy,
    select_roots,
    select_slo_customized,
)
from tree_strategies import expanded_trees, is_ancestor_closed, trees

UNCAPPED = 10**6  # n_max large enough never to bind


def _adaserve(batch: CandidateBatch, budget: int, a: np.ndarray, n_max: int = UNCAPPED):
    depth = int(batch.depth.max()) if batch.n else 0
    return select_slo_customized(batch, budget, a, capped_requirement(a, depth), n_max)


requirements = st.floats(-2.0, 6.0, allow_nan=False)
batches = st.lists(trees(), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(batch_trees=batches, budget=st.integers(0, 40), data=st.data())
def test_selection_is_ancestor_closed_and_within_budget(batch_trees, budget, data):
    batch = CandidateBatch.from_trees(batch_trees)
    a = np.array(data.draw(st.lists(requirements, min_size=batch.n, max_size=batch.n)))
    n_max = data.draw(st.integers(1, 12))
    for sel in (_adaserve(batch, budget, a, n_max), select_global_greedy(batch, budget),
                select_equal_share(batch, budget)):
        assert sel.tokens <= max(budget, batch.n)
        for i, tree in enumerate(batch_trees):
            nodes = sel.nodes(i)
            assert is_ancestor_closed(tree, nodes)
            assert np.all(tree.path_prob[nodes[1:]] > 0)  # zero-probability nodes never chosen
            assert sel.expected_accepted[i] == pytest.approx(tree.path_prob[nodes].sum())


@settings(max_examples=300, deadline=None)
@given(batch_trees=batches, budget=st.integers(0, 40), data=st.data())
def test_adaserve_agrees_with_algorithm1(batch_trees, budget, data):
    batch = CandidateBatch.from_trees(batch_trees)
    a = np.array(data.draw(st.lists(requirements, min_size=batch.n, max_size=batch.n)))
    a_cap = capped_requirement(a, int(batch.depth.max()))
    sel = _adaserve(batch, budget, a)
    oracle = algorithm1(batch_trees, a_cap, budget)
    assert bool(sel.slo_met.all()) == oracle.valid
    if oracle.valid:  # every A_cap met, and the optimum reached with the same trees
        assert sel.expected_accepted.sum() == pytest.approx(oracle.objective)
        for i in range(batch.n):
            np.testing.assert_array_equal(sel.nodes(i), oracle.selected[i])


@settings(max_examples=300, deadline=None)
@given(batch_trees=batches, budget=st.integers(0, 40), n_max=st.integers(1, 4), data=st.data())
def test_adaserve_agrees_with_algorithm1_under_n_max(batch_trees, budget, n_max, data):
    """n_max small enough to bind often: a request stops at n_max tokens in the SLO phase,
    and only the throughput phase may give it more; the oracle does the same."""
    batch = CandidateBatch.from_trees(batch_trees)
    a = np.array(data.draw(st.lists(st.floats(0.0, 6.0), min_size=batch.n, max_size=batch.n)))
    a_cap = capped_requirement(a, int(batch.depth.max()))
    sel = _adaserve(batch, budget, a, n_max)
    oracle = algorithm1(batch_trees, a_cap, budget, n_max=n_max)
    if oracle.valid:
        for i in range(batch.n):
            np.testing.assert_array_equal(sel.nodes(i), oracle.selected[i])


def test_n_max_binds_and_the_throughput_phase_spends_the_rest():
    # two chains; request 0 needs 3 tokens (A_cap 3) but n_max = 2 lets it take one node in
    # the SLO phase; the throughput phase then ranks every open node by f across both
    chain0 = CandidateTree.from_edges([-1, 0, 1, 2], [1, 2, 3, 4], np.log([1.0, 0.5, 0.9, 0.9]))
    chain1 = CandidateTree.from_edges([-1, 0, 1], [5, 6, 7], np.log([1.0, 0.8, 0.9]))
    batch = CandidateBatch.from_trees([chain0, chain1])
    a = np.array([3.0, 0.0])
    # f: chain0 0.5, 0.45, 0.405; chain1 0.8, 0.72. Budget 5 = 2 roots + 3.
    sel = _adaserve(batch, 5, a, n_max=2)
    oracle = algorithm1([chain0, chain1], capped_requirement(a, 3), 5, n_max=2)
    assert oracle.valid
    # SLO phase: chain0's node 1 (f 0.5); then throughput: chain1's 0.8 and 0.72
    np.testing.assert_array_equal(sel.nodes(0), [0, 1])
    np.testing.assert_array_equal(sel.nodes(1), [0, 1, 2])
    for i in range(2):
        np.testing.assert_array_equal(sel.nodes(i), oracle.selected[i])
    # without the cap the SLO phase takes all three of chain0's nodes (sum 2.355 < 3)
    uncapped = _adaserve(batch, 5, a)
    np.testing.assert_array_equal(uncapped.nodes(0), [0, 1, 2, 3])
    np.testing.assert_array_equal(uncapped.nodes(1), [0])


@settings(max_examples=200, deadline=None)
@given(batch_trees=batches, budget=st.integers(0, 40), data=st.data())
def test_no_slo_pressure_equals_global_greedy(batch_trees, budget, data):
    batch = CandidateBatch.from_trees(batch_trees)
    a = np.array(data.draw(st.lists(st.floats(-5.0, 1.0), min_size=batch.n, max_size=batch.n)))
    np.testing.assert_array_equal(_adaserve(batch, budget, a).mask,
                                  select_global_greedy(batch, budget).mask)


@settings(max_examples=100, deadline=None)
@given(batch_trees=st.lists(expanded_trees(), min_size=1, max_size=3),
       budget=st.integers(1, 30))
def test_throughput_objective_is_algorithm1_optimum_on_expanded_trees(batch_trees, budget):
    batch = CandidateBatch.from_trees(batch_trees)
    zero = np.zeros(batch.n)
    oracle = algorithm1(batch_trees, zero, budget)
    assert oracle.valid
    assert _adaserve(batch, budget, zero).expected_accepted.sum() == pytest.approx(
        oracle.objective)


def _brute_force(batch_trees, targets, budget):
    """Best objective over every ancestor-closed selection meeting every target; None if none."""
    nodes = [(i, v) for i, t in enumerate(batch_trees) for v in range(1, t.size)
             if t.path_prob[v] > 0]
    spare = budget - len(batch_trees)
    best = None
    for k in range(0, max(min(spare, len(nodes)), 0) + 1):  # roots always run
        for combo in itertools.combinations(nodes, k):
            per = [[0] + [v for j, v in combo if j == i] for i in range(len(batch_trees))]
            if not all(is_ancestor_closed(t, np.array(p)) for t, p in zip(batch_trees, per)):
                continue
            sums = [t.path_prob[p].sum() for t, p in zip(batch_trees, per)]
            if all(s >= a - 1e-9 for s, a in zip(sums, targets)):
                best = max(best or 0.0, sum(sums))
    return best


@settings(max_examples=150, deadline=None)
@given(batch_trees=st.lists(trees(max_nodes=5), min_size=1, max_size=3),
       budget=st.integers(0, 7), data=st.data())
def test_algorithm1_matches_brute_force(batch_trees, budget, data):
    """The oracle itself: INVALID exactly when nothing is feasible, else the true optimum."""
    targets = data.draw(st.lists(st.floats(0.0, 3.0), min_size=len(batch_trees),
                                 max_size=len(batch_trees)))
    best = _brute_force(batch_trees, targets, budget)
    oracle = algorithm1(batch_trees, targets, budget)
    assert oracle.valid == (best is not None)
    if best is not None:
        assert oracle.objective == pytest.approx(best)


def _chain(*edge_probs):
    n = len(edge_probs) + 1
    return CandidateTree.from_edges(np.arange(-1, n - 1), np.arange(n),
                                    np.log([1.0, *edge_probs]))


def test_figure2_analogue():
    """Seed 002 Fig. 2: two requests, budget 8, SLO phase then throughput phase.

    Our A counts the root (the bonus token) as 1, so the figure's thresholds 0.6 and 0.8 on
    speculated tokens are 1.6 and 1.8 here.
    """
    # r0: t1 (.7) -> t3 (.7*.8=.56) ; t2 (.2) ; t5 child of t3 (.56*.9=.504)
    r0 = CandidateTree.from_edges([-1, 0, 0, 1, 3], np.arange(5), np.log([1, .7, .2, .8, .9]))
    # r1: t1 (.5), t2 (.4), t3 child of t1 (.5*.9=.45), t4 child of t2 (.4*.5=.2)
    r1 = CandidateTree.from_edges([-1, 0, 0, 1, 2], np.arange(5), np.log([1, .5, .4, .9, .5]))
    batch = CandidateBatch.from_trees([r0, r1])
    a = np.array([1.6, 1.8])
    sel = select_slo_customized(batch, 8, a, a, UNCAPPED)
    assert sel.nodes(0).tolist() == [0, 1, 3, 4]  # t1 for the SLO, then t3, t5 for throughput
    assert sel.nodes(1).tolist() == [0, 1, 2, 3]  # t1, t2 for the SLO, then t3
    assert sel.tokens == 8 and sel.slo_met.all()


def test_most_behind_request_is_served_first_when_budget_is_tight():
    t = _chain(0.5, 0.5)
    batch = CandidateBatch.from_trees([t, t])
    a = np.array([1.4, 1.45])
    sel = select_slo_customized(batch, 3, a, a, UNCAPPED)  # one speculative token to give
    assert sel.counts.tolist() == [1, 2]
    assert sel.slo_met.tolist() == [False, True]


def test_unreachable_target_takes_whole_tree_up_to_n_max():
    hopeless = _chain(0.1, 0.1, 0.1)
    easy = _chain(0.9, 0.9, 0.9)
    batch = CandidateBatch.from_trees([hopeless, easy])
    a = np.array([4.0, 0.0])
    uncapped = select_slo_customized(batch, 10, a, a, UNCAPPED)
    assert uncapped.counts.tolist() == [4, 4] and not uncapped.slo_met[0]
    capped = select_slo_customized(batch, 5, a, a, n_max=2)  # 3 spare tokens
    # the hopeless request gets only n_max - 1 = 1 node in the SLO phase; the rest goes to
    # the best nodes overall, which are the easy request's
    assert capped.counts.tolist() == [2, 3]


def test_ties_break_by_depth_then_index():
    # node 1 (depth 1, f .5), node 2 (depth 1, f .5), node 3 child of 1 with f .5 too
    t = CandidateTree.from_edges([-1, 0, 0, 1], np.arange(4), np.log([1, .5, .5, 1.0]))
    batch = CandidateBatch.from_trees([t])
    assert select_global_greedy(batch, 2).nodes(0).tolist() == [0, 1]
    assert select_global_greedy(batch, 3).nodes(0).tolist() == [0, 1, 2]
    # a deeper node listed before a shallower one with the same f: depth wins over index
    t = CandidateTree.from_edges([-1, 0, 1, 0], np.arange(4), np.log([1, .5, 1.0, .5]))
    assert select_global_greedy(CandidateBatch.from_trees([t]), 3).nodes(0).tolist() == [0, 1, 3]
    # across requests: depth first too, then the lower request index
    deep = CandidateTree.from_edges([-1, 0, 1], np.arange(3), np.log([1, .5, 1.0]))
    shallow = CandidateTree.from_edges([-1, 0, 0], np.arange(3), np.log([1, .5, .25]))
    both = CandidateBatch.from_trees([deep, shallow])
    assert select_global_greedy(both, 4).counts.tolist() == [2, 2]  # not the deep 0.5 first
    # across requests: equal f and depth -> lower request index first
    batch2 = CandidateBatch.from_trees([_chain(0.5), _chain(0.5)])
    assert select_global_greedy(batch2, 3).counts.tolist() == [2, 1]


@pytest.mark.parametrize("budget", [0, 1, 2, 3])
def test_more_requests_than_budget_runs_roots_only(budget):
    batch = CandidateBatch.from_trees([_chain(0.9, 0.9)] * 3)
    a = np.full(3, 3.0)
    for sel in (select_slo_customized(batch, budget, a, a, UNCAPPED),
                select_global_greedy(batch, budget), select_equal_share(batch, budget)):
        assert sel.counts.tolist() == [1, 1, 1]


def test_budget_one_and_single_request():
    batch = CandidateBatch.from_trees([_chain(0.9)])
    assert select_global_greedy(batch, 1).tokens == 1
    assert select_global_greedy(batch, 2).tokens == 2


def test_nonpositive_requirement_adds_nothing_in_slo_phase():
    batch = CandidateBatch.from_trees([_chain(0.9, 0.9), _chain(0.8)])
    a = np.array([-3.0, 0.0])
    sel = select_slo_customized(batch, 2, a, a, UNCAPPED)  # no spare budget at all
    assert sel.counts.tolist() == [1, 1] and sel.slo_met.all()


def test_depth_one_trees_and_equal_share():
    wide = CandidateTree.from_edges([-1, 0, 0, 0, 0], np.arange(5), np.log([1, .4, .3, .2, .1]))
    batch = CandidateBatch.from_trees([wide, wide, wide])
    sel = select_equal_share(batch, 8)  # shares 3, 3, 2 (remainder to earlier rows)
    assert sel.counts.tolist() == [3, 3, 2]
    assert sel.nodes(2).tolist() == [0, 1]


def test_empty_batch():
    empty = CandidateBatch.from_trees([])
    none = np.zeros(0)
    for sel in (select_slo_customized(empty, 10, none, none, 4), select_global_greedy(empty, 10),
                select_equal_share(empty, 10), select_all(empty), select_roots(empty)):
        assert sel.n == 0 and sel.tokens == 0
    assert algorithm1([], [], 10).valid


def test_select_all_and_roots():
    t = CandidateTree.from_edges([-1, 0, 1], np.arange(3), [0.0, -1.0, -np.inf])
    batch = CandidateBatch.from_trees([t])
    assert select_all(batch).nodes(0).tolist() == [0, 1]  # f = 0 is never worth verifying
    assert select_roots(batch).nodes(0).tolist() == [0]

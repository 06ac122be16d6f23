"""Pacing (adaserve-paced): requests keep at most the tokens that hold them at a pace ahead
of their SLO; the rest of the budget is not spent."""

import numpy as np
import pytest

from adaserve.scheduler import (SLO, AdaServeRules, BatchView, CandidateBatch, CandidateTree,
                                RequestProgress, SchedulerConfig, SpecPlan, make_policy)
from adaserve.scheduler.pacing import pace_cap
from adaserve.scheduler.selection import select_global_greedy, trim


def _chain(*edge_probs):
    n = len(edge_probs) + 1
    return CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                    np.log(np.r_[1.0, edge_probs]))


def test_the_cap_is_the_need_at_a_fraction_of_the_slo():
    # 100 ms SLO at pace 0.5 (50 ms), l = 1.0 s, o = 19 (+ the prefill's token = 20):
    # t = 0.1 s -> (0.105 + 1.0) / 0.05 - 20 = 2.1 -> 3 tokens; far ahead -> 1; no SLO: inf
    batch = BatchView.from_progress([
        RequestProgress("a", SLO.from_ms(100), 1.0, 19, 0),
        RequestProgress("b", SLO.from_ms(100), 0.2, 19, 0),
        RequestProgress("c", SLO(None), 1.0, 19, 0)])
    cap = pace_cap(batch, 0.1, 0.5, AdaServeRules())
    assert cap[0] == 3 and cap[1] == 1 and np.isinf(cap[2])


def test_trim_keeps_each_rows_best_tokens_as_a_tree():
    # a branching tree: root -> x (0.6) -> xx (0.5), root -> y (0.4); and a chain
    tree = CandidateTree.from_edges([-1, 0, 0, 1], np.arange(4),
                                    np.log([1.0, 0.6, 0.4, 0.5 / 0.6]))
    c = CandidateBatch.from_trees([tree, _chain(0.9, 0.9)])
    sel = select_global_greedy(c, 7)  # everything: 4 + 3 tokens
    assert sel.counts.tolist() == [4, 3]
    cut = trim(c, sel, np.array([3, np.inf]))
    # row 0 keeps root, x (0.6) and xx (0.5), drops y (0.4); row 1 uncapped
    assert cut.mask[0].tolist() == [True, True, False, True]
    np.testing.assert_array_equal(cut.mask[1], sel.mask[1])
    assert cut.expected_accepted[0] == pytest.approx(2.1)
    assert trim(c, sel, np.array([1, 1])).counts.tolist() == [1, 1]  # roots only
    assert trim(c, sel, np.array([np.inf, 9])) is sel  # nothing above its cap


def test_the_paced_policy_gives_back_what_a_request_ahead_does_not_need():
    # "ahead": 50 ms SLO, 1.0 s for 39 tokens after the first: need 1, pace (0.7) cap
    # ceil((0 + 1.0) / 0.035 - 40) = ceil(-11.4) -> 1; "behind": 1.5 s for 19: need
    # capped at d + 1 = 4, pace cap ceil(1.5 / 0.035 - 20) = 23: untouched
    batch = BatchView.from_progress([
        RequestProgress("ahead", SLO.from_ms(50), 1.0, 39, 0),
        RequestProgress("behind", SLO.from_ms(50), 1.5, 19, 0)])
    plan = SpecPlan(depth=3, width=1)
    cands = CandidateBatch.from_trees([_chain(0.99, 0.99, 0.99), _chain(0.9, 0.9, 0.9)])
    ada = make_policy("adaserve-authors", SchedulerConfig(budget=8)).select(batch, plan, cands)
    paced = make_policy("adaserve-authors:pace=0.7", SchedulerConfig(budget=8)).select(batch, plan, cands)
    # adaserve: "behind" takes its chain in the SLO phase, the throughput phase gives
    # "ahead" its chain too: 8 tokens; paced: "ahead" keeps its root only, 5 tokens
    assert ada.counts.tolist() == [4, 4] and ada.tokens == 8
    assert paced.counts.tolist() == [1, 4] and paced.tokens == 5
    np.testing.assert_array_equal(paced.mask[1], ada.mask[1])
    with pytest.raises(ValueError, match="pace"):
        make_policy("adaserve-authors:pace=1.5", SchedulerConfig(budget=8))

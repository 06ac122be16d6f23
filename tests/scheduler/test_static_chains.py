"""The static chains (vLLM-Spec(k)): a width-1 chain of k drafts per request every
iteration, all k + 1 verified whatever the budget."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (POLICIES, SLO, STATIC_CHAINS, BatchView, CandidateBatch,
                                CandidateTree, IterationLatency, LatencyModel, RequestProgress,
                                SchedulerConfig, make_policy)


def _batch(n: int) -> BatchView:
    return BatchView.from_progress([RequestProgress(f"r{i}", SLO.from_ms(30), 0.3, 8, 100)
                                    for i in range(n)])


def _chains(n: int, k: int) -> CandidateBatch:
    """n chains of k drafts, each edge 0.8 likely."""
    tree = CandidateTree.from_edges(np.arange(-1, k), np.arange(k + 1),
                                    np.r_[0.0, np.full(k, np.log(0.8))])
    return CandidateBatch.from_trees([tree] * n)


def test_registered_as_chain_k():
    assert [c.name for c in STATIC_CHAINS] == ["chain-4", "chain-6", "chain-8"]
    assert all(POLICIES[c.name] is c for c in STATIC_CHAINS)


@pytest.mark.parametrize("k", [4, 6, 8])
@pytest.mark.parametrize("n, budget", [(1, 1), (3, 4), (50, 16), (2, 1000)])
def test_chain_of_k_verified_whole_whatever_the_budget(k, n, budget):
    latency = IterationLatency(LatencyModel(0.0, 1e-3, 0.02), LatencyModel(0.0, 1e-4, 0.002))
    policy = make_policy(f"chain-{k}", SchedulerConfig(budget=budget), latency)
    assert policy.may_draft  # even at B = 1, where the budgeted policies never draft
    batch = _batch(n)
    plan = policy.plan(batch)
    assert (plan.depth, plan.width, plan.expansion) == (k, 1, None)
    assert plan.draft_step_tokens(n) == [n] * k
    assert plan.candidate_nodes(n) == n * (k + 1)
    # priced: k draft steps of n tokens and a verify of n * (k + 1) tokens
    assert plan.t_spec_s == pytest.approx(k * (0.002 + 1e-4 * n) + 0.02 + 1e-3 * n * (k + 1))
    sel = policy.select(batch, plan, _chains(n, k))
    assert sel.counts.tolist() == [k + 1] * n
    assert sel.tokens == n * (k + 1)  # over B whenever n * (k + 1) > B


def test_empty_batch_plans_nothing():
    plan = make_policy("chain-4", SchedulerConfig(budget=4)).plan(_batch(0))
    assert not plan.speculates

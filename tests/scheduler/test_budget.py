"""The per-iteration verify budget chosen by predicted goodput (scheduler/budget.py, option
budget=goodput): hand-computed rates, and the policy verifying past B where chains pay."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (AcceptanceTracker, IterationLatency, LatencyModel,
                                SchedulerConfig, make_policy)
from adaserve.scheduler.acceptance import expected_chain_terms, expected_chain_tokens
from adaserve.scheduler.budget import budgeted_chain_tokens, goodput_budget
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


def test_a_kept_budget_counts_only_what_pacing_keeps():
    """budget=kept: 8 requests, a draft step of 10 ms, verification 40 ms + 3 ms a token,
    acceptance 0.7. Every request keeping its chain, d = 1 pays (8 x 1.7 tokens in 98 ms
    against 8 in 64 ms); with 6 of them paced to their roots, the draft runs for all 8
    and only 2 gain: roots alone win."""
    alphas = np.full(8, 0.7)

    def seconds(d, verify):
        return 0.04 + 0.003 * verify + 0.010 * d

    assert goodput_budget(8, alphas, 4, 1, seconds) == 16
    paced = np.array([1, 1, 0, 0, 0, 0, 0, 0])
    assert goodput_budget(8, alphas, 4, 1, seconds, keeps=lambda d: np.minimum(paced, d)) == 8
    # keeping everything is the unpaced choice, token for token
    for depth in (1, 3, 6):
        assert (goodput_budget(8, alphas, 4, depth, seconds, keeps=lambda d: np.full(8, d))
                == goodput_budget(8, alphas, 4, depth, seconds))


def test_the_policy_with_budget_kept_drafts_only_where_kept_tokens_pay():
    """Six requests far ahead of a lenient SLO (pacing caps them at the root) and two
    behind: budget=goodput drafts a chain for all eight, budget=kept sees the draft's cost
    buy two requests' tokens and verifies the roots."""
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.04)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.010)
    batch = BatchView.from_progress(
        [RequestProgress(f"a{i}", SLO.from_ms(400), 1.0, 99, 0) for i in range(6)]
        + [RequestProgress(f"b{i}", SLO.from_ms(60), 3.0, 29, 0) for i in range(2)])

    def plan(budget):
        tracker = AcceptanceTracker(prior_alpha=0.7, prior_weight=1e9)
        policy = make_policy(f"adaserve:budget={budget}", SchedulerConfig(budget=4),
                             IterationLatency(target, draft), tracker)
        return policy.plan(batch)

    assert plan("goodput").budget >= 16 and plan("goodput").speculates
    kept = plan("kept")
    assert kept.budget == 8 and not kept.speculates


def test_a_budget_smaller_than_the_chains_is_credited_with_its_most_probable_nodes():
    # two requests at 0.6 and 0.3, depth 2: nodes 0.6, 0.36 and 0.3, 0.09
    alphas = np.array([0.6, 0.3])
    assert budgeted_chain_tokens(alphas, 2, 2) == pytest.approx(2.0)  # the roots alone
    assert budgeted_chain_tokens(alphas, 2, 3) == pytest.approx(2.6)
    assert budgeted_chain_tokens(alphas, 2, 4) == pytest.approx(2.96)
    assert budgeted_chain_tokens(alphas, 2, 5) == pytest.approx(3.26)
    whole = float(np.sum(expected_chain_tokens(alphas, 2)))  # 1.96 + 1.39
    assert budgeted_chain_tokens(alphas, 2, 6) == pytest.approx(whole)
    assert budgeted_chain_tokens(alphas, 2, 99) == pytest.approx(whole)  # a wider tree's count


def test_the_policy_does_not_draft_for_chains_its_budget_will_not_verify():
    """Two requests where the budget stays B = 3 (verifying 4 costs 1.43x the roots, more
    than two 0.35 chains return): Eq. 8 still shapes a tree. A 3-token step costs 1.29x
    the roots; credited with two chains (2.7 tokens) it would pay, with the one node the
    budget verifies (2.35 tokens) it does not, so the iteration verifies the roots. Before,
    at long contexts on the served CPU, this drafted for 1.21 tokens a request. The SLO
    (50 ms) is tighter than any step, so pacing leaves every request its chain."""
    target = LatencyModel(alpha=0.0, gamma=0.01, delta=0.05)  # the roots: 70 ms
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.010)
    tracker = AcceptanceTracker(prior_alpha=0.35, prior_weight=1e9)
    policy = make_policy("adaserve", SchedulerConfig(budget=3), IterationLatency(target, draft),
                         tracker)
    plan = policy.plan(_batch(2, tpot_ms=50.0))
    assert plan.budget == 3 and not plan.speculates
    # with acceptance that pays for the one node (2.6 tokens in 90 against 2 in 70 ms)
    tracker = AcceptanceTracker(prior_alpha=0.6, prior_weight=1e9)
    policy = make_policy("adaserve", SchedulerConfig(budget=3), IterationLatency(target, draft),
                         tracker)
    assert policy.plan(_batch(2, tpot_ms=50.0)).speculates


def test_the_whole_chain_scores_equal_the_grouped_sums_bit_for_bit():
    # goodput_budget prices every depth from one power table where no request is paced;
    # the kept form groups requests by chain. With keeps returning the whole chain both
    # must choose alike on ties and near-ties, so the rates must match exactly, not nearly
    rng = np.random.default_rng(5)
    for _ in range(200):
        n, depth = int(rng.integers(1, 40)), int(rng.integers(0, 9))
        alphas = rng.uniform(0.0, 1.0, n)
        alphas[rng.uniform(size=n) < 0.1] = 1.0  # the power sum's k + 1 edge
        seen = {}

        def seconds(d, b, tag):
            seen.setdefault(tag, []).append((d, b))
            return 0.03 + 1e-3 * b + 4e-3 * d

        whole = goodput_budget(n, alphas, 4, depth, lambda d, b: seconds(d, b, "whole"))
        grouped = goodput_budget(n, alphas, 4, depth, lambda d, b: seconds(d, b, "grouped"),
                                 keeps=lambda d: np.full(n, d))
        assert whole == grouped and seen["whole"] == seen["grouped"]
        table = expected_chain_terms(alphas, depth)
        for d in range(depth + 1):
            assert float(np.sum(np.sum(table[:, : d + 1], axis=-1))) == \
                float(np.sum(expected_chain_tokens(alphas, d)))

"""The forward's cost against context (scheduler/context_cost.py): the table's shape and
interpolation, B per context by the ratio rule, and the policy's goodput budget and depth
following the contexts in the batch through it. Fabricated tables, no timing."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (AcceptanceTracker, CalibratedLatency, ContextTable,
                                IterationLatency, LatencyModel, SchedulerConfig, budget_by_ratio,
                                budget_table, budget_table_text, make_policy)
from adaserve.scheduler.context_cost import budget_curve
from adaserve.scheduler.slo import SLO, BatchView, RequestProgress

NS, QS, CS = (1, 4, 8), (1, 2, 4, 8), (64, 2048, 8192)


def cpu_like(n, q, c):
    """The dev CPU's shape, by hand: 40 ms of weights, 1 ms a token, and an attention term
    per query token that grows with the context, so extra tokens cost more at 8k than at 64."""
    return 0.04 + 1e-3 * n * q + 2e-3 * n * q * c / 1e3


def table(cost=cpu_like):
    sec = [[[cost(n, q, c) for c in CS] for q in QS] for n in NS]
    return ContextTable.measured(NS, QS, CS, sec)


def test_the_table_gives_its_measured_points_and_is_multilinear_between():
    t = table()
    for n in NS:
        for q in QS:
            for c in CS:
                assert t.predict(n * c, n * q, n) == pytest.approx(cpu_like(n, q, c))
    # halfway along each axis: the mean of the neighbours (cpu_like is bilinear in q and c
    # for fixed n, so the midpoint of q and c together is exact too)
    assert t.predict(4 * 1056, 4 * 3, 4) == pytest.approx(cpu_like(4, 3, 1056))
    mid_n = (cpu_like(4, 2, 2048) + cpu_like(8, 2, 2048)) / 2
    assert t.predict(6 * 2048, 6 * 2, 6) == pytest.approx(mid_n)


def test_outside_the_grid_it_clamps_below_and_extrapolates_above():
    t = table()
    # below the first context a forward costs what it cost there
    assert t.predict(8 * 10, 8, 8) == pytest.approx(cpu_like(8, 1, 64))
    # past the last request count and context: along the last segment (linear here)
    assert t.predict(16 * 64, 16, 16) == pytest.approx(cpu_like(16, 1, 64))
    assert t.predict(12_000, 1, 1) == pytest.approx(cpu_like(1, 1, 12_000))
    # no request count: one request's forward (a prefill chunk)
    assert t.predict(2048, 4) == pytest.approx(cpu_like(1, 4, 2048))


def test_it_tells_apart_what_the_two_sums_cannot():
    """8 requests x 1 token and 1 x 8 have the same sums, as have 8 x 1k of context and
    1 x 8k: the linear model prices each pair alike, the table does not."""
    t = table(lambda n, q, c: 0.04 + 1e-3 * n + 4e-3 * q + 1e-6 * n * q * c ** 1.5)
    assert t.predict(8 * 64, 8, 8) != pytest.approx(t.predict(512, 8, 1))
    assert t.predict(8 * 1024, 8, 8) != pytest.approx(t.predict(8192, 8, 1))
    lin = LatencyModel(1e-6, 1e-3, 0.04)
    assert lin.predict(8 * 64, 8, 8) == lin.predict(512, 8, 1)


def test_measured_tables_never_get_cheaper_with_more_work_and_round_trip():
    sec = np.array([[[cpu_like(n, q, c) for c in CS] for q in QS] for n in NS])
    sec[2, 1, 1] = 1e-3  # one lucky sample
    t = ContextTable.measured(NS, QS, CS, sec)
    s = np.asarray(t.seconds)
    assert np.all(np.diff(s, axis=0) >= 0) and np.all(np.diff(s, axis=1) >= 0)
    assert np.all(np.diff(s, axis=2) >= 0)
    assert ContextTable.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("bad", [
    dict(requests=(1, 1, 8)), dict(contexts=(64, 64, 8192)), dict(tokens=(0, 2, 4, 8)),
    dict(seconds=np.zeros((3, 4, 3))), dict(seconds=np.ones((3, 4, 2)))])
def test_bad_tables_are_refused(bad):
    d = table().to_dict()
    d.update({k: np.asarray(v).tolist() for k, v in bad.items()})
    with pytest.raises(ValueError):
        ContextTable.from_dict(d)


def test_budget_table_is_the_ratio_rule_at_each_context():
    t = table()
    budgets = budget_table(t)
    assert list(budgets) == list(CS)
    for c, b in budgets.items():
        tokens, seconds = budget_curve(t, c)
        assert tokens == [1, 4, 8, 16, 32, 64]  # roots of 1, 4, 8 requests; then 8 x 2, 4, 8
        assert b == budget_by_ratio(tokens, seconds)
    # on this shape extra tokens ride almost free at 64 tokens of context, not at 8k
    assert budgets[64].tokens > budgets[8192].tokens
    assert budget_table_text(budgets).startswith("B by context: 64: ")
    # a grid too small for the rule (fewer than 4 curve points) has no budget table
    small = ContextTable.measured((1,), (1, 2), (64,), [[[0.04], [0.05]]])
    assert budget_table(small) is None and budget_table_text(None) == ""


def _batch(n, context):
    return BatchView.from_progress([RequestProgress(f"r{i}", SLO.from_ms(30.0), 1.0, 20, context)
                                    for i in range(n)])


def _plan(latency, n, context):
    tracker = AcceptanceTracker(prior_alpha=0.8, prior_weight=1e9)
    policy = make_policy("adaserve", SchedulerConfig(budget=4, max_depth=6), latency, tracker)
    return policy.plan(_batch(n, context))


def test_the_goodput_budget_and_depth_follow_the_context_through_the_table():
    """Four requests, acceptance 0.8, a 3-ms draft step. At 64 tokens of context a chain's
    extra tokens cost ~1 ms each against a 44-ms forward: the goodput budget verifies past
    B with a deep chain. At 8k the same tokens cost 17 ms each: the chain is shallower and
    the budget smaller. A linear model fitted to the same table plans one shape at both."""
    draft = LatencyModel(0.0, 0.0, 3e-3)
    latency = IterationLatency(table(), draft)
    short, long = _plan(latency, 4, 64), _plan(latency, 4, 8192)
    assert short.speculates and short.budget > 4
    assert short.depth > long.depth and short.budget > long.budget
    # the chosen plans are the best by the table's own prediction of tokens per second
    assert short.t_spec_s == pytest.approx(latency.predict(4 * 64, [4] * short.depth,
                                                           short.budget, 4))
    # through the engine's predictor (the scale correction) the same
    calibrated = CalibratedLatency(latency, decode_only=True)
    assert _plan(calibrated, 4, 8192).depth == long.depth
    # the sums alone: a linear model fitted to the same forwards prices the context as a
    # fixed read that every depth pays alike, so it drafts deeper at 8k, the GPU's rule,
    # the opposite of what the table measured
    ctx, tok, sec = zip(*[(n * c, n * q, cpu_like(n, q, c)) for n in NS for q in QS for c in CS])
    linear = IterationLatency(LatencyModel.fit(ctx, tok, sec), draft)
    assert _plan(linear, 4, 8192).depth > _plan(linear, 4, 64).depth


def test_a_decode_only_scale_skips_iterations_that_prefilled():
    base = IterationLatency(table())
    lat = CalibratedLatency(base, decode_only=True)
    lat.observe(4 * 64, [], 4, 10.0, prefill_tokens=128, requests=4)
    assert lat.ratio == 1.0
    lat.observe(4 * 64, [], 4, 2 * base.predict(4 * 64, [], 4, 4), requests=4)
    assert lat.ratio == pytest.approx(2.0)
    assert lat.predict(4 * 64, [], 4, 4) == pytest.approx(2 * base.predict(4 * 64, [], 4, 4))


def test_the_goodput_floor_is_the_tables_b_at_the_batchs_mean_context():
    """budget=goodput never verifies below its floor: B, or with a table the smaller of B
    and the table's B at the batch's mean context. At 8k the table's B is 1, so one request
    with a draft worth a single token verifies 2 tokens, not the short-context B of 4."""
    from adaserve.scheduler.policy_base import context_budget

    latency = IterationLatency(table(), LatencyModel(0.0, 0.0, 3e-3))
    assert context_budget(latency, np.array([64, 64])) == 4
    assert context_budget(CalibratedLatency(latency), np.array([8192])) == 1
    assert context_budget(IterationLatency(LatencyModel(0.0, 1e-3, 0.04)), np.array([8192])) is None

    def plan(n, context, alpha):
        tracker = AcceptanceTracker(prior_alpha=alpha, prior_weight=1e9)
        policy = make_policy("adaserve", SchedulerConfig(budget=4, max_depth=6), latency,
                             tracker)
        return policy.plan(_batch(n, context))

    long = plan(1, 8192, 0.5)
    assert long.depth == 1 and long.budget == 2
    assert plan(1, 64, 0.5).budget >= 4
    # where no chain pays at 8k the roots alone are verified
    assert not plan(2, 8192, 0.3).speculates and plan(2, 8192, 0.3).budget == 2

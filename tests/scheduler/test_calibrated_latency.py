"""CalibratedLatency: t_spec follows measured iterations (DESIGN.md step 5)."""

import math

import numpy as np
import pytest

from adaserve.scheduler import (CalibratedLatency, IterationLatency, LatencyModel,
                                SchedulerConfig, make_policy)

BASE = IterationLatency(LatencyModel(alpha=1e-6, gamma=2e-4, delta=0.01),
                        LatencyModel(alpha=5e-7, gamma=1e-4, delta=0.002))


def _shapes(rng, n):
    for _ in range(n):
        yield int(rng.integers(0, 20_000)), [int(k) for k in rng.integers(1, 64, size=3)], \
            int(rng.integers(1, 256))


def test_without_profile_predicts_zero_then_the_mean_measured_iteration():
    lat = CalibratedLatency(None)
    assert lat.predict(1000, [8], 16) == 0.0
    for ctx, steps, tok in _shapes(np.random.default_rng(0), 50):
        lat.observe(ctx, steps, tok, 0.05)
    # shape-blind: any shape gets the mean of what was measured
    assert lat.predict(10, [], 1) == pytest.approx(0.05)
    assert lat.predict(50_000, [64, 64], 512) == pytest.approx(0.05)


def test_with_profile_starts_at_the_profile_and_learns_its_scale():
    lat = CalibratedLatency(BASE)
    assert lat.predict(3000, [4, 8], 40) == BASE.predict(3000, [4, 8], 40)
    rng = np.random.default_rng(1)
    for ctx, steps, tok in _shapes(rng, 40):  # this machine runs 2x slower than profiled
        lat.observe(ctx, steps, tok, 2 * BASE.predict(ctx, steps, tok))
    assert lat.ratio == pytest.approx(2.0)
    # the profile's shape dependence is kept: a new shape is 2x its profiled latency
    assert lat.predict(12_345, [16, 16, 16], 200) == pytest.approx(
        2 * BASE.predict(12_345, [16, 16, 16], 200))


SHAPE = (1000, [8], 16)
UNIT = BASE.predict(*SHAPE)


def _settled(halflife: float, iterations: int) -> CalibratedLatency:
    """A predictor that has seen `iterations` iterations exactly as profiled."""
    lat = CalibratedLatency(BASE, halflife=halflife)
    for _ in range(iterations):
        lat.observe(*SHAPE, UNIT)
    return lat


def test_halflife_weighs_recent_iterations():
    lat = _settled(halflife=16, iterations=2000)
    for _ in range(16):  # one half-life at 3x: the ratio is half way from 1 to 3
        lat.observe(*SHAPE, 3 * UNIT)
    assert lat.ratio == pytest.approx(2.0, rel=1e-6)


def test_one_outlier_moves_the_ratio_by_its_weight_only():
    lat = _settled(halflife=32, iterations=500)
    lat.observe(*SHAPE, 100 * UNIT)  # e.g. a prefill burst or a GC pause
    w = 1 - 0.5 ** (1 / 32)
    assert lat.ratio == pytest.approx(1 + 99 * w, rel=1e-3)
    assert lat.ratio < 3.2


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_measurements_raise(bad):
    with pytest.raises(ValueError, match="seconds"):
        CalibratedLatency(BASE).observe(10, [1], 1, bad)


@pytest.mark.parametrize("bad", [0, -3, math.nan])
def test_bad_halflife_raises(bad):
    with pytest.raises(ValueError, match="halflife"):
        CalibratedLatency(BASE, halflife=bad)


def test_turbospec_needs_a_profile_behind_the_calibration():
    cfg = SchedulerConfig(budget=16)
    with pytest.raises(ValueError, match="latency model"):
        make_policy("turbospec", cfg, CalibratedLatency(None))
    assert make_policy("turbospec", cfg, CalibratedLatency(BASE)).latency.base is BASE


def test_policy_plans_with_the_calibrated_t_spec():
    from adaserve.scheduler import BatchView
    lat = CalibratedLatency(BASE)
    policy = make_policy("adaserve-authors", SchedulerConfig(budget=16), lat)
    view = BatchView(("a", "b"), np.array([0.05, np.nan]), np.zeros(2), np.zeros(2, np.int64),
                     np.array([100, 200], np.int64))
    before = policy.plan(view).t_spec_s
    for _ in range(200):
        lat.observe(300, [2, 8], 16, 3 * BASE.predict(300, [2, 8], 16))
    assert policy.plan(view).t_spec_s == pytest.approx(3 * before, rel=1e-6)

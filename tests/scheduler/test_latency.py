import json

import numpy as np
import pytest

from adaserve.scheduler.latency import Knee, LatencyModel, LatencySample, budget_by_ratio, find_knee

# Profiling grid: powers of two plus the 1.5x points between them, 1..1024 (steps <= 1.5x).
GRID = np.unique(np.concatenate([2 ** np.arange(11), np.round(1.5 * 2 ** np.arange(1, 10))]))
WIDE_GRID = np.unique(np.concatenate([2 ** np.arange(13), np.round(1.5 * 2 ** np.arange(1, 12))]))


def _profile(rng, n=200, alpha=2e-7, gamma=5e-5, delta=0.015, noise=0.01):
    ctx = rng.integers(0, 32_768, size=n)
    tok = rng.integers(1, 513, size=n)
    sec = (alpha * ctx + gamma * tok + delta) * (1 + noise * rng.standard_normal(n))
    return ctx, tok, sec


def test_fit_recovers_known_coefficients_from_noisy_samples():
    ctx, tok, sec = _profile(np.random.default_rng(0))
    model = LatencyModel.fit(ctx, tok, sec)
    # 1% multiplicative noise on 200 samples: each coefficient within 5%.
    assert model.alpha == pytest.approx(2e-7, rel=0.05)
    assert model.gamma == pytest.approx(5e-5, rel=0.05)
    assert model.delta == pytest.approx(0.015, rel=0.05)
    assert model.r2(ctx, tok, sec) > 0.98


def test_fit_is_exact_without_noise():
    ctx, tok, sec = _profile(np.random.default_rng(1), n=10, noise=0.0)
    model = LatencyModel.fit(ctx, tok, sec)
    assert (model.alpha, model.gamma, model.delta) == pytest.approx((2e-7, 5e-5, 0.015), rel=1e-9)
    assert model.r2(ctx, tok, sec) == pytest.approx(1.0)


def test_negative_coefficient_is_clamped_and_rest_refit():
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, 10_000, size=50).astype(float)
    tok = rng.integers(1, 100, size=50).astype(float)
    # Latency falls with batch size: the unconstrained fit wants gamma < 0.
    sec = 1e-6 * ctx - 1e-5 * tok + 0.01 + 1e-5 * rng.standard_normal(50)
    unconstrained, *_ = np.linalg.lstsq(np.stack([ctx, tok, np.ones(50)], 1), sec, rcond=None)
    assert unconstrained[1] < 0
    model = LatencyModel.fit(ctx, tok, sec)
    assert model.gamma == 0.0
    refit, *_ = np.linalg.lstsq(np.stack([ctx, np.ones(50)], 1), sec, rcond=None)
    assert (model.alpha, model.delta) == pytest.approx(tuple(refit), rel=1e-6)


def test_zero_true_constant_stays_non_negative():
    ctx, tok, sec = _profile(np.random.default_rng(3), delta=0.0, noise=0.02)
    model = LatencyModel.fit(ctx, tok, sec)
    assert min(model.alpha, model.gamma, model.delta) >= 0
    assert model.delta < 1e-3


def test_nnls_beats_any_other_non_negative_coefficients():
    rng = np.random.default_rng(4)
    ctx, tok = rng.integers(0, 1000, 30), rng.integers(1, 50, 30)
    sec = rng.random(30) * 0.01  # unstructured: forces clamping of some terms
    model = LatencyModel.fit(ctx, tok, sec)
    best = np.sum((model.predict(ctx, tok) - sec) ** 2)
    for coef in rng.random((500, 3)) * np.array([2e-5, 4e-4, 0.01]):
        other = LatencyModel(*coef)
        assert best <= np.sum((other.predict(ctx, tok) - sec) ** 2) + 1e-15


def test_fit_samples_matches_fit():
    ctx, tok, sec = _profile(np.random.default_rng(5), n=20)
    samples = [LatencySample(int(c), int(t), float(s)) for c, t, s in zip(ctx, tok, sec)]
    assert LatencyModel.fit_samples(samples) == LatencyModel.fit(ctx, tok, sec)


def test_predict_scalars_and_arrays():
    model = LatencyModel(alpha=1e-6, gamma=1e-4, delta=0.01)
    scalar = model.predict(1000, 10)
    assert isinstance(scalar, float) and scalar == pytest.approx(0.001 + 0.001 + 0.01)
    out = model.predict(np.array([0, 1000, 2000]), np.array([[1], [2]]))
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    assert out[1, 2] == pytest.approx(2000e-6 + 2e-4 + 0.01)


def test_scalar_predictions_equal_the_array_form_bit_for_bit():
    # planning prices scalars through a pure-Python path; it must agree exactly with the
    # array form (a near-tie between two depths must break the same way either way)
    rng = np.random.default_rng(3)
    for _ in range(50):
        m = LatencyModel(*map(float, rng.uniform(0, 1e-3, 3)))
        ctx = rng.integers(0, 100_000, 64)
        tok = rng.integers(1, 512, 64)
        arr = m.predict(ctx, tok)
        for c, t, a in zip(ctx, tok, arr):
            for x, y in ((int(c), int(t)), (c, t), (float(c), float(t))):
                got = m.predict(x, y)
                assert type(got) is float and got == float(a)


def test_json_round_trip():
    model = LatencyModel(alpha=1.5e-7, gamma=3e-5, delta=0.02)
    assert LatencyModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model
    with pytest.raises(ValueError, match="missing"):
        LatencyModel.from_dict({"alpha": 1.0, "gamma": 1.0})


@pytest.mark.parametrize("name", ["alpha", "gamma", "delta"])
@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf")])
def test_model_rejects_bad_coefficients(name, bad):
    values = {"alpha": 0.0, "gamma": 0.0, "delta": 0.0, name: bad}
    with pytest.raises(ValueError, match=name):
        LatencyModel(**values)


@pytest.mark.parametrize(
    "ctx, tok, sec, match",
    [
        ([1, 2], [1, 2], [0.1, 0.2], "at least 3"),
        ([1, 2, 3], [1, 2], [0.1, 0.2, 0.3], "equal lengths"),
        ([1, 2, float("nan")], [1, 2, 3], [0.1, 0.2, 0.3], "NaN"),
        ([1, 2, 3], [1, 2, 3], [0.1, float("inf"), 0.3], "NaN or inf"),
        ([1, 2, 3], [1, -2, 3], [0.1, 0.2, 0.3], "negative"),
        ([5, 5, 5, 5], [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], "same context length"),
        ([1, 2, 3, 4], [8, 8, 8, 8], [0.1, 0.2, 0.3, 0.4], "same batch token count"),
        ([10, 20, 30, 40], [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], "collinear"),
    ],
)
def test_fit_rejects_bad_profiles(ctx, tok, sec, match):
    with pytest.raises(ValueError, match=match):
        LatencyModel.fit(ctx, tok, sec)


@pytest.mark.parametrize("true_knee", [16, 64, 156, 582])
@pytest.mark.parametrize("seed", range(5))
def test_knee_on_noisy_roofline(true_knee, seed):
    rng = np.random.default_rng(seed)
    t0 = 0.02
    latency = np.maximum(t0, t0 / true_knee * GRID) * (1 + 0.02 * rng.standard_normal(GRID.size))
    knee = find_knee(GRID, latency)
    assert knee.found
    # Tolerance: one grid step (the grid advances by at most 1.5x).
    assert true_knee / 1.5 <= knee.tokens <= true_knee * 1.5
    assert knee.tokens in GRID
    assert knee.latency_s == pytest.approx(max(t0, t0 / true_knee * knee.tokens), rel=0.1)
    assert knee.slope_after >= 2.0 * max(knee.slope_before, 0.0)


@pytest.mark.parametrize("true_knee", [32, 64, 156, 582])
@pytest.mark.parametrize("seed", range(3))
def test_knee_on_smooth_curve_lands_near_corner(true_knee, seed):
    rng = np.random.default_rng(100 + seed)
    t0, s = 0.02, 0.02 / true_knee
    noise = 1 + 0.005 * rng.standard_normal(WIDE_GRID.size)
    latency = np.sqrt(t0**2 + (s * WIDE_GRID) ** 2) * noise
    knee = find_knee(WIDE_GRID, latency)
    assert knee.found
    assert t0 / s / 2 <= knee.tokens <= 2 * t0 / s


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_straight_line_has_no_knee(noise):
    rng = np.random.default_rng(7)
    latency = (2e-4 + 1e-4 * GRID) * (1 + noise * rng.standard_normal(GRID.size))
    knee = find_knee(GRID, latency)
    assert not knee.found
    assert knee.tokens == 1
    assert knee.slope_before == pytest.approx(1e-4, rel=0.3)


def test_knee_handles_duplicates_and_unsorted_input():
    rng = np.random.default_rng(8)
    tokens = np.repeat(GRID, 3)
    latency = np.maximum(0.02, 0.02 / 64 * tokens) * (1 + 0.01 * rng.standard_normal(tokens.size))
    order = rng.permutation(tokens.size)
    knee = find_knee(tokens[order], latency[order])
    assert knee.found and knee.tokens == 64
    in_order = find_knee(tokens, latency)
    assert in_order.tokens == knee.tokens
    assert in_order.slope_after == pytest.approx(knee.slope_after)


def test_min_bend_controls_detection():
    tokens = np.array([1, 2, 4, 8, 16, 32, 64])
    # Slope 1 then 1.5: a bend of 1.5x is a knee only when min_bend <= 1.5.
    latency = 1.0 + tokens + 0.5 * np.maximum(0, tokens - 8)
    knee = find_knee(tokens, latency, min_bend=1.4)
    assert isinstance(knee, Knee) and knee.found and knee.tokens == 8
    assert (knee.latency_s, knee.slope_before, knee.slope_after) == pytest.approx((9.0, 1.0, 1.5))
    assert not find_knee(tokens, latency, min_bend=2.0).found


@pytest.mark.parametrize(
    "tokens, latency, match",
    [
        ([1, 2, 4, 8], [1.0, 1.0, 1.0], "equal lengths"),
        ([1, 2, 4], [1.0, 1.0, 2.0], "at least 4 distinct"),
        ([1, 1, 2, 2, 4, 4], [1.0] * 6, "at least 4 distinct"),
        ([0, 2, 4, 8], [1.0, 1.0, 1.0, 2.0], "tokens must be"),
        ([1, 2, 4, 8], [1.0, -1.0, 1.0, 2.0], "latency_s must be"),
        ([1, 2, 4, 8], [1.0, float("nan"), 1.0, 2.0], "latency_s must be"),
    ],
)
def test_knee_rejects_bad_profiles(tokens, latency, match):
    with pytest.raises(ValueError, match=match):
        find_knee(tokens, latency)


def test_knee_rejects_bad_min_bend():
    with pytest.raises(ValueError, match="min_bend"):
        find_knee([1, 2, 4, 8], [1.0, 1.0, 1.0, 2.0], min_bend=0.5)


# ---- budget by the ratio rule --------------------------------------------------------------

def test_budget_is_the_largest_count_within_the_ratio_of_one_token():
    tokens = [1, 2, 4, 8, 16, 32]
    latency = [10.0, 10.2, 10.9, 11.4, 14.0, 20.0]  # 16 costs 1.40x: past 1.15
    b = budget_by_ratio(tokens, latency)
    assert b.tokens == 8 and b.ratio == pytest.approx(1.14) and b.max_ratio == 1.15
    assert budget_by_ratio(tokens, latency, max_ratio=1.5).tokens == 16
    assert budget_by_ratio(tokens, latency, max_ratio=1.0).tokens == 1


def test_a_lucky_fast_sample_past_a_slow_one_does_not_stretch_the_budget():
    # 32 measured fast (noise), but 16 already costs 1.4x: a forward cannot get cheaper
    tokens = [1, 2, 4, 8, 16, 32]
    assert budget_by_ratio(tokens, [10.0, 10.1, 10.5, 11.0, 14.0, 10.5]).tokens == 8


def test_a_flat_curve_gives_its_largest_count():
    # a GPU in its memory-bound range: every profiled count rides free
    assert budget_by_ratio([1, 64, 128, 256], [0.020, 0.0205, 0.021, 0.0215]).tokens == 256


@pytest.mark.parametrize("ratio", [0.99, float("nan"), float("inf")])
def test_budget_ratio_must_be_at_least_one(ratio):
    with pytest.raises(ValueError, match="max_ratio"):
        budget_by_ratio([1, 2, 4, 8], [1.0, 1.0, 1.0, 1.0], max_ratio=ratio)


def test_budget_needs_a_positive_one_token_latency():
    with pytest.raises(ValueError, match="> 0"):
        budget_by_ratio([1, 2, 4, 8], [0.0, 1.0, 1.0, 1.0])

import json
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adaserve.scheduler.acceptance import (
    AcceptanceTracker,
    Calibration,
    CalibrationBin,
    expected_chain_tokens,
)


def _chain_accepts(rng, alpha, k):
    """Accepted length of k-token chain drafts whose tokens each pass with prob alpha."""
    successes_before_failure = rng.geometric(1.0 - np.asarray(alpha)) - 1
    return np.minimum(successes_before_failure, k)


# --- expected_chain_tokens -------------------------------------------------------------


def test_expected_chain_tokens_known_values():
    assert expected_chain_tokens(0.0, 5) == 1.0
    assert expected_chain_tokens(1.0, 5) == 6.0
    assert expected_chain_tokens(0.5, 3) == pytest.approx(1.875)
    assert expected_chain_tokens(0.7, 0) == 1.0
    assert isinstance(expected_chain_tokens(0.5, 3), float)


def test_expected_chain_tokens_vectorized_without_warnings():
    alpha = np.array([0.0, 0.25, 0.5, 0.9, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = expected_chain_tokens(alpha, 4)
    interior = alpha[1:-1]
    assert out.shape == (5,)
    assert out[0] == 1.0 and out[-1] == 5.0
    assert out[1:-1] == pytest.approx((1 - interior**5) / (1 - interior))


@pytest.mark.parametrize("alpha, k", [(-0.1, 2), (1.1, 2), (0.5, -1), (0.5, 1.5)])
def test_expected_chain_tokens_rejects_bad_input(alpha, k):
    with pytest.raises(ValueError):
        expected_chain_tokens(alpha, k)


# --- AcceptanceTracker ---------------------------------------------------------------


def test_tracker_starts_at_prior_and_counts_geometric_trials():
    tracker = AcceptanceTracker(decay=1.0, prior_alpha=0.6, prior_weight=2.0)
    assert tracker.alpha() == 0.6
    # 4 of 4 accepted: 4 trials, 4 successes. 1 of 3: 2 trials. 0 of 0: nothing.
    tracker.observe(["a", "b", "c"], np.array([4, 3, 0]), np.array([4, 1, 0]))
    glob = (5 + 0.6 * 2) / (6 + 2)
    assert tracker.alpha() == pytest.approx(glob)
    assert tracker.alpha("a") == pytest.approx((4 + glob * 2) / (4 + 2))
    assert tracker.alpha("b") == pytest.approx((1 + glob * 2) / (2 + 2))
    assert tracker.alpha("c") == pytest.approx(glob)  # no trials: shrinks fully to global
    assert tracker.alpha("unknown") == pytest.approx(glob)


def test_tracker_converges_to_true_alpha():
    rng = np.random.default_rng(0)
    tracker = AcceptanceTracker(decay=0.99)
    ids = list(range(64))
    for _ in range(300):
        proposed = np.full(64, 5)
        tracker.observe(ids, proposed, _chain_accepts(rng, np.full(64, 0.7), 5))
    assert tracker.alpha() == pytest.approx(0.7, abs=0.02)


def test_per_request_estimates_separate_easy_and_hard_requests():
    rng = np.random.default_rng(1)
    tracker = AcceptanceTracker(decay=0.95)
    true = np.array([0.9, 0.3])
    for _ in range(300):
        tracker.observe(["easy", "hard"], np.array([6, 6]), _chain_accepts(rng, true, 6))
    easy, hard = tracker.alphas(["easy", "hard"])
    assert easy > 0.82 and hard < 0.4
    assert hard < tracker.alpha() < easy


def test_decay_tracks_a_drift():
    rng = np.random.default_rng(2)
    fast, slow = AcceptanceTracker(decay=0.9), AcceptanceTracker(decay=1.0)
    ids = list(range(8))
    for step in range(300):
        alpha = 0.8 if step < 200 else 0.3
        accepted = _chain_accepts(rng, np.full(8, alpha), 4)
        for tracker in (fast, slow):
            tracker.observe(ids, np.full(8, 4), accepted)
    assert fast.alpha() == pytest.approx(0.3, abs=0.06)
    assert slow.alpha() > 0.5  # without decay the old regime still dominates


def test_request_counts_decay_only_on_own_observations():
    tracker = AcceptanceTracker(decay=0.5, prior_weight=1.0)
    tracker.observe(["a"], np.array([2]), np.array([2]))
    for _ in range(5):
        tracker.observe(["b"], np.array([3]), np.array([0]))
    glob = tracker.alpha()
    assert tracker.alpha("a") == pytest.approx((2 + glob) / (2 + 1))


def test_forget_falls_back_to_global():
    tracker = AcceptanceTracker()
    tracker.observe(["a", "b"], np.array([5, 5]), np.array([5, 0]))
    assert tracker.alpha("a") != tracker.alpha()
    tracker.forget("a")
    tracker.forget("never-seen")
    assert tracker.alpha("a") == tracker.alpha()


@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=20))
def test_estimates_stay_probabilities(pairs):
    tracker = AcceptanceTracker()
    proposed = np.array([max(p, a) for p, a in pairs])
    accepted = np.array([min(p, a) for p, a in pairs])
    tracker.observe(list(range(len(pairs))), proposed, accepted)
    alphas = tracker.alphas(range(len(pairs)))
    assert np.all((alphas >= 0) & (alphas <= 1))


@pytest.mark.parametrize(
    "ids, proposed, accepted",
    [
        (["a"], [2], [3]),
        (["a"], [2], [-1]),
        (["a", "b"], [2], [1]),
        (["a"], [2.0], [1.0]),
    ],
)
def test_tracker_rejects_bad_observations(ids, proposed, accepted):
    with pytest.raises(ValueError):
        AcceptanceTracker().observe(ids, np.array(proposed), np.array(accepted))


@pytest.mark.parametrize(
    "kwargs",
    [{"decay": 0.0}, {"decay": 1.5}, {"prior_alpha": -0.1}, {"prior_alpha": 2.0},
     {"prior_weight": -1.0}],
)
def test_tracker_rejects_bad_config(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        AcceptanceTracker(**kwargs)


# --- Calibration ---------------------------------------------------------------------


def _simulate(calibration, rng, accept_scale, batches=20, nodes=10_000, requests=500):
    for _ in range(batches):
        f = rng.random(nodes)
        accepted = rng.random(nodes) < accept_scale * f
        calibration.observe(f, accepted, rng.integers(0, requests, nodes), requests)


def test_calibrated_draft_has_ratio_one_and_small_ece():
    calibration = Calibration()
    _simulate(calibration, np.random.default_rng(3), accept_scale=1.0)
    assert calibration.ratio() == pytest.approx(1.0, abs=0.01)
    assert calibration.expected_calibration_error() < 0.01
    table = calibration.node_table()
    assert len(table) == 10
    for b in table:
        assert b.lo <= b.mean_predicted < b.hi
        assert b.mean_observed == pytest.approx(b.mean_predicted, abs=0.02)


def test_over_promising_draft_has_ratio_half():
    calibration = Calibration()
    _simulate(calibration, np.random.default_rng(4), accept_scale=0.5)
    assert calibration.ratio() == pytest.approx(0.5, abs=0.02)
    # |f/2 - f| averaged over f ~ U(0, 1) is 0.25.
    assert calibration.expected_calibration_error() == pytest.approx(0.25, abs=0.02)
    # Per tree, the speculated part (beyond the bonus token) delivers half its promise.
    well_filled = [b for b in calibration.tree_table() if b.count >= 300]
    assert len(well_filled) >= 8
    for b in well_filled:
        assert b.mean_observed - 1 == pytest.approx(0.5 * (b.mean_predicted - 1), rel=0.1)


def test_tables_on_hand_made_batch():
    calibration = Calibration(node_bins=10, tree_bin_width=0.5, max_tree_tokens=16.0)
    # Request 0: nodes 0.9 (accepted), 0.6 (rejected). Request 1: 0.2 (accepted). Request 2: none.
    calibration.observe(
        np.array([0.9, 0.6, 0.2]), np.array([True, False, True]), np.array([0, 0, 1]), n_requests=3
    )
    # Predicted 1 + sum f: 2.5, 1.2, 1.0. Observed 1 + accepted: 2, 2, 1.
    assert calibration.tree_table() == [
        CalibrationBin(1.0, 1.5, 2, pytest.approx(1.1), pytest.approx(1.5)),
        CalibrationBin(2.5, 3.0, 1, pytest.approx(2.5), pytest.approx(2.0)),
    ]
    nodes = calibration.node_table()
    assert [(b.count, b.mean_predicted, b.mean_observed) for b in nodes] == [
        (1, 0.2, 1.0),
        (1, 0.6, 0.0),
        (1, 0.9, 1.0),
    ]
    assert [b.lo for b in nodes] == pytest.approx([0.2, 0.6, 0.9])
    assert [b.hi for b in nodes] == pytest.approx([0.3, 0.7, 1.0])
    assert calibration.ratio() == pytest.approx(2 / 1.7)
    assert calibration.expected_calibration_error() == pytest.approx((0.8 + 0.6 + 0.1) / 3)


def test_large_trees_land_in_open_ended_bin_and_report_is_json():
    calibration = Calibration(max_tree_tokens=4.0)
    f = np.ones(30)  # one request with 30 sure nodes: predicted 31 tokens
    calibration.observe(f, np.ones(30, dtype=bool), np.zeros(30, dtype=int), n_requests=1)
    (last,) = calibration.tree_table()
    assert (last.lo, last.hi, last.count, last.mean_predicted) == (4.0, float("inf"), 1, 31.0)
    report = json.loads(json.dumps(calibration.to_dict(), allow_nan=False))
    assert report["tree_bins"][0]["hi"] is None
    assert report["nodes"] == 30 and report["requests"] == 1 and report["ratio"] == 1.0


def test_tree_bins_when_width_does_not_divide_the_range():
    calibration = Calibration(tree_bin_width=1.5, max_tree_tokens=4.2)
    # Requests predicting 1 + 3.1 = 4.1 and 1 + 3.5 = 4.5 tokens: the second overflows.
    f = np.array([1.0, 1.0, 1.0, 0.1, 1.0, 1.0, 1.0, 0.5])
    index = np.repeat([0, 1], 4)
    calibration.observe(f, np.zeros(8, dtype=bool), index, n_requests=2)
    assert [(b.lo, b.hi, b.count) for b in calibration.tree_table()] == [
        (4.0, 4.2, 1),
        (4.2, float("inf"), 1),
    ]


def test_empty_calibration():
    calibration = Calibration()
    empty = np.array([])
    calibration.observe(empty, empty.astype(bool), empty.astype(int), n_requests=2)
    assert np.isnan(calibration.ratio()) and np.isnan(calibration.expected_calibration_error())
    assert calibration.node_table() == []
    assert calibration.tree_table() == [CalibrationBin(1.0, 1.5, 2, 1.0, 1.0)]
    assert json.loads(json.dumps(calibration.to_dict(), allow_nan=False))["ratio"] is None


@pytest.mark.parametrize(
    "f, accepted, index, n",
    [
        ([1.2], [True], [0], 1),
        ([float("nan")], [True], [0], 1),
        ([0.5], [True, False], [0], 1),
        ([0.5], [1], [0], 1),
        ([0.5], [True], [1], 1),
        ([0.5], [True], [-1], 1),
        ([0.5], [True], [0], -1),
    ],
)
def test_calibration_rejects_bad_batches(f, accepted, index, n):
    with pytest.raises(ValueError):
        Calibration().observe(np.array(f), np.array(accepted), np.array(index), n)


@pytest.mark.parametrize(
    "kwargs",
    [{"node_bins": 0}, {"tree_bin_width": 0.0}, {"max_tree_tokens": 1.0},
     {"max_tree_tokens": np.inf}],
)
def test_calibration_rejects_bad_config(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Calibration(**kwargs)

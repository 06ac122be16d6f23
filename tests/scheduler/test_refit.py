"""The refitted latency model (CalibratedLatency refit=True, scheduler/refit.py): it learns
the iteration's shape from measured iterations, keeps the profile where traffic never went,
and prices prefill chunks apart from the decode step they ride with."""

import numpy as np
import pytest

from adaserve.scheduler import CalibratedLatency, IterationLatency, LatencyModel

# the profile: verification cheap per token, drafting cheap
BASE = IterationLatency(LatencyModel(alpha=1e-5, gamma=3e-3, delta=0.031),
                        LatencyModel(alpha=8e-7, gamma=3e-4, delta=0.0035))


def _truth(ctx, steps, verify, prefill=0):
    """The machine: each verified token and each draft step costs more than profiled (as
    the served CPU's tree verification did), and a prefill token 3 ms."""
    return 0.028 + 1.2e-5 * ctx + 6e-3 * verify + 0.012 * len(steps) + 1e-3 * sum(steps) \
        + 3e-3 * prefill


def _served(rng, k):
    """k iterations as a served engine runs them: 1-8 requests, chains of 0-2."""
    for _ in range(k):
        n, d = int(rng.integers(1, 9)), int(rng.integers(0, 3))
        prefill = int(rng.choice([0, 0, 0, 40, 128]))
        yield n * int(rng.integers(40, 200)), [n] * d, n * (d + 1), prefill


def test_the_refit_learns_the_shape_where_one_scale_cannot():
    scale, refit = CalibratedLatency(BASE), CalibratedLatency(BASE, refit=True)
    rng = np.random.default_rng(0)
    for ctx, steps, verify, prefill in _served(rng, 600):
        seconds = _truth(ctx, steps, verify, prefill) * rng.uniform(0.97, 1.03)
        for lat in (scale, refit):
            lat.observe(ctx, steps, verify, seconds, prefill)
    # the choice that misled the goodput budget: 7 requests, roots alone or a chain of 1
    roots, chain = (700, [], 7), (700, [7], 14)
    truth = _truth(*chain) / _truth(*roots)
    assert refit.predict(*chain) / refit.predict(*roots) == pytest.approx(truth, rel=0.05)
    assert abs(scale.predict(*chain) / scale.predict(*roots) - truth) > 0.2
    # decode steps are priced without the prefill that rode along with some of them
    for shape in (roots, chain, (300, [3, 3], 9)):
        assert refit.predict(*shape) == pytest.approx(_truth(*shape), rel=0.05)
        assert scale.predict(*shape) > 1.1 * _truth(*shape)  # the ratio carries prefill


def test_the_profile_holds_until_iterations_say_otherwise():
    lat = CalibratedLatency(BASE, refit=True)
    for shape in ((100, [], 1), (800, [8, 8, 8, 8], 40), (4000, [4], 8)):
        assert lat.predict(*shape) == pytest.approx(BASE.predict(*shape), rel=0.02)
    # traffic that never drafts: the roots' price moves to the machine's, and a draft step
    # keeps the profile's price (no extrapolation from data that never varied it)
    rng = np.random.default_rng(1)
    for _ in range(400):
        n = int(rng.integers(1, 9))
        ctx = n * int(rng.integers(40, 200))
        lat.observe(ctx, [], n, _truth(ctx, [], n))
    assert lat.predict(500, [], 5) == pytest.approx(_truth(500, [], 5), rel=0.05)
    step = lat.predict(500, [5], 5) - lat.predict(500, [], 5)
    assert step == pytest.approx(BASE.predict(500, [5], 5) - BASE.predict(500, [], 5), rel=0.1)


def test_a_refit_needs_a_profile_and_never_predicts_below_half_of_it():
    with pytest.raises(ValueError, match="base model"):
        CalibratedLatency(None, refit=True)
    with pytest.raises(ValueError, match="base model"):
        CalibratedLatency(BASE, adapt=False, refit=True)
    lat = CalibratedLatency(BASE, refit=True)
    for _ in range(300):  # a machine that reports absurdly fast iterations
        lat.observe(1000, [], 8, 1e-6)
    assert lat.predict(1000, [], 8) == pytest.approx(0.5 * BASE.predict(1000, [], 8))

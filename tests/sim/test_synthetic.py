"""The synthetic acceptance model: shapes, determinism, calibration, and the walk."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.engine.request import Request
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import SLO, SpecPlan, select_global_greedy
from adaserve.sim import SyntheticAcceptance, SyntheticParams, load_acceptance, walk


def _reqs(n: int, length: int = 10) -> list[Request]:
    return [Request(f"r{i}", list(range(length)), SamplingParams(), SLO(), seed=1000 + i)
            for i in range(n)]


@pytest.mark.parametrize("plan", [SpecPlan(depth=3, width=4), SpecPlan(depth=4, width=1),
                                  SpecPlan(depth=3, width=3, expansion=(1, 3, 1))])
def test_trees_have_the_plans_shape(plan):
    reqs = _reqs(5)
    t = SyntheticAcceptance().trees(reqs, plan)
    c = t.candidates
    assert c.n == 5 and c.width == sum(plan.layer_sizes(5)) // 5
    assert np.all(c.token[:, 0] == 9)  # the root: the last committed token
    for d, size in enumerate(plan.layer_sizes(5)):
        assert np.all((c.depth == d).sum(1) == size // 5)
    assert t.target_token.shape == c.token.shape
    # siblings carry distinct tokens, so at most one child can match the target
    for i in range(c.n):
        for p in range(c.width):
            kids = c.token[i, c.parent[i] == p]
            assert len(set(kids.tolist())) == kids.size


def test_trees_are_a_function_of_the_request():
    m = SyntheticAcceptance()
    a = m.trees(_reqs(4), SpecPlan(depth=3, width=2))
    b = m.trees(_reqs(4)[::-1], SpecPlan(depth=3, width=2))
    np.testing.assert_array_equal(a.candidates.log_prob, b.candidates.log_prob[::-1])
    np.testing.assert_array_equal(a.target_token, b.target_token[::-1])


@pytest.mark.parametrize("gamma", [1.0, 0.75])
def test_root_acceptance_follows_the_calibration_map(gamma):
    p = 0.5
    m = SyntheticAcceptance(SyntheticParams(alignment=p, request_spread=0.0, node_spread=0.0,
                                            miscalibration=gamma))
    t = m.trees(_reqs(20000), SpecPlan(depth=1, width=1))
    f = np.exp(t.candidates.log_prob[:, 1])
    assert f == pytest.approx(p)
    took_top1 = (t.target_token[:, 0] == t.candidates.token[:, 1]).mean()
    assert took_top1 == pytest.approx(p ** gamma, abs=0.015)


def test_walk_takes_the_selected_chain_the_target_agrees_with():
    m = load_acceptance("synthetic-cpu-pair")
    reqs = _reqs(2000)
    t = m.trees(reqs, SpecPlan(depth=4, width=4))
    sel = select_global_greedy(t.candidates, 4000)
    nodes, tokens = walk(t.candidates, sel.mask, t.target_token)
    c = t.candidates
    for i in range(len(reqs)):
        path = nodes[i]
        assert np.all(sel.mask[i, path])
        assert c.depth[i, path].tolist() == list(range(1, path.size + 1))
        parents = np.r_[0, path[:-1]]
        assert np.all(c.parent[i, path] == parents)
        assert np.all(c.token[i, path] == t.target_token[i, parents])
        assert tokens[i][:-1] == c.token[i, path].tolist()
        assert tokens[i][-1] == t.target_token[i, path[-1] if path.size else 0]
    # the miscalibrated draft under-promises: more accepted than sum f(v) predicts (over
    # 2000 requests: 1340 against 1242)
    f = np.where(sel.mask, np.exp(c.log_prob), 0.0)[:, 1:].sum()
    assert sum(p.size for p in nodes) > f


def test_the_defaults_are_the_shipped_cpu_pair():
    assert load_acceptance("synthetic-cpu-pair").params == SyntheticParams()


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="alignment"):
        SyntheticParams(alignment=1.0)
    with pytest.raises(ValueError, match="miscalibration"):
        SyntheticParams(miscalibration=0.0)
    with pytest.raises(ValueError, match="no acceptance model"):
        load_acceptance("nope")

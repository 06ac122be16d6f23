"""Per-request calibration of draft path probabilities (adaserve-calibrated)."""

import numpy as np
import pytest

from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import (SLO, BatchView, CandidateBatch, CandidateTree, RequestProgress,
                                SchedulerConfig, SpecPlan, capped_requirement, make_policy,
                                select_slo_customized)
from adaserve.scheduler.acceptance import RequestCalibration
from adaserve.sim import HardwareModel, SimSetup, build, load_acceptance


def _chain(*edge_probs):
    n = len(edge_probs) + 1
    return CandidateTree.from_edges(list(range(-1, n - 1)), np.arange(n),
                                    np.log(np.r_[1.0, edge_probs]))


def test_ratio_starts_at_one_and_tracks_each_requests_over_promise():
    cal = RequestCalibration(decay=0.9, prior_weight=2.0)
    assert cal.ratio() == 1.0 and cal.ratio("new") == 1.0
    for _ in range(200):  # a predicts 3 and gets 1.5; b predicts 2 and gets 2
        cal.observe(["a", "b"], [3.0, 2.0], [1.5, 2.0])
    glob = cal.ratio()
    assert glob == pytest.approx(3.5 / 5.0, rel=0.02)
    # shrunk toward the global ratio by 2 predicted tokens against ~30 observed (decay 0.9)
    assert cal.ratio("a") == pytest.approx(0.5, abs=0.02) and cal.ratio("a") > 0.5
    assert cal.ratio("b") == pytest.approx(1.0, abs=0.03) and cal.ratio("b") < 1.0
    assert cal.ratio("unseen") == glob
    np.testing.assert_allclose(cal.ratios(["a", "unseen"]), [cal.ratio("a"), glob])
    cal.forget("a")
    assert cal.ratio("a") == glob


def test_ratio_decays_old_evidence():
    cal = RequestCalibration(decay=0.5, prior_weight=0.0)
    cal.observe(["a"], [4.0], [0.0])
    cal.observe(["a"], [4.0], [4.0])
    # decayed sums: accepted 0 * 0.5 + 4, predicted 4 * 0.5 + 4
    assert cal.ratio("a") == pytest.approx(4.0 / 6.0)


@pytest.mark.parametrize("kwargs", [{"decay": 0.0}, {"decay": 1.5}, {"prior_weight": -1.0},
                                    {"prior_weight": float("nan")}])
def test_calibration_rejects_bad_config(kwargs):
    with pytest.raises(ValueError):
        RequestCalibration(**kwargs)


def test_calibration_rejects_bad_observations():
    cal = RequestCalibration()
    with pytest.raises(ValueError, match="equal lengths"):
        cal.observe(["a"], [1.0, 2.0], [1, 1])
    with pytest.raises(ValueError, match=">= 0"):
        cal.observe(["a"], [-1.0], [0])
    with pytest.raises(ValueError, match=">= 0"):
        cal.observe(["a"], [float("nan")], [0])


def test_worth_scales_what_the_slo_phase_counts():
    # r0 is 3 tokens behind on a 0.8-chain, r1 best effort on a 0.99-chain that wins every
    # node the throughput phase hands out; budget: 2 roots + 6
    c = CandidateBatch.from_trees([_chain(*[0.8] * 6), _chain(*[0.99] * 6)])
    a = np.array([3.0, 0.0])
    target = capped_requirement(a, 6)
    raw = select_slo_customized(c, 8, a, target, 16)
    same = select_slo_customized(c, 8, a, target, 16, worth=np.ones(2))
    half = select_slo_customized(c, 8, a, target, 16, worth=np.array([0.5, 1.0]))
    # raw: 1 + 0.8 + 0.64 + 0.512 = 2.95 < 3, one more node reaches 3.36: 4 nodes
    # half: 1 + 0.5 * (0.8 + 0.64 + ... + 0.26) = 2.48 < 3 at the chain's end: all 6
    np.testing.assert_array_equal(same.mask, raw.mask)
    assert raw.counts.tolist() == [5, 3] and half.counts.tolist() == [7, 1]
    # what is reported stays the draft's own f
    assert half.expected_accepted[0] == pytest.approx(1 + sum(0.8 ** k for k in range(1, 7)))
    # with no SLO pressure worth changes nothing
    free = select_slo_customized(c, 8, np.zeros(2), np.ones(2), 16, worth=np.array([0.1, 1]))
    np.testing.assert_array_equal(free.mask, select_slo_customized(
        c, 8, np.zeros(2), np.ones(2), 16).mask)


def _batch(relaxed=False):
    rows = [RequestProgress(f"r{i}", SLO.from_ms(40), 0.3, 5, 100) for i in range(2)]
    if relaxed:
        rows.append(RequestProgress("r2", SLO(None), 0.3, 5, 100))
    return BatchView.from_progress(rows)


def test_calibrated_policy_gives_an_over_promising_request_more_nodes():
    config = SchedulerConfig(budget=11)
    ada, cal = make_policy("adaserve-authors", config), make_policy("adaserve-authors:calibrate=on", config)
    batch, plan = _batch(relaxed=True), SpecPlan(depth=6, width=1)
    # r2 (best effort) wins whatever the throughput phase hands out
    cands = CandidateBatch.from_trees([_chain(*[0.8] * 6), _chain(*[0.8] * 6),
                                       _chain(*[0.99] * 6)])
    # need = 0.3 / 0.04 - (5 + 1) = 1.5 for r0, r1 (no latency model: t = 0): 1 + 0.8
    # covers it, one node each; the other 6 spare go to r2's 0.99 chain. No feedback yet:
    # the same selection as adaserve
    first = cal.select(batch, plan, cands)
    np.testing.assert_array_equal(first.mask, ada.select(batch, plan, cands).mask)
    assert first.counts.tolist() == [2, 2, 7]
    # r0's drafts deliver a third of what they promise, r1's all of it
    for _ in range(30):
        sel = cal.select(batch, plan, cands)
        predicted = sel.expected_accepted - 1
        cal.observe(batch.request_ids, sel, predicted * [1 / 3, 1.0, 1.0])
    assert cal.calibration.ratio("r0") < 0.6 < 0.9 < cal.calibration.ratio("r1")
    # r0 now counts its nodes at ~0.4 f: 1 + 0.4 x 0.8 < 1.5 <= 1 + 0.4 x (0.8 + 0.64), so
    # it takes two, and r2's chain one fewer
    assert cal.select(batch, plan, cands).counts.tolist() == [3, 2, 6]
    cal.forget("r0")
    assert "r0" not in cal.calibration._per_request


def test_calibrated_policy_learns_only_from_trees_that_drafted():
    cal = make_policy("adaserve-authors:calibrate=on", SchedulerConfig(budget=4))
    roots = CandidateBatch.roots([1, 2])
    sel = cal.select(_batch(), SpecPlan(depth=0, width=0), roots)
    cal.observe(("r0", "r1"), sel, np.zeros(2, np.int64))
    assert cal.calibration.ratio() == 1.0 and not cal.calibration._per_request


def test_the_engine_feeds_each_verification_back_and_forgets_finished_requests():
    setup = SimSetup(HardwareModel.load("llama3.1-70b-a100-tp4"),
                     load_acceptance("synthetic-llama3.1-70b-1b"), policy="adaserve-authors:calibrate=on")
    core, _ = build(setup, max_context=512, max_waiting=8)
    seen = []
    observe = core.policy.observe
    core.policy.observe = lambda ids, sel, acc: (seen.append((ids, sel, acc)),
                                                 observe(ids, sel, acc))
    for rid in ("a", "b"):
        core.add(rid, [1] * 8, SamplingParams(max_tokens=30, ignore_eos=True, seed=3),
                 SLO.from_ms(30))
    views = []
    plan = core.policy.plan
    core.policy.plan = lambda view: (views.append(view), plan(view))[1]
    while core.has_work:
        core.step()
    assert seen and all(len(ids) == acc.size == sel.n for ids, sel, acc in seen)
    assert all(np.all(acc <= sel.counts - 1) for _, sel, acc in seen)
    assert sum(int(acc.sum()) for _, _, acc in seen) > 0
    # R = max_tokens - tokens generated, so o + R = max_tokens - 1 once the first is out
    for v in views:
        started = v.decode_latency_s > 0
        np.testing.assert_array_equal((v.decoded_tokens + v.max_tokens_left)[started], 29)
    assert not core.policy.calibration._per_request  # both finished: forgotten

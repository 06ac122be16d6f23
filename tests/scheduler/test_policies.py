import subprocess
import sys

import numpy as np
import pytest

from adaserve.scheduler import (
    POLICIES,
    SLO,
    AcceptanceTracker,
    BatchView,
    CandidateBatch,
    CandidateTree,
    IterationLatency,
    LatencyModel,
    RequestProgress,
    SchedulerConfig,
    SpecPlan,
    depth_width,
    make_policy,
)
from adaserve.scheduler.pacing import pace_cap


def _batch(n, tpot_ms=None, latency_s=0.0, decoded=0, context=100):
    return BatchView.from_progress([
        RequestProgress(f"r{i}", SLO.from_ms(tpot_ms), latency_s, decoded, context)
        for i in range(n)
    ])


def _beam_candidates(n: int, plan: SpecPlan, edge: float = 0.6, seed: int = 0) -> CandidateBatch:
    """Trees shaped like a beam search of the plan: w nodes per layer after the first."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        parent, lp, layer = [-1], [0.0], [0]
        for _ in range(plan.depth):
            nxt = []
            for j in range(plan.width):
                p = layer[j % len(layer)]
                parent.append(p)
                lp.append(lp[p] + np.log(edge * rng.uniform(0.3, 1.0)))
                nxt.append(len(parent) - 1)
            layer = nxt
        depth = [0]
        for p in parent[1:]:
            depth.append(depth[p] + 1)
        out.append(CandidateTree(parent, np.arange(len(parent)), lp, depth))
    return CandidateBatch.from_trees(out)


@pytest.mark.parametrize("n, budget, expected", [
    (1, 16, (8, 16)), (4, 16, (4, 4)), (16, 16, (1, 1)), (64, 16, (1, 1)),
    (5, 16, (4, 3)), (64, 582, (8, 9)), (1, 582, (8, 16)),
])
def test_depth_width_eq8_eq9(n, budget, expected):
    assert depth_width(n, budget, max_depth=8, max_width=16) == expected


def test_depth_width_rejects_empty_batch():
    with pytest.raises(ValueError):
        depth_width(0, 16, 8, 16)


@pytest.mark.parametrize("kwargs", [
    {"budget": 0}, {"budget": 16, "max_depth": 0}, {"budget": 16, "max_width": 0},
    {"budget": 16, "slo_max_tokens": 0}, {"budget": 16, "specinfer_expansion": ()},
    {"budget": 16, "specinfer_expansion": (1, 0)}, {"budget": 16.5}, {"budget": True},
])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        SchedulerConfig(**kwargs)


def test_registry_and_unknown_name():
    assert set(POLICIES) == {"adaserve-authors", "adaserve-text", "adaserve", "global-greedy", "equal-greedy", "specinfer", "turbospec",
                             "incremental", "chain-4", "chain-6", "chain-8"}
    with pytest.raises(ValueError, match="adaserve-authors"):
        make_policy("eagle", SchedulerConfig(budget=16))


def _latency():
    target = LatencyModel(alpha=1e-6, gamma=1e-3, delta=0.02)
    draft = LatencyModel(alpha=1e-7, gamma=1e-4, delta=0.002)
    return IterationLatency(target, draft)


# every policy, and every AdaServe option on its own over the authors' scheduler
@pytest.mark.parametrize("name", sorted(POLICIES) + [
    "adaserve-authors:pace=0.7", "adaserve-authors:triage=on", "adaserve-authors:calibrate=on",
    "adaserve-authors:depth=measured", "adaserve:floor=off", "adaserve:depth=eq8"])
def test_every_policy_runs_an_iteration(name):
    config = SchedulerConfig(budget=32)
    policy = make_policy(name, config, _latency())
    batch = _batch(4, tpot_ms=30, latency_s=0.3, decoded=8)
    plan = policy.plan(batch)
    candidates = _beam_candidates(batch.n, plan) if plan.expansion is None else None
    if plan.expansion is not None:  # SpecInfer's fixed tree: 1,1,3,1,...: three chains
        candidates = _specinfer_candidates(batch.n, plan.expansion)
    sel = policy.select(batch, plan, candidates)
    assert sel.n == 4 and np.all(sel.counts >= 1)
    if name.startswith("adaserve-authors") or name in ("global-greedy", "equal-greedy"):
        assert sel.tokens <= config.budget
    if name == "incremental":
        assert plan.depth == 0 and sel.tokens == 4
    assert plan.t_spec_s > 0


def _specinfer_candidates(n, expansion):
    parent, layer = [-1], [0]
    for k in expansion:
        nxt = []
        for p in layer:
            for _ in range(k):
                parent.append(p)
                nxt.append(len(parent) - 1)
        layer = nxt
    edge = np.log(np.r_[1.0, np.full(len(parent) - 1, 0.7)])
    tree = CandidateTree.from_edges(parent, np.arange(len(parent)), edge)
    return CandidateBatch.from_trees([tree] * n)


def test_specinfer_plan_ignores_budget():
    policy = make_policy("specinfer", SchedulerConfig(budget=4), _latency())
    plan = policy.plan(_batch(8))
    assert plan.depth == 8 and plan.expansion == (1, 1, 3, 1, 1, 1, 1, 1)
    assert plan.candidate_nodes(8) == 8 * 21  # root + 1 + 1 + 3 * 6 nodes per request
    sel = policy.select(_batch(8), plan, _specinfer_candidates(8, plan.expansion))
    assert sel.tokens == 8 * 21  # far over the budget: what "no budget awareness" costs


@pytest.mark.parametrize("name, at_8", [("adaserve-text", (2, 2)), ("adaserve-authors", (1, 2))])
def test_budgeted_plan_adapts_to_load_and_stops_when_roots_fill_budget(name, at_8):
    # seed 002's Eq. 8: d = ceil(B/n) = 2 at n = 8; the authors' (EuroSys) Eq. 8:
    # floor(B/n) - 1 = 1. Both: w = floor(B/n) = 2, and B = 16 caps d at D_max = 8 at n = 1.
    policy = make_policy(name, SchedulerConfig(budget=16))
    assert (policy.plan(_batch(1)).depth, policy.plan(_batch(1)).width) == (8, 16)
    assert (policy.plan(_batch(8)).depth, policy.plan(_batch(8)).width) == at_8
    assert policy.plan(_batch(16)).depth == 0
    assert policy.plan(_batch(0)).depth == 0


def _priced_policy(draft_step, alpha, cost_aware=True):
    """B = 16 at batch 1 (Eq. 8-9: d = 8, w = 16) on the dev CPU's shape of costs: a
    target forward ~60 ms + 3 ms per token, a draft step `draft_step` seconds."""
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.06)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=draft_step)
    tracker = AcceptanceTracker(prior_alpha=alpha, prior_weight=1e9)
    return make_policy("adaserve-authors", SchedulerConfig(budget=16, cost_aware_depth=cost_aware),
                       IterationLatency(target, draft), tracker)


def test_costly_draft_cuts_depth_to_the_goodput_optimum():
    policy = _priced_policy(draft_step=0.012, alpha=0.65)
    batch = _batch(1)
    plan = policy.plan(batch)
    assert plan.width == 16 and 1 < plan.depth < 8

    def rate(d):  # predicted tokens per second of a depth-d tree, by hand
        seconds = 0.06 + 3e-3 * 16 + 0.012 * d
        return sum(0.65 ** j for j in range(d + 1)) / seconds

    assert plan.depth == max(range(1, 9), key=rate)
    assert plan.t_spec_s == pytest.approx(0.06 + 3e-3 * 16 + 0.012 * plan.depth)


def test_free_draft_or_cost_blind_config_keeps_eq8_depth():
    assert _priced_policy(draft_step=0.0, alpha=0.65).plan(_batch(1)).depth == 8
    assert _priced_policy(draft_step=0.012, alpha=0.65,
                          cost_aware=False).plan(_batch(1)).depth == 8
    # a draft the target agrees with almost always earns every step of a costly tree
    assert _priced_policy(draft_step=0.012, alpha=0.99).plan(_batch(1)).depth == 8
    with pytest.raises(ValueError, match="cost_aware_depth"):
        SchedulerConfig(budget=16, cost_aware_depth=1)


def test_adaserve_gives_budget_to_the_request_behind_its_slo():
    policy = make_policy("adaserve-authors", SchedulerConfig(budget=8, slo_max_tokens=8))
    # r0 is 7 tokens behind a 20 ms SLO (15 due after 0.3 s, 8 decoded with the prefill's
    # token): its need is capped at d + 1; r1 is best effort
    batch = BatchView.from_progress([
        RequestProgress("behind", SLO.from_ms(20), 0.3, 7, 50),
        RequestProgress("relaxed", SLO(None), 0.2, 7, 50),
    ])
    plan = policy.plan(batch)
    cands = _beam_candidates(2, plan, edge=0.9)
    adaserve = policy.select(batch, plan, cands)
    greedy = make_policy("global-greedy", SchedulerConfig(budget=8)).select(batch, plan, cands)
    assert adaserve.counts[0] > greedy.counts[0]
    assert adaserve.tokens == greedy.tokens == 8


def test_requirement_matches_tpot_definition():
    # 10 tokens after the first in 0.25 s against a 25 ms SLO: exactly on time; with a 30 ms
    # iteration ahead it must accept 1.2 tokens to stay on it.
    r = RequestProgress("x", SLO.from_ms(25), 0.25, 10, 0)
    assert r.requirement(0.03) == pytest.approx(1.2)
    b = BatchView.from_progress([r, RequestProgress("y", SLO(None), 5.0, 1, 0)])
    np.testing.assert_allclose(b.requirements(0.03), [1.2, 0.0])


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "30", True])
def test_slo_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        SLO.from_ms(bad)


def _turbo(alpha, target, draft=None, k_max=8):
    tracker = AcceptanceTracker(prior_alpha=alpha, prior_weight=1e9)
    return make_policy("turbospec", SchedulerConfig(budget=64, max_chain=k_max),
                       IterationLatency(target, draft), tracker)


def test_turbospec_picks_k0_when_speculation_is_a_loss():
    # verification cost grows steeply with tokens and the draft is poor: one token is best
    compute_bound = LatencyModel(alpha=0.0, gamma=0.01, delta=0.001)
    policy = _turbo(0.2, compute_bound, LatencyModel(alpha=0.0, gamma=1e-3, delta=0.005))
    batch = _batch(32)
    assert policy.plan(batch).depth == 0
    assert int(np.argmax(policy.goodput(batch))) == 0


def test_turbospec_picks_long_chain_for_small_accurate_batch():
    memory_bound = LatencyModel(alpha=0.0, gamma=1e-5, delta=0.02)
    policy = _turbo(0.9, memory_bound, LatencyModel(alpha=0.0, gamma=1e-5, delta=0.001))
    plan = policy.plan(_batch(1))
    assert plan.depth >= 6 and plan.width == 1


def test_turbospec_needs_latency_model():
    with pytest.raises(ValueError, match="latency"):
        make_policy("turbospec", SchedulerConfig(budget=16))


def test_select_rejects_mismatched_batch():
    policy = make_policy("adaserve-authors", SchedulerConfig(budget=16))
    with pytest.raises(ValueError, match="candidate trees"):
        policy.select(_batch(2), policy.plan(_batch(2)), CandidateBatch.roots([1, 2, 3]))


def test_library_does_not_import_torch():
    code = ("import sys, adaserve.scheduler, adaserve.loadgen; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_where_drafting_cannot_pay_the_plan_drafts_nothing_but_probes():
    # a draft the target rarely agrees with, at 30 ms a step: no depth beats k = 0
    policy = _priced_policy(draft_step=0.03, alpha=0.1)
    batch = _batch(1)
    plans = [policy.plan(batch) for _ in range(2 * policy.PROBE_EVERY)]
    drafted = [i for i, p in enumerate(plans) if p.speculates]
    # every PROBE_EVERY-th plan drafts one level so the acceptance estimate can move
    assert drafted == [policy.PROBE_EVERY - 1, 2 * policy.PROBE_EVERY - 1]
    assert all(plans[i].depth == 1 for i in drafted)
    idle = plans[0]
    assert (idle.depth, idle.width) == (0, 0)
    assert idle.t_spec_s == pytest.approx(0.06 + 3e-3 * 1)  # the roots alone, no draft step
    # the same draft agreeing often pays for a deep tree again
    assert _priced_policy(draft_step=0.03, alpha=0.95).plan(batch).depth > 1


def _goodput_policy(spec, alpha=0.7):
    """B = 4 on the dev CPU's shape of costs: a 50-ms forward + 2 ms a verified token, a
    3.5-ms draft step (scheduler/budget.py)."""
    target = LatencyModel(alpha=0.0, gamma=2e-3, delta=0.05)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=3.5e-3)
    tracker = AcceptanceTracker(prior_alpha=alpha, prior_weight=1e9)
    return make_policy(spec, SchedulerConfig(budget=4), IterationLatency(target, draft), tracker)


def test_with_the_option_adaserve_drafts_past_b_and_selects_within_its_budget():
    batch = _batch(6, tpot_ms=30.0)
    fixed = _goodput_policy("adaserve:budget=profile")  # B = 4 < 6 requests: roots fill it
    assert not fixed.plan(batch).speculates
    ours = _goodput_policy("adaserve:budget=goodput")
    plan = ours.plan(batch)
    assert plan.speculates and plan.budget > 6
    sel = ours.select(batch, plan, _beam_candidates(6, plan))
    assert 6 < sel.tokens <= plan.budget
    # the baselines keep the configured B
    gg = _goodput_policy("global-greedy")
    assert not gg.plan(batch).speculates


def test_a_budget_that_adapts_keeps_the_draft_live_at_b_1():
    """B = 1 leaves the draft idle (no prefill, no KV) for a policy that can never ask for
    it; with budget=goodput it can, so the engine must keep it (a fresh machine whose
    profile gave B = 1 crashed on the first drafted iteration)."""
    target = LatencyModel(alpha=0.0, gamma=2e-3, delta=0.05)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=3.5e-3)
    priced = IterationLatency(target, draft)
    assert not make_policy("adaserve:budget=profile", SchedulerConfig(budget=1), priced).may_draft
    assert make_policy("adaserve", SchedulerConfig(budget=1), priced).may_draft
    # without a priced draft (or cost-aware planning off) the budget cannot adapt
    assert not make_policy("adaserve", SchedulerConfig(budget=1)).may_draft
    assert not make_policy("adaserve", SchedulerConfig(budget=1, cost_aware_depth=False),
                           priced).may_draft
    assert not make_policy("global-greedy", SchedulerConfig(budget=1), priced).may_draft


def _paced_pair(pace):
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.04)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.004)
    tracker = AcceptanceTracker(prior_alpha=0.9, prior_weight=1e9)
    spec = f"adaserve-authors:pace={pace}"
    return make_policy(spec, SchedulerConfig(budget=16), IterationLatency(target, draft), tracker)


def test_pacing_is_read_at_planning_so_the_draft_runs_no_deeper_than_a_cap_keeps():
    """A request far ahead of its SLO is cut to its root after selection; planned before
    the fix, its tree was drafted anyway (a third of the served preset's steps)."""
    ahead = _batch(2, tpot_ms=100.0, latency_s=1.0, decoded=39)  # 25 ms a token so far
    assert _paced_pair("off").plan(ahead).depth > 0
    plan = _paced_pair(0.7).plan(ahead)
    assert not plan.speculates and plan.budget == 16
    # a request behind its SLO: every cap is above the depth, the plan is unchanged
    behind = _batch(2, tpot_ms=100.0, latency_s=3.0, decoded=19)
    assert _paced_pair(0.7).plan(behind) == _paced_pair("off").plan(behind)
    # in between, the depth is cut to the largest cap less one, and selection from the
    # shallower tree keeps every token the deep tree's paced selection kept
    mid = _batch(2, tpot_ms=100.0, latency_s=1.6, decoded=19)
    deep, policy = _paced_pair("off").plan(mid), _paced_pair(0.7)
    cut = policy.plan(mid)
    caps = pace_cap(mid, cut.t_spec_s, 0.7, policy.config.rules)
    assert 0 < cut.depth == int(caps.max()) - 1 < deep.depth
    kept_deep = policy.select(mid, deep, _beam_candidates(2, deep))
    kept_cut = policy.select(mid, cut, _beam_candidates(2, cut))
    assert kept_cut.counts.tolist() == kept_deep.counts.tolist()
    # where planning is cost-blind (the simulated paper set-ups) Eq. 8's depth stands
    priced = IterationLatency(LatencyModel(alpha=0.0, gamma=3e-3, delta=0.04),
                              LatencyModel(alpha=0.0, gamma=0.0, delta=0.004))
    blind = [make_policy(f"adaserve-authors:pace={p}",
                         SchedulerConfig(budget=16, cost_aware_depth=False), priced)
             for p in ("off", 0.7)]
    assert blind[1].plan(ahead) == blind[0].plan(ahead) and blind[1].plan(ahead).depth > 1


def _lost_pair(lost, cost_aware=True):
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.04)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.004)
    tracker = AcceptanceTracker(prior_alpha=0.9, prior_weight=1e9)
    spec = f"adaserve-authors:triage=on,lost={lost}"
    return make_policy(spec, SchedulerConfig(budget=16, cost_aware_depth=cost_aware),
                       IterationLatency(target, draft), tracker)


def test_lost_roots_gives_a_request_triage_gave_up_its_root_alone_and_stops_drafting_for_it():
    """Two requests at 17.5 ms a token against a 20 ms SLO, 60 tokens left, in ~0.1 s
    iterations yielding ~2 tokens, cannot attain whatever the tree; with lost=serve they still take the throughput phase's nodes, with
    lost=roots they verify their roots, and once a drafted selection has shown them lost,
    the next plan drafts nothing at all (nobody else could keep a node)."""
    progress = [RequestProgress(f"r{i}", SLO.from_ms(20.0), 0.7, 40, 100, max_tokens_left=60)
                for i in range(2)]
    batch = BatchView.from_progress(progress)
    for lost, kept in (("serve", True), ("roots", False)):
        policy = _lost_pair(lost)
        plan = policy.plan(batch)  # never drafted for: not yet taken as lost at planning
        assert plan.speculates
        sel = policy.select(batch, plan, _beam_candidates(2, plan))
        assert bool((sel.counts > 1).any()) is kept
        replanned = policy.plan(batch)
        assert replanned.speculates is kept
    # a request with an SLO it can still keep beside them is drafted for as before
    ok = RequestProgress("ok", SLO.from_ms(60.0), 0.5, 10, 100, max_tokens_left=50)
    mixed = BatchView.from_progress(progress + [ok])
    policy = _lost_pair("roots")
    first = policy.select(mixed, p := policy.plan(mixed), _beam_candidates(3, p))
    assert first.counts[:2].tolist() == [1, 1] and first.counts[2] > 1
    assert policy.plan(mixed).speculates
    # where planning is cost-blind (the simulated paper set-ups) lost=roots changes nothing
    blind = [_lost_pair(v, cost_aware=False) for v in ("serve", "roots")]
    plans = [b.plan(batch) for b in blind]
    assert plans[0] == plans[1]
    sels = [b.select(batch, pl, _beam_candidates(2, pl)) for b, pl in zip(blind, plans)]
    assert sels[0].counts.tolist() == sels[1].counts.tolist()


def test_a_forgotten_request_leaves_no_best_yield_behind():
    policy = _lost_pair("roots")
    progress = [RequestProgress(f"r{i}", SLO.from_ms(20.0), 0.7, 40, 100, max_tokens_left=60)
                for i in range(2)]
    batch = BatchView.from_progress(progress)
    policy.select(batch, p := policy.plan(batch), _beam_candidates(2, p))
    assert not policy.plan(batch).speculates
    for rid in ("r0", "r1"):  # the same ids again are new requests: reachable until drafted for
        policy.forget(rid)
    assert policy.plan(batch).speculates

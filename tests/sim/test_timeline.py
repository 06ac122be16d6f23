"""A deterministic latency and acceptance model give a timeline computed by hand."""

from __future__ import annotations

import pytest

from adaserve.sim import SimRequest, SimSetup, build, simulate
from sim_models import ChainAcceptance, linear_hardware


def _run(reqs, hardware=None, accept=2):
    setup = SimSetup(hardware or linear_hardware(), ChainAcceptance(accept=accept),
                     policy="global-greedy", budget=4, max_depth=3, max_width=1,
                     min_depth=2, cost_aware_depth=False)
    core, clock = build(setup, max_context=64, max_waiting=16)
    return simulate(core, clock, reqs), core, clock


def test_hand_computed_timeline():
    a = SimRequest(0, 0.0, "urgent", 100.0, prompt_tokens=5, output_tokens=7)
    b = SimRequest(1, 0.040, "relaxed", 500.0, prompt_tokens=3, output_tokens=3)
    (ra, rb), core, clock = _run([a, b])
    # Eq. 8 (EuroSys): d = clip(D_max 3, D_min 2, floor(B/n) - 1); w = 1.
    # iteration 1, t = 0: prefill A's 4 tokens (target 10 + 4 ms, draft 2 ms) = 16 ms; A alone
    # decodes: d = min(3, 4 - 1) = 3, w = 1: 3 draft steps (6 ms), verify 4 tokens (14 ms);
    # 2 accepted + the bonus: 3 tokens at 36 ms
    # iteration 2: 6 + 14 ms -> 3 more at 56 ms (B arrived at 40 ms, waits for the next one)
    # iteration 3, t = 56: prefill B's 2 tokens (14 ms); n = 2: d = max(2, 2 - 1) = 2, 2 draft steps
    # (4 ms); B = 4 verifies the 2 roots and the 2 depth-1 nodes (f 0.9 beats 0.81): 14 ms ->
    # 88 ms: A takes 1 of its 2 (7 = max_tokens, finished), B gets its first 2
    # iteration 4, t = 88: B alone, d = 3: 6 + 14 ms -> its last token at 108 ms
    assert ra.first_token_s == pytest.approx(0.036)
    assert ra.last_token_s == ra.finished_s == pytest.approx(0.088)
    assert ra.output_tokens == 7 and ra.status == "ok"
    assert ra.tpot_ms == pytest.approx((88 - 36) / 6)
    assert ra.ttft_ms == pytest.approx(36)
    assert rb.first_token_s == pytest.approx(0.088)
    assert rb.last_token_s == pytest.approx(0.108)
    assert rb.ttft_ms == pytest.approx(48)  # sent at 40 ms
    assert rb.tpot_ms == pytest.approx(10)
    assert clock.now() == pytest.approx(0.108)
    st = list(core.stats)
    assert [s.seconds for s in st] == pytest.approx([0.036, 0.020, 0.032, 0.020])
    assert [(s.running, s.depth, s.width, s.verify_tokens) for s in st] == [
        (1, 3, 1, 4), (1, 3, 1, 4), (2, 2, 1, 4), (1, 3, 1, 4)]
    assert [s.prefill_tokens for s in st] == [4, 0, 2, 0]
    assert ra.attained and rb.attained
    # the engine's own report of the request agrees with the client-side record
    assert ra.server["tpot_ms"] == pytest.approx(ra.tpot_ms)


def test_the_draft_catches_up_on_tokens_it_was_not_fed():
    a = SimRequest(0, 0.0, "urgent", 100.0, prompt_tokens=5, output_tokens=8)
    _, core, _ = _run([a], linear_hardware(draft_per_token_s=1e-3), accept=3)
    # iteration 1: prefill 4 tokens, target 14 ms + draft 2 + 4 ms; draft step 1 feeds the
    # root (3 ms), steps 2 and 3 one node each (3 + 3 ms); verify 4 tokens 14 ms -> 43 ms.
    # All 3 accepted: the draft was fed depths 1-2, so step 1 of iteration 2 feeds the
    # depth-3 token and the bonus (4 ms): 4 + 3 + 3 + 14 = 24 ms
    assert [s.seconds for s in core.stats] == pytest.approx([0.043, 0.024])


def test_idle_engine_waits_for_the_next_arrival():
    late = SimRequest(0, 5.0, "urgent", 100.0, prompt_tokens=1, output_tokens=1)
    (r,), _, clock = _run([late])
    # no prefill (the one prompt token is the root); one iteration: 6 ms draft + 14 ms verify
    assert r.first_token_s == pytest.approx(5.020)
    assert r.tpot_ms is None and r.attained
    assert clock.now() == pytest.approx(5.020)


def test_incremental_has_no_draft_cost():
    a = SimRequest(0, 0.0, "urgent", 100.0, prompt_tokens=2, output_tokens=3)
    setup = SimSetup(linear_hardware(), ChainAcceptance(accept=2), policy="incremental")
    core, clock = build(setup, max_context=64, max_waiting=16)
    (r,) = simulate(core, clock, [a])
    # prefill 1 token (10 + 1 ms: no draft runs beside incremental), then 3 plain steps of
    # 11 ms
    assert r.first_token_s == pytest.approx(0.022)
    assert r.finished_s == pytest.approx(0.044)
    assert r.tpot_ms == pytest.approx(11)


def _two_requests(system: str, hardware=None):
    """a: a 2-token prompt at t = 0, 4 tokens out; b: a 4-token prompt at 5 ms, 2 out."""
    a = SimRequest(0, 0.0, "urgent", 100.0, prompt_tokens=2, output_tokens=4)
    b = SimRequest(1, 0.005, "relaxed", 500.0, prompt_tokens=4, output_tokens=2)
    setup = SimSetup(hardware or linear_hardware(), ChainAcceptance(accept=2), policy=system)
    core, clock = build(setup, max_context=64, max_waiting=16)
    return simulate(core, clock, [a, b]), core


def test_prefill_first_timeline():
    (ra, rb), core = _two_requests("vllm")
    # iteration 1, t = 0: prefill a's 1 token (10 + 1 ms), nothing else -> 11 ms
    # iteration 2, t = 11: b (arrived at 5 ms) prefills 3 tokens (13 ms) while a waits -> 24 ms
    # iterations 3-4: a and b decode, 2 roots each (12 ms): 36 ms, 48 ms (b's 2 tokens)
    # iterations 5-6: a alone (11 ms): 59 ms, 70 ms
    assert (ra.first_token_s, ra.finished_s) == pytest.approx((0.036, 0.070))
    assert (rb.first_token_s, rb.finished_s) == pytest.approx((0.036, 0.048))
    # decoding iterations only: the prefill-only ones keep no stats
    assert [s.seconds for s in core.stats] == pytest.approx([0.012, 0.012, 0.011, 0.011])
    assert [s.prefill_tokens for s in core.stats] == [0, 0, 0, 0]


def test_chunked_prefill_timeline_unfused():
    (ra, rb), core = _two_requests("sarathi")
    # iteration 1: prefill a's token (11 ms), a's root (11 ms) -> 22 ms
    # iteration 2, t = 22: b's 3 prompt tokens (13 ms), then a and b decode (12 ms) -> 47 ms
    # iteration 3: 12 ms -> 59 ms (b's last); iteration 4: a alone, 11 ms -> 70 ms
    assert (ra.first_token_s, ra.finished_s) == pytest.approx((0.022, 0.070))
    assert (rb.first_token_s, rb.finished_s) == pytest.approx((0.047, 0.059))
    assert [s.seconds for s in core.stats] == pytest.approx([0.022, 0.025, 0.012, 0.011])
    assert [s.prefill_tokens for s in core.stats] == [1, 3, 0, 0]


def test_fused_chunked_prefill_timeline():
    (ra, rb), core = _two_requests("sarathi", linear_hardware(fuses_prefill=True))
    # the chunk and the roots in one forward: iteration 1, a's prompt token and its root,
    # 10 + 2 ms -> 12 ms; iteration 2, t = 12: b's 3 prompt tokens and 2 roots, 10 + 5 ms
    # -> 27 ms; then as unfused: 12 ms -> 39 ms (b's last), 11 ms -> 50 ms
    assert (ra.first_token_s, ra.finished_s) == pytest.approx((0.012, 0.050))
    assert (rb.first_token_s, rb.finished_s) == pytest.approx((0.027, 0.039))
    assert [s.seconds for s in core.stats] == pytest.approx([0.012, 0.015, 0.012, 0.011])


def test_fused_prefill_only_iterations_cost_the_prefill_alone():
    # prefill-first on fusing hardware: nothing to fuse with; as unfused
    (ra, rb), _ = _two_requests("vllm", linear_hardware(fuses_prefill=True))
    assert (ra.first_token_s, ra.finished_s) == pytest.approx((0.036, 0.070))
    assert (rb.first_token_s, rb.finished_s) == pytest.approx((0.036, 0.048))


def test_fused_iteration_still_pays_the_drafts_prefill_and_steps():
    a = SimRequest(0, 0.0, "urgent", 100.0, prompt_tokens=5, output_tokens=7)
    (ra,), core, _ = _run([a], linear_hardware(fuses_prefill=True))
    # iteration 1 of test_hand_computed_timeline (36 ms) with the target's prefill (14 ms)
    # and verify (14 ms) fused into one forward of 4 + 4 tokens (18 ms): the draft's
    # prefill (2 ms) and its 3 steps (6 ms) stay -> 26 ms
    assert core.stats[0].seconds == pytest.approx(0.026)
    assert core.stats[1].seconds == pytest.approx(0.020)  # no prefill left: as before

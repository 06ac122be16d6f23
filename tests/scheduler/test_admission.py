"""TTFT-aware admission (scheduler/admission.py, option admit=deadline): requests still in
time for their TTFT SLO are admitted first, earliest deadline first; late ones wait until
nobody in time does, oldest first."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import SchedulerConfig, make_policy, policy_options
from adaserve.scheduler.admission import deadline_order


def test_in_time_requests_first_then_the_late_oldest_first():
    # arrivals at 0, 1, 2, 9, 10 s; now 8 s, TTFT SLO 5 s: deadlines 5, 6, 7 passed
    order = deadline_order(np.array([0.0, 1.0, 2.0, 9.0, 10.0]), now=8.0, ttft_slo_s=5.0)
    assert order.tolist() == [3, 4, 0, 1, 2]
    # with nobody late it is first come, first served
    assert deadline_order(np.array([3.0, 1.0, 2.0]), now=2.5).tolist() == [1, 2, 0]
    # ties keep arrival order
    assert deadline_order(np.array([1.0, 1.0, 1.0]), now=0.0).tolist() == [0, 1, 2]


def test_each_request_may_have_its_own_ttft_slo():
    # arrivals at 0, 1, 2 s with TTFT SLOs 10, 2, 5 s: deadlines 10, 3, 7; now 2.5 s
    order = deadline_order(np.array([0.0, 1.0, 2.0]), now=2.5,
                           ttft_slo_s=np.array([10.0, 2.0, 5.0]))
    assert order.tolist() == [1, 2, 0]
    # at 4 s the second is late (deadline 3): after the others, whatever its deadline
    order = deadline_order(np.array([0.0, 1.0, 2.0]), now=4.0,
                           ttft_slo_s=np.array([10.0, 2.0, 5.0]))
    assert order.tolist() == [2, 0, 1]


def test_the_option_reaches_the_policy_and_the_baselines_stay_first_come():
    cfg = SchedulerConfig(budget=8)
    assert make_policy("adaserve:admit=deadline", cfg).admission == "deadline"
    assert make_policy("adaserve", cfg).admission == "deadline"  # the preset carries it
    assert make_policy("adaserve:admit=fifo", cfg).admission == "fifo"
    assert make_policy("adaserve-authors", cfg).admission == "fifo"
    assert make_policy("incremental", cfg).admission == "fifo"
    with pytest.raises(ValueError, match="admit"):
        policy_options("adaserve:admit=lifo")


@pytest.mark.parametrize("admit, first", [("fifo", 1), ("deadline", 2)])
def test_the_engine_admits_in_the_order_the_option_says(admit, first):
    """One slot, busy ~12 s with request 0; request 1 arrives at once, request 2 at 9 s.
    When the slot frees, request 1 is 7 s past its 5-s TTFT deadline and request 2 still in
    time: first come admits 1, deadline admits 2 (the real engine loop, simulated model)."""
    from adaserve.sim import SimRequest
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:admit={admit}", max_batch=1)
    reqs = [SimRequest(0, 0.0, "x", 30.0, 100, 600), SimRequest(1, 0.01, "x", 30.0, 100, 64),
            SimRequest(2, 9.0, "x", 30.0, 100, 64)]
    rec = {r.index: r for r in run(setup, reqs).records}
    assert 9.5 < rec[0].last_token_s < 13.5  # busy when request 2 came, which is then in time
    other = 3 - first
    assert rec[first].first_token_s < rec[other].first_token_s


def test_predicted_ttft_from_the_queue_the_slots_and_the_recent_past():
    from adaserve.scheduler.admission import predicted_ttft

    # nothing seen yet: no prediction, so nobody is refused on no evidence
    assert predicted_ttft(0, 1, 0, 100, 512, None, 0.1) is None
    assert predicted_ttft(0, 1, 0, 100, 512, 2.0, None) is None
    # a free slot, nothing queued: one iteration prefills 100 tokens
    assert predicted_ttft(0, 1, 0, 100, 512, 2.0, 0.1) == pytest.approx(0.1)
    # 3 ahead, 1 free slot: 3 departures at 2 s; their 1,024 queued tokens (0.2 s) overlap
    # the wait; then its own 600 tokens in two 512-token iterations
    assert predicted_ttft(3, 1, 1024, 600, 512, 2.0, 0.1) == pytest.approx(6.0 + 0.2)
    # a prefill-bound queue: 5,120 tokens ahead take 1 s, more than the slot wait
    assert predicted_ttft(0, 1, 5120, 512, 512, 2.0, 0.1) == pytest.approx(1.0 + 0.1)


def test_refusal_counts_the_requests_ahead_as_the_admission_order_does():
    from adaserve.scheduler.admission import FlowMeter, refusal

    flow = FlowMeter()
    for t in (0.0, 1.0, 2.0):  # a departure every second
        flow.finished(t)
    flow.iteration(0.05)
    assert flow.departure_s == pytest.approx(1.0) and flow.iteration_s == pytest.approx(0.05)
    # at 10 s, 8 waiting, 4 of them late (arrived at 1-4 s, TTFT SLO 5 s), one free slot
    submitted = np.array([1.0, 2.0, 3.0, 4.0, 8.0, 8.5, 9.0, 9.5])
    prompts = np.full(8, 100)
    fifo = refusal(10.0, submitted, prompts, 0, 1, "fifo", 100, 512, flow)
    deadline = refusal(10.0, submitted, prompts, 0, 1, "deadline", 100, 512, flow)
    # first come: 8 ahead, 8 departures (8 s) + its 0.05-s prefill: 3.05 s past the SLO;
    # deadline: the 4 in time ahead, 4 departures + 0.05 s: in time
    assert fifo == pytest.approx(3.05) and deadline is None
    # each waiting request with its own TTFT SLO: with "deadline" the arriving request (1 s
    # TTFT SLO, deadline 11 s) has ahead of it only the in-time ones due before it
    theirs = np.array([5.0, 5.0, 5.0, 5.0, 2.9, 30.0, 30.0, 1.0])  # deadlines: 10.9, 10.5 in time
    late = refusal(10.0, submitted, prompts, 0, 1, "deadline", 100, 512, flow, 1.0, theirs)
    # two ahead: 2 departures (2 s) + 0.05 s: 1.05 s past its 1-s SLO
    assert late == pytest.approx(1.05)
    # by default each waiting request is held to the arriving one's SLO, as before
    assert refusal(10.0, submitted, prompts, 0, 1, "deadline", 100, 512, flow, 5.0) is None


def test_the_engine_refuses_at_the_door_and_a_refusal_is_a_miss():
    """One slot; three requests run first (a departure about every 3 s); then five arrive
    at once. Refusing, the engine admits those predicted within 5 s and answers the others
    at the door, each a miss in every reading; the others all meet the TTFT SLO. Without
    refusing, all five queue and the last ones wait past it."""
    from adaserve.sim import SimRequest
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment

    reqs = ([SimRequest(i, 0.01 * i, "x", 60.0, 100, 64) for i in range(3)]
            + [SimRequest(3 + i, 20.0, "x", 60.0, 100, 64) for i in range(5)])
    out = {}
    for refuse in ("on", "off"):
        setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:refuse={refuse}",
                                                           max_batch=1)
        out[refuse] = run(setup, reqs).records
    refused = [r for r in out["on"] if r.status == "rejected"]
    # (the first three came before any departure: nothing to predict from, none refused)
    served = [r for r in out["on"] if r.status == "ok" and r.index >= 3]
    assert [r.index for r in refused] == [5, 6, 7] and len(served) == 2
    assert all(r.attained is False and r.attained_paper is False
               and r.attained_with_ttft(5000.0) is False for r in refused)
    assert all(r.ttft_ms <= 5000.0 for r in served)
    assert all(r.status == "ok" for r in out["off"])
    assert max(r.ttft_ms for r in out["off"]) > 5000.0


@pytest.mark.parametrize("admit, first", [("fifo", "late"), ("deadline", "in time")])
def test_a_late_prompt_yields_the_prefill_chunk_to_one_in_time(admit, first):
    """Two prompts prefilling, each longer than the chunk; the older one is already past
    its TTFT deadline. First come prefills it first; deadline the one still in time."""
    from adaserve.engine.sampling import SamplingParams
    from adaserve.sim.driver import build
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:admit={admit}",
                                                       max_batch=2)
    core, clock = build(setup, max_context=8192, max_waiting=8)
    chunk = core.cfg.prefill_chunk
    late = core.add("late", [0] * (3 * chunk), SamplingParams(max_tokens=8))
    in_time = core.add("in time", [0] * (3 * chunk), SamplingParams(max_tokens=8))
    late.t_submit = clock.now() - 10.0  # it arrived 10 s ago: its 5-s deadline has passed
    core.step()
    prefilled = {r.id: r.target_len for r in (late, in_time)}
    assert prefilled[first] == chunk and sum(prefilled.values()) == chunk


def _held(cap: str, slo_ms: float | None, slo_between: int | None = None) -> int:
    """Requests the engine holds after one iteration, of eight queued at once with 64-token
    prompts: with a TPOT SLO of ``slo_ms``, or, ``slo_between`` = k, one between the
    predicted decode steps of k and k + 1 such requests (the real engine loop, simulated
    model)."""
    from adaserve.engine.sampling import SamplingParams
    from adaserve.scheduler import SLO
    from adaserve.sim.driver import build
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:cap={cap}", max_batch=8)
    core, _ = build(setup, max_context=8192, max_waiting=16)
    if slo_between is not None:
        k = slo_between
        steps = [core.latency.predict(64 * n, (), n, n) for n in (k, k + 1)]
        assert steps[0] < steps[1]  # a step grows with the batch here
        slo_ms = 1e3 * sum(steps) / 2
    for i in range(8):
        core.add(f"r{i}", [0] * 64, SamplingParams(max_tokens=512), SLO.from_ms(slo_ms))
    core.step()
    return len(core.slots)


@pytest.mark.parametrize("k", [1, 4])
def test_the_cap_holds_the_batch_where_the_decode_step_keeps_the_tightest_slo(k):
    assert _held("on", None, slo_between=k) == k
    assert _held("off", None, slo_between=k) == 8  # without it: every free slot


def test_the_cap_binds_only_on_a_tpot_slo_and_never_empties_the_engine():
    assert _held("on", None) == 8  # best effort has no TPOT SLO to keep
    assert _held("on", 1e-3) == 1  # no batch keeps 1 us; one request is still served
    cfg = SchedulerConfig(budget=8)
    assert make_policy("adaserve:cap=on", cfg).caps_batch
    assert not make_policy("adaserve", cfg).caps_batch
    assert not make_policy("incremental", cfg).caps_batch

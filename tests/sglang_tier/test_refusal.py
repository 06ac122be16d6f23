"""The policy's refuse=on inside SGLang (adaserve/sglang/refusal.py, rounds.py): SGLang's own
requests, the door's prediction on the numbers a scheduler has seen, the hook on SGLang's
queue-limit seam, and the Retry-After read back from the refusal's message."""

from __future__ import annotations

import time
from array import array
from types import SimpleNamespace

import pytest
from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

from adaserve.scheduler.admission import late_of, late_reason, retry_after_s
from adaserve.server.errors import at_capacity
from adaserve.sglang import admission
from adaserve.sglang import refusal as door
from adaserve.sglang.rounds import PrefillFlow, Rounds
from adaserve.sglang.worker import AdaServeDraftWorker

CHUNK = 256


@pytest.fixture(autouse=True)
def env(slo_env, monkeypatch):
    slo_env("100", "300")
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse=on")
    admission.served_options.cache_clear()
    yield
    admission.served_options.cache_clear()


def req(rid: str, prompt: int = 20, arrived_ago_s: float = 0.0, **custom) -> Req:
    r = Req(rid, "", array("q", range(1, prompt + 1)),
            SamplingParams(max_new_tokens=64, custom_params=custom))
    r.time_stats.scheduler_recv_time = time.perf_counter() - arrived_ago_s
    return r


def flowing(per_token_s: float = 0.01, departure_s: float = 2.0) -> Rounds:
    """Rounds that have seen one extend of 100 tokens at ``per_token_s`` and two departures
    ``departure_s`` apart."""
    r = Rounds()
    r.flow.extended(100 * per_token_s, 100)
    r.flow.finished(10.0)
    r.flow.finished(10.0 + departure_s)
    return r


def test_the_prefill_rate_is_summed_over_extend_rounds_not_averaged_per_round():
    f = PrefillFlow()
    assert f.iteration_s is None
    f.extended(1.0, 250)  # a full chunk
    f.extended(0.1, 2)  # its remainder: mostly a forward's fixed cost
    assert f.iteration_s == pytest.approx(1.1 / 252)
    f.extended(0.5, 0)  # an extend of no prompt token says nothing of the rate
    assert f.iteration_s == pytest.approx(1.1 / 252)


def test_rounds_count_a_request_seen_running_as_it_leaves():
    r = Rounds()
    a, b = req("a"), req("b")
    decode = SimpleNamespace(forward_mode=ForwardMode.DECODE, batch_size=lambda: 2)
    extend = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_num_tokens=40)
    r.tick(1.0, None, [a, b])
    r.tick(1.4, extend, [a, b])  # a 0.4-s extend of 40 prompt tokens
    assert r.flow.iteration_s == pytest.approx(0.01)
    a.finished_reason = object()  # a finished in the round from 1.4
    r.tick(1.5, decode, [b])
    assert r.flow.departure_s is None  # one departure: no gap yet
    b.finished_reason = object()
    r.tick(3.5, decode, [])
    assert r.flow.departure_s == pytest.approx(2.0)
    r.tick(4.0, decode, [])  # a request leaves once
    assert r.flow.departure_s == pytest.approx(2.0)


def scheduler(waiting=(), running=0, chunked=None, rounds=None, worker=True, slots=4,
              running_reqs=()):
    w = AdaServeDraftWorker.__new__(AdaServeDraftWorker) if worker else None
    sent = []
    s = SimpleNamespace(
        draft_worker=SimpleNamespace(_draft_worker=w), waiting_queue=list(waiting),
        chunked_req=chunked, running_batch=SimpleNamespace(batch_size=lambda: running + len(running_reqs),
                                      reqs=list(running_reqs)),
        max_running_requests=slots, chunked_prefill_size=CHUNK,
        _adaserve_rounds=rounds if rounds is not None else flowing(),
        send_abort_output=lambda abort, r: sent.append((abort, r)))
    return s, sent


def test_the_door_predicts_from_the_queue_the_slots_and_the_rate_it_has_seen(monkeypatch):
    """Three waiting prompts of 100 tokens and a chunked one with 50 left, prefilled at 10 ms
    a token, then its own 20 tokens (0.2 s). The slots are free, so no departure is waited
    for. First come, first served all three are ahead: 3.7 s against its 1-s TTFT SLO."""
    waiting = [req(f"w{i}", 100, ttft_slo_ms=60_000) for i in range(3)]
    chunked = req("chunked", 150)
    chunked.prefix_len = 100
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse=on,admit=fifo")
    admission.served_options.cache_clear()
    s, _ = scheduler(waiting, running=1, chunked=chunked, slots=8)
    new = req("new", 20, ttft_slo_ms=1000)
    late, own = door.predicted_late(s, new, s._adaserve_rounds, time.perf_counter())
    assert own == 1.0 and late == pytest.approx(2.7)
    # with admit=deadline only those in time whose deadline is no later than its own are
    # ahead: the three waiting have a minute, so only the chunk is (0.5 + 0.2 s)
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse=on")
    admission.served_options.cache_clear()
    assert door.predicted_late(s, new, s._adaserve_rounds, time.perf_counter()) is None
    late, _ = door.predicted_late(s, req("tight", 20, ttft_slo_ms=600), s._adaserve_rounds,
                                  time.perf_counter())
    assert late == pytest.approx(0.1)


def test_with_no_slot_free_it_waits_for_departures():
    """Four slots, all held, three ahead (their deadlines are earlier than its own): it
    needs the fourth departure, 4 x 2 s."""
    waiting = [req(f"w{i}", 1, arrived_ago_s=0.1, ttft_slo_ms=5000) for i in range(3)]
    s, _ = scheduler(waiting, running=4)
    late, own = door.predicted_late(s, req("new", 1, ttft_slo_ms=5000), s._adaserve_rounds,
                                    time.perf_counter())
    assert late == pytest.approx(8.0 + 0.01 - 5.0)


def test_the_hook_refuses_a_late_request_with_sglangs_503_abort_and_our_message(monkeypatch):
    import sglang.srt.managers.scheduler as sglang_scheduler

    # the one server setting SGLang's abort reads (published by a launched server)
    monkeypatch.setattr(sglang_scheduler, "get_serving",
                        lambda: SimpleNamespace(weight_version="default"))
    s, sent = scheduler([req("w", 300, arrived_ago_s=0.1, ttft_slo_ms=1000)])
    late = req("late", 20, ttft_slo_ms=1000)  # 3.2 s predicted against 1 s
    assert door.abort_on_queued_limit_hook(lambda self, r: False, s, late)
    (abort, r), = sent
    assert r is late and abort.rid == "late"
    reason = abort.finished_reason
    assert reason["type"] == "abort" and reason["status_code"] == 503
    assert reason["message"] == at_capacity(late_reason(2.2, 1.0))
    assert retry_after_s(late_of(reason["message"])) == 3


def test_the_hook_keeps_sglangs_own_refusal_and_judges_only_new_requests():
    s, sent = scheduler([req("w", 300, arrived_ago_s=0.1, ttft_slo_ms=1000)])
    assert door.abort_on_queued_limit_hook(lambda self, r: True, s, req("x"))  # SGLang's
    assert not sent
    in_time = req("in-time", 20, ttft_slo_ms=60_000)
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s, in_time)
    retracted = req("retracted", 20, ttft_slo_ms=1000)
    retracted.is_retracted = True
    aborted = req("aborted", 20, ttft_slo_ms=1000)
    aborted.to_finish = FINISH_ABORT("bad input")  # SGLang's own check refused it already
    for r in (retracted, aborted):
        assert not door.abort_on_queued_limit_hook(lambda self, q: False, s, r)
    assert not sent


def test_nobody_is_refused_on_no_evidence_by_a_policy_that_does_not_refuse_or_elsewhere(
        monkeypatch):
    late = req("late", 20, ttft_slo_ms=1000)
    unmeasured = Rounds()
    unmeasured.flow.extended(1.0, 100)  # a rate, but no two departures yet
    ahead = [req("w", 300, arrived_ago_s=0.1, ttft_slo_ms=1000)]
    # rounds without two departures, and a server not running ADASERVE
    for s, _ in (scheduler(ahead, rounds=unmeasured), scheduler(ahead, worker=False)):
        assert not door.abort_on_queued_limit_hook(lambda self, r: False, s, late)
    # refuse=off (its TPOT door, refuse_tpot=latest, has seen no request finish)
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")
    admission.served_options.cache_clear()
    s, sent = scheduler(ahead)
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s, late)
    assert not sent


def test_sglangs_loader_installs_the_hook_on_its_scheduler(model):
    from sglang.srt.managers.scheduler import Scheduler

    assert getattr(Scheduler._abort_on_queued_limit, "__wrapped__", None) is not None

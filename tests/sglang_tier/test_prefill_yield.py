"""The policy's prefill=yield inside SGLang (adaserve/sglang/prefill_yield.py): SGLang's own
requests and batch modes, the ADASERVE draft worker's own class holding the policy, and
the hook as SGLang's plugin loader installs it on SGLang's Scheduler."""

from __future__ import annotations

import time
from array import array
from types import SimpleNamespace

import numpy as np
import pytest
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

from adaserve.scheduler import SchedulerConfig, make_policy
from adaserve.scheduler.prefill_yield import PromptQueue
from adaserve.sglang.prefill_yield import (prefill_waits, prompt_queue,
                                           should_defer_prefill_hook)
from adaserve.sglang.rounds import Rounds
from adaserve.sglang.slo import configured_classes
from adaserve.sglang.view import view_of
from adaserve.sglang.worker import AdaServeDraftWorker

CHUNK = 256
PLAIN_S, EXTEND_S = 0.05, 0.30  # a decode round, an extend round


@pytest.fixture(autouse=True)
def env(slo_env):
    slo_env("100", "300")


def req(rid: str, prompt: int = 20, output: int = 0, arrived_ago_s: float = 0.0,
        **custom) -> Req:
    r = Req(rid, "", array("q", range(1, prompt + 1)),
            SamplingParams(max_new_tokens=64, custom_params=custom))
    r.output_ids = list(range(output))
    r.time_stats.scheduler_recv_time = time.perf_counter() - arrived_ago_s
    return r


def decoder(rid: str = "urgent-decoding") -> Req:
    """An urgent request 1 s into its decode with 10 tokens past its first at a 100-ms
    TPOT SLO: on schedule. A 50-ms decode round keeps it there; an extend round and then
    its decode (350 ms) sets it back by more than a speculative step makes up."""
    return req(rid, output=11, slo_class="urgent", tpot_slo_ms=100.0)


def worker(spec: str, first_token_at: dict) -> AdaServeDraftWorker:
    """The ADASERVE draft worker's own class with the state ``setup_adaserve`` gives it
    (no model: the prefill question reads only the policy, the classes and the
    first-token times)."""
    w = AdaServeDraftWorker.__new__(AdaServeDraftWorker)
    w._policy = make_policy(spec, SchedulerConfig(budget=16, max_depth=4, max_width=2))
    w.classes, w.default_class = configured_classes()
    w.first_token_at = first_token_at
    return w


def rounds(plain_s: float = PLAIN_S, extend_s: float = EXTEND_S) -> Rounds:
    r = Rounds()
    r.times.observe(plain_s, 0)
    r.times.observe(extend_s, 1)
    return r


def test_rounds_are_timed_from_call_to_call_and_filed_by_the_batch_that_ran():
    r = Rounds()
    extend, decode = (SimpleNamespace(forward_mode=m, batch_size=lambda: 1) for m in
                      (ForwardMode.EXTEND, ForwardMode.DECODE))
    r.tick(10.0, None)  # the first round: nothing ran before it
    r.tick(10.4, extend)  # the round from 10.0 ran an extend
    r.tick(10.45, decode)
    r.tick(99.0, None)  # an idle wait is no round
    r.tick(99.05, decode)
    assert r.times.prefill_s == pytest.approx(0.4)
    assert r.times.plain_s == pytest.approx(0.05)


def test_the_prompt_queue_is_the_chunked_request_then_the_waiting_in_deadline_order():
    now = time.perf_counter()
    chunked = req("chunked", prompt=600, arrived_ago_s=2.0, ttft_slo_ms=5000)
    chunked.prefix_len = 256  # one chunk done
    waiting = [req("lenient", 30, arrived_ago_s=1.0, ttft_slo_ms=60_000),
               req("tight", 40, ttft_slo_ms=2000),
               req("third", 50, ttft_slo_ms=1000)]
    q = prompt_queue(chunked, waiting, 2, now, CHUNK, by_deadline=True)
    # the chunked one first; then by deadline (third's in 1 s, tight's in 2 s), two slots
    assert q.tokens_left.tolist() == [344, 50, 40]
    assert q.slack_s == pytest.approx([3.0, 1.0, 2.0], abs=0.05)
    assert q.chunk == CHUNK
    fifo = prompt_queue(None, waiting, 5, now, CHUNK, by_deadline=False)
    assert fifo.tokens_left.tolist() == [30, 40, 50]
    assert prompt_queue(None, waiting, 0, now, CHUNK, True).tokens_left.size == 0
    # chunked prefill off: a prefill round takes every prompt
    assert prompt_queue(None, waiting, 5, now, None, False).chunk == 120


def test_the_scheduler_views_a_request_as_the_draft_worker_does():
    now = time.perf_counter()
    seen, fresh = decoder("seen"), decoder("fresh")
    view = view_of([seen, fresh], *configured_classes(), {"seen": now - 1.0}, now)
    assert view.tpot_slo_s.tolist() == [0.1, 0.1]
    assert view.decode_latency_s.tolist() == pytest.approx([1.0, 0.0])  # fresh: not yet
    assert view.decoded_tokens.tolist() == [10, 10]
    assert view.max_tokens_left.tolist() == [53, 53]


def test_a_prefill_waits_where_it_breaks_more_decoders_than_waiting_breaks_prompts():
    now = time.perf_counter()
    running = [decoder()]
    w = worker("adaserve", {"urgent-decoding": now - 1.0})
    ample = PromptQueue(np.array([10.0]), np.array([20]), CHUNK)
    assert prefill_waits(w, running, ample, rounds(), now)
    # the same question the embedded engine asks, on the same numbers
    view = view_of(running, w.classes, w.default_class, w.first_token_at, now)
    assert w.policy.prefill_waits(view, ample, PLAIN_S, EXTEND_S + PLAIN_S)
    # a prompt in time now (its first token in 350 ms) and late after one more decode
    # round (400 ms): one broken either way, so the prefill goes on
    edge = PromptQueue(np.array([0.37]), np.array([20]), CHUNK)
    assert not prefill_waits(w, running, edge, rounds(), now)
    # an extend no longer than a decode round costs the decoder nothing it cannot make up
    assert not prefill_waits(w, running, ample, rounds(extend_s=0.01), now)


@pytest.mark.parametrize("spec", ["adaserve:prefill=chunk", "adaserve-authors",
                                  "incremental"])
def test_policies_that_do_not_yield_never_defer(spec):
    now = time.perf_counter()
    w = worker(spec, {"urgent-decoding": now - 1.0})
    ample = PromptQueue(np.array([10.0]), np.array([20]), CHUNK)
    assert not prefill_waits(w, [decoder()], ample, rounds(), now)


def test_nothing_is_decided_before_both_kinds_of_round_are_measured():
    now = time.perf_counter()
    w = worker("adaserve", {"urgent-decoding": now - 1.0})
    ample = PromptQueue(np.array([10.0]), np.array([20]), CHUNK)
    only_decodes = Rounds()
    only_decodes.times.observe(PLAIN_S, 0)
    assert not prefill_waits(w, [decoder()], ample, only_decodes, now)


class Batch(SimpleNamespace):
    def is_empty(self):
        return not self.reqs

    def batch_size(self):
        return len(self.reqs)


def scheduler(w, waiting, last_mode=ForwardMode.DECODE):
    """The fields of SGLang's Scheduler the hook reads, its draft worker ADASERVE's."""
    return SimpleNamespace(draft_worker=SimpleNamespace(_draft_worker=w),
                           last_batch=SimpleNamespace(forward_mode=last_mode,
                                                      batch_size=lambda: 1),
                           chunked_req=None, waiting_queue=waiting, max_running_requests=4,
                           chunked_prefill_size=CHUNK, _adaserve_rounds=rounds())


def test_the_hook_defers_on_the_policys_word_and_keeps_sglangs_own(monkeypatch):
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")
    now = time.perf_counter()
    w = worker("adaserve", {"urgent-decoding": now - 1.0})
    running = Batch(reqs=[decoder()])
    waiting = [req("relaxed-waiting", 20, ttft_slo_ms=60_000)]
    s = scheduler(w, waiting)
    assert should_defer_prefill_hook(lambda self, b: False, s, running)
    assert s._adaserve_rounds.deferred == 1
    assert should_defer_prefill_hook(lambda self, b: True, s, running)  # SGLang's own
    assert s._adaserve_rounds.deferred == 1  # SGLang deferred it, not the policy
    assert not should_defer_prefill_hook(lambda self, b: False, s, Batch(reqs=[]))
    # a policy that does not yield, or rounds not yet measured: SGLang's answer alone
    assert not should_defer_prefill_hook(
        lambda self, b: False, scheduler(worker("adaserve:prefill=chunk", w.first_token_at),
                                         waiting), running)
    unmeasured = scheduler(w, waiting)
    unmeasured._adaserve_rounds = Rounds()
    assert not should_defer_prefill_hook(lambda self, b: False, unmeasured, running)
    # another speculative algorithm's worker, or none: SGLang's answer alone
    plain = scheduler(w, waiting)
    plain.draft_worker = None
    assert not should_defer_prefill_hook(lambda self, b: False, plain, running)


def test_sglangs_loader_installs_the_hook_on_its_scheduler(model):
    from sglang.srt.managers.scheduler import Scheduler

    assert getattr(Scheduler._should_defer_prefill, "__wrapped__", None) is not None

"""The policy's ``cap`` inside SGLang (adaserve/sglang/step_cap.py, rounds.py): decode rounds
filed by batch size, the round predicted at a size, how many waiting requests may join,
and the hook on SGLang's ``get_num_allocatable_reqs``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from adaserve.sglang import admission
from adaserve.sglang.rounds import MIN_ROUNDS, Rounds, StepSizes
from adaserve.sglang.step_cap import allowance, num_allocatable_reqs_hook
from test_refusal import req, scheduler

NAN = float("nan")


@pytest.fixture(autouse=True)
def env(slo_env, monkeypatch):
    # slo_env clears the cached policy options now and after the test
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:cap=on")
    slo_env("100", "300")


def sized(table: dict[int, float]) -> StepSizes:
    s = StepSizes()
    for n, seconds in table.items():
        for _ in range(MIN_ROUNDS):
            s.observe(n, seconds)
    return s


def test_a_round_is_predicted_from_its_size_else_the_line_through_the_sizes_seen():
    s = StepSizes()
    s.observe(2, 0.05)
    assert s.predict(2) is None  # fewer than MIN_ROUNDS rounds at it
    s = sized({2: 0.05})
    assert s.predict(2) == pytest.approx(0.05)
    assert s.predict(3) is None  # one size: no line
    s = sized({2: 0.05, 4: 0.07})
    assert s.predict(3) == pytest.approx(0.06)
    assert s.predict(6) == pytest.approx(0.09)
    s.observe(0, 1.0)  # an empty round is no size
    assert s.predict(0) == pytest.approx(0.03)


def test_rounds_file_decode_rounds_by_the_batch_that_ran_not_extends():
    r = Rounds()
    decode = SimpleNamespace(forward_mode=ForwardMode.DECODE, batch_size=lambda: 3)
    extend = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_num_tokens=40,
                             batch_size=lambda: 1)
    r.tick(0.0, None)
    t = 0.0
    for _ in range(MIN_ROUNDS):
        t += 0.06
        r.tick(t, decode)
    r.tick(t + 0.5, extend)
    assert r.sizes.predict(3) == pytest.approx(0.06)
    assert r.sizes.predict(1) is None


def test_the_requests_that_fit_join_in_the_queues_order():
    # 40 ms at 1 running, 50 at 2, 60 at 3 (the line); tight SLO 55 ms
    s = sized({1: 0.04, 2: 0.05})
    one = np.array([0.055])
    assert allowance(s, one, np.array([0.1, 0.1, 0.1]), False) == 1  # 3 running: 60 ms
    assert allowance(s, one, np.array([NAN, NAN]), False) == 1
    # only loose ones held: 3 join, and the fourth (75 ms) would be at 5 running: 80 ms
    assert allowance(s, np.array([0.2]), np.array([0.2, 0.2, 0.2, 0.075]), False) == 3
    # the tight one waiting first: it would be at 2 running (50 ms), so it joins; then no more
    assert allowance(s, np.array([0.2]), np.array([0.055, 0.2]), False) == 1
    # an SLO shorter than any round: none joins a server that holds a request
    assert allowance(s, np.array([0.2]), np.array([0.03]), False) == 0
    # with none running one always joins, and a chunked request always counts
    assert allowance(s, np.zeros(0), np.array([0.03, 0.03]), False) == 1
    assert allowance(s, one, np.array([0.03, 0.2]), True) == 1
    # nothing measured: nothing is capped
    assert allowance(StepSizes(), one, np.array([0.01, 0.01]), False) == 2


def test_the_hook_lowers_sglangs_answer_to_the_requests_the_step_can_carry(monkeypatch):
    rounds = Rounds()
    rounds.sizes = sized({1: 0.04, 2: 0.05})  # 60 ms predicted at 3
    waiting = [req("w1", tpot_slo_ms=100.0), req("w2", tpot_slo_ms=100.0)]
    s, _ = scheduler(waiting, rounds=rounds, running_reqs=[req("a", tpot_slo_ms=55.0)])
    assert num_allocatable_reqs_hook(lambda self, *a: 3, s, 1) == 1
    assert num_allocatable_reqs_hook(lambda self, *a: 0, s, 1) == 0  # SGLang's own limit
    # the loop's call passes the batch and the rows held: the same answer
    assert num_allocatable_reqs_hook(lambda self, *a: 3, s, 1, None, s.running_batch, 0) == 1
    # a beam search's rows are SGLang's to count
    assert num_allocatable_reqs_hook(lambda self, *a: 3, s, 1, 2) == 3
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")  # the preset does not cap
    admission.served_options.cache_clear()
    assert num_allocatable_reqs_hook(lambda self, *a: 3, s, 1) == 3
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:cap=on")
    admission.served_options.cache_clear()
    plain, _ = scheduler(waiting, rounds=rounds, worker=False,
                         running_reqs=[req("a", tpot_slo_ms=55.0)])
    assert num_allocatable_reqs_hook(lambda self, *a: 3, plain, 1) == 3  # not ADASERVE


def test_sglangs_loader_installs_the_cap_on_its_scheduler(model):
    from sglang.srt.managers.scheduler import Scheduler

    assert getattr(Scheduler.get_num_allocatable_reqs, "__wrapped__", None) is not None


def test_a_capping_server_has_sglang_ask_again_every_round(monkeypatch):
    """SGLang marks its batch full where the hook's answer is reached and clears the mark
    only when a request leaves; the prefill hook clears it each round on a capping server,
    so the cap is judged every round."""
    import time

    from adaserve.sglang.prefill_yield import should_defer_prefill_hook
    from test_prefill_yield import Batch, decoder, worker
    from test_prefill_yield import scheduler as yielding

    w = worker("adaserve:cap=on", {"urgent-decoding": time.perf_counter() - 1.0})
    running = Batch(reqs=[decoder()], batch_is_full=True)
    should_defer_prefill_hook(lambda self, b: False, yielding(w, []), running)
    assert running.batch_is_full is False
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")
    admission.served_options.cache_clear()
    running.batch_is_full = True
    should_defer_prefill_hook(lambda self, b: False, yielding(w, []), running)
    assert running.batch_is_full is True  # a server that does not cap: SGLang's mark stands

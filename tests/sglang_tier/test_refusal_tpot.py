"""The policy's TPOT door inside SGLang (adaserve/sglang/refusal.py, rounds.py): the
pace a token takes SGLang's running requests, measured from the tokens they gained each
round, and the door refusing a TPOT SLO shorter than it on SGLang's queue-limit seam."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from adaserve.scheduler.admission import late_of, retry_after_s
from adaserve.sglang import admission
from adaserve.sglang import refusal as door
from adaserve.sglang.rounds import Rounds
from test_refusal import req, scheduler

DECODE = SimpleNamespace(forward_mode=ForwardMode.DECODE, batch_size=lambda: 2)
EXTEND = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_num_tokens=40)


@pytest.fixture(autouse=True)
def env(slo_env, monkeypatch):
    # slo_env clears the cached policy options now and after the test
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse_tpot=on")
    slo_env("100", "300")


def paced(rounds: int = 32, seconds: float = 0.06, tokens: int = 1) -> Rounds:
    """Rounds that saw an urgent (45 ms) and a moderate (100 ms) request decode ``rounds``
    rounds of ``seconds``, the urgent one gaining ``tokens`` a round, the moderate one."""
    r = Rounds()
    a, b = req("a", tpot_slo_ms=45.0), req("b", tpot_slo_ms=100.0)
    t = 0.0
    r.tick(t, None, [a, b])
    for _ in range(rounds):
        a.output_ids.extend([7] * tokens)
        b.output_ids.append(7)
        t += seconds
        r.tick(t, DECODE, [a, b])
    return r


def test_the_rounds_measure_the_pace_each_slo_has_had():
    assert paced(31).flow.token_s(0.045) is None  # the window is 32 rounds
    assert paced(32).flow.token_s(0.045) == pytest.approx(0.06)
    r = paced(32, tokens=2)  # speculation gave the urgent one two a round
    assert r.flow.token_s(0.045) == pytest.approx(0.03)
    assert r.flow.token_s(0.100) == pytest.approx(2 * 32 * 0.06 / (32 * 3))
    assert r.flow.token_s(0.020) is None  # nobody that tight ran


def test_an_extend_round_counts_in_the_pace_and_a_finished_requests_last_tokens_too():
    r = paced(31)
    a, b = r._running["a"], r._running["b"]
    t = 31 * 0.06
    r.tick(t + 0.3, EXTEND, [a, b])  # 0.3 s prefilling a prompt: the decoders got nothing
    assert r.flow.token_s(0.045) == pytest.approx((31 * 0.06 + 0.3) / 31)
    a.output_ids.append(7)
    a.finished_reason = object()  # its last token came in the round it finished
    b.output_ids.append(7)
    r.tick(t + 0.36, DECODE, [b])
    assert r.flow.token_s(0.045) == pytest.approx((30 * 0.06 + 0.3 + 0.06) / 31)


def refused(s, sent) -> str:
    """The message of the 503 with which the hook on scheduler ``s`` refuses an urgent
    (45-ms) request, ``sent`` holding what it sent."""
    tight = req("urgent", tpot_slo_ms=45.0)
    assert door.abort_on_queued_limit_hook(lambda self, r: False, s, tight)
    (abort, r), = sent
    assert r is tight and abort.finished_reason["status_code"] == 503
    return abort.finished_reason["message"]


def test_the_hook_refuses_an_slo_shorter_than_the_pace_with_sglangs_503(monkeypatch):
    import sglang.srt.managers.scheduler as sglang_scheduler

    monkeypatch.setattr(sglang_scheduler, "get_serving",
                        lambda: SimpleNamespace(weight_version="default"))
    rounds = paced()  # 60 ms a token for the urgent request, the moderate one too
    for t in (1.0, 3.0):
        rounds.flow.finished(t)  # a departure every 2 s: the wait the refusal names
    s, sent = scheduler(rounds=rounds)
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s,
                                               req("moderate", tpot_slo_ms=100.0))
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s, req("best-effort"))
    message = refused(s, sent)
    assert "TPOT SLO of 45 ms" in message and "60.0 ms" in message
    assert retry_after_s(late_of(message)) == 2  # the HTTP process reads it back


def test_without_the_option_nobody_is_refused_for_their_tpot(monkeypatch):
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse_tpot=off")
    admission.served_options.cache_clear()
    rounds = paced()
    for t in (1.0, 3.0):  # both urgent ones missed: either door would refuse
        rounds.flow.finished(t, 0.045, 0.06)
    s, sent = scheduler(rounds=rounds, running_reqs=[req("a", tpot_slo_ms=45.0)])
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s,
                                               req("urgent", tpot_slo_ms=45.0))
    assert not sent


def test_a_departure_files_the_tpot_the_rounds_saw_it_get():
    r = Rounds()
    a, b = req("a", tpot_slo_ms=45.0), req("b", tpot_slo_ms=100.0)
    a.output_ids.append(7)  # its first token came in the extend round ending at 1.0
    r.tick(1.0, EXTEND, [a])
    for t in (1.06, 1.12, 1.18):
        a.output_ids.append(7)
        r.tick(t, DECODE, [a, b])
    a.finished_reason = object()
    r.tick(1.24, DECODE, [b])  # a gained nothing in its last round: 3 tokens over 0.18 s
    assert r.flow.missed(0.045) == (1, 1) and r.flow._outcomes[-1][1] == pytest.approx(0.06)
    b.finished_reason = object()  # b never gained a token after it was seen: no TPOT
    r.tick(1.30, DECODE, [])
    assert r.flow.missed(0.100) == (0, 1)


def test_the_hook_refuses_a_class_that_mostly_missed_while_one_is_running(monkeypatch):
    import sglang.srt.managers.scheduler as sglang_scheduler

    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse_tpot=missed")
    admission.served_options.cache_clear()
    monkeypatch.setattr(sglang_scheduler, "get_serving",
                        lambda: SimpleNamespace(weight_version="default"))
    rounds = Rounds()
    for t, tpot in ((1.0, 0.06), (3.0, 0.07), (5.0, 0.04)):  # 2 of 3 urgent ones missed
        rounds.flow.finished(t, 0.045, tpot)
    probe = req("probe", tpot_slo_ms=45.0)
    # nobody urgent is running or waiting: the next one is admitted, the probe
    s, sent = scheduler(rounds=rounds, running_reqs=[req("moderate", tpot_slo_ms=100.0)])
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s, probe)
    s, sent = scheduler(rounds=rounds, running_reqs=[probe])
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s,
                                               req("moderate", tpot_slo_ms=100.0))
    message = refused(s, sent)
    assert "TPOT SLO of 45 ms" in message and "2 of the 3" in message
    assert retry_after_s(late_of(message)) == 2  # a finish every 2 s


def test_the_hook_files_what_it_admits_so_the_probe_door_lets_one_in_per_kept_outcome(
        monkeypatch):
    import sglang.srt.managers.scheduler as sglang_scheduler

    monkeypatch.setenv("ADASERVE_POLICY", "adaserve:refuse_tpot=probe")
    admission.served_options.cache_clear()
    monkeypatch.setattr(sglang_scheduler, "get_serving",
                        lambda: SimpleNamespace(weight_version="default"))
    rounds = Rounds()
    for t, tpot in ((1.0, 0.06), (3.0, 0.07), (5.0, 0.04)):  # 2 of 3 missed, the latest kept
        rounds.flow.finished(t, 0.045, tpot)
    s, sent = scheduler(rounds=rounds, running_reqs=[req("a", tpot_slo_ms=45.0)])
    assert not door.abort_on_queued_limit_hook(lambda self, r: False, s,
                                               req("first", tpot_slo_ms=45.0))
    assert rounds.flow.probed(0.045)
    message = refused(s, sent)  # the second, while the first is held
    assert "TPOT SLO of 45 ms" in message and "2 of the 3" in message

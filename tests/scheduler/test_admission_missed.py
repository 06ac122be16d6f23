"""The TPOT door's ``missed`` form (scheduler/admission.py, ``refuse_tpot=missed``): a
request is refused on arrival, 503 with Retry-After, where more of the last finished
requests at least as tight as it missed its TPOT SLO than kept it, and one that tight is
held; with none held it is admitted, the probe."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler.admission import (FlowMeter, late_of, missed_reason, missed_refusal,
                                          retry_after_s, tpot_door)

NAN = float("nan")


def _finished(outcomes) -> FlowMeter:
    flow = FlowMeter()
    for t, (slo, tpot) in enumerate(outcomes):
        flow.finished(float(t), slo, tpot)
    return flow


def test_outcomes_are_judged_against_the_new_requests_slo_among_those_as_tight():
    flow = _finished([(0.045, 0.060), (0.045, 0.050), (0.100, 0.090), (0.150, 0.200)])
    assert flow.missed(0.045) == (2, 2)
    # a 100-ms request: the two 45-ms ones kept 100 ms though they missed their own
    assert flow.missed(0.100) == (0, 3)
    assert flow.missed(0.150) == (1, 4)
    assert flow.missed(0.020) == (0, 0)  # nobody that tight finished


def test_a_finish_with_no_slo_or_no_tpot_is_a_departure_but_no_outcome():
    flow = FlowMeter()
    flow.finished(1.0, None, 0.5)  # best effort
    flow.finished(3.0, 0.045, None)  # one token: no TPOT
    assert flow.departure_s == pytest.approx(2.0) and flow.missed(1.0) == (0, 0)


def test_the_meter_keeps_the_last_window_of_outcomes():
    flow = _finished([(0.045, 0.09)] * 32 + [(0.045, 0.03)] * 17)
    assert flow.missed(0.045) == (15, 32)


def test_the_door_refuses_where_most_missed_and_one_that_tight_is_held():
    flow = _finished([(0.045, 0.060)] * 3 + [(0.045, 0.040)] * 2)  # 3 of 5 missed
    held = np.array([0.045, 0.100, NAN])
    assert missed_refusal(0.045, flow, held) == (3, 5)
    # the probe: nobody as tight as 45 ms is held, so the next evidence is admitted
    assert missed_refusal(0.045, flow, np.array([0.100, NAN])) is None
    assert missed_refusal(0.045, flow, np.zeros(0)) is None
    # as many kept it as missed: not more likely to miss than keep
    even = _finished([(0.045, 0.060)] * 2 + [(0.045, 0.040)] * 2)
    assert missed_refusal(0.045, even, held) is None
    assert missed_refusal(0.100, flow, held) is None  # all of them kept 100 ms
    assert missed_refusal(None, flow, held) is None  # best effort: nothing to miss
    assert missed_refusal(0.045, FlowMeter(), held) is None  # no evidence: nobody refused


def test_the_door_names_its_evidence_and_a_wait_read_back():
    flow = _finished([(0.045, 0.060)] * 3)  # three finishes a second apart
    message, retry = tpot_door("missed", 0.045, flow, np.array([0.045]))
    assert message == missed_reason(3, 3, 0.045, 1.0) and retry == pytest.approx(1.0)
    assert "45 ms" in message and "3 of the 3" in message
    assert retry_after_s(late_of(message)) == 1
    assert tpot_door("off", 0.045, flow, np.array([0.045])) is None
    # the pace form reads the iterations, of which this meter has none
    assert tpot_door("pace", 0.045, flow, np.array([0.045])) is None


def test_the_engine_refuses_a_class_that_misses_and_probes_with_one_at_a_time():
    """Eight relaxed requests decode long outputs. Two requests with an SLO shorter than any
    step arrive at 5 s: nothing that tight has finished, both are admitted, and both miss.
    At 40 s, when neither is held, a third is admitted (the probe); the two that follow it
    while it runs are refused at arrival, each a miss in every reading. A relaxed request
    among them is admitted: the tight ones' TPOTs kept its SLO. With the door off all are."""
    from adaserve.sim import SimRequest
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment

    reqs = ([SimRequest(i, 0.01 * i, "relaxed", 2000.0, 100, 2000) for i in range(8)]
            + [SimRequest(8 + i, 5.0 + 0.1 * i, "tight", 1.0, 100, 64) for i in range(2)]
            + [SimRequest(10 + i, 40.0 + 0.1 * i, "tight", 1.0, 100, 64) for i in range(3)]
            + [SimRequest(13, 40.15, "relaxed", 2000.0, 100, 64)])
    out = {}
    for door in ("missed", "off"):
        setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:refuse_tpot={door}")
        out[door] = {r.index: r for r in run(setup, reqs).records}
    on, off = out["missed"], out["off"]
    assert [i for i, r in on.items() if r.status == "rejected"] == [11, 12]
    assert all(on[i].attained is False and on[i].attained_paper is False
               and on[i].attained_with_ttft(5000.0) is False for i in (11, 12))
    assert all(on[i].status == "ok" for i in (*range(11), 13))
    assert on[8].attained_paper is False and on[9].attained_paper is False  # they missed
    assert all(r.status == "ok" for r in off.values())


def test_both_refuses_only_where_the_outcomes_and_the_pace_now_agree():
    """``refuse_tpot=both``: the outcomes say requests this tight missed; the door shuts
    only while the ones decoding now miss their pace too, so a burst that has passed does
    not keep it shut."""
    flow = _finished([(0.045, 0.060)] * 3)  # 3 of 3 missed
    held = np.array([0.045])
    for _ in range(flow.window):  # the pace now: 30 ms a token for a 45-ms request
        flow.iteration(0.030, np.array([0.045]), np.array([1.0]))
    assert tpot_door("missed", 0.045, flow, held) is not None
    assert tpot_door("both", 0.045, flow, held) is None  # the server keeps that pace now
    for _ in range(flow.window):  # now 60 ms a token
        flow.iteration(0.060, np.array([0.045]), np.array([1.0]))
    message, _ = tpot_door("both", 0.045, flow, held)
    assert message == missed_reason(3, 3, 0.045, 1.0)  # the outcomes' evidence is named
    kept = _finished([(0.045, 0.040)] * 3)  # the pace misses, the outcomes kept it
    for _ in range(kept.window):
        kept.iteration(0.060, np.array([0.045]), np.array([1.0]))
    assert tpot_door("pace", 0.045, kept, held) is not None
    assert tpot_door("both", 0.045, kept, held) is None
    assert tpot_door("both", 0.045, FlowMeter(), held) is None  # no evidence: nobody refused


def test_the_latest_door_opens_once_the_latest_tight_finish_kept_its_slo():
    flow = FlowMeter()
    for _ in range(6):
        flow.finished(0.0, 0.045, 0.046)  # a burst's urgent misses
    held = np.array([0.045])
    assert tpot_door("missed", 0.045, flow, held) is not None
    assert tpot_door("latest", 0.045, flow, held) is not None
    flow.finished(1.0, 0.045, 0.030)  # a probe kept its SLO: 6 missed of 7 still
    flow.finished(1.5, 0.2, 0.5)  # a looser request's miss says nothing of this SLO
    assert tpot_door("missed", 0.045, flow, held) is not None
    assert tpot_door("latest", 0.045, flow, held) is None
    assert flow.latest_missed(0.2)  # for the looser class the latest did miss
    flow.finished(2.0, 0.040, 0.050)  # the next tight one missed: shut again
    assert tpot_door("latest", 0.045, flow, held) is not None
    assert tpot_door("latest", 0.045, flow, np.array([0.2])) is None  # nobody that tight held
    assert not FlowMeter().latest_missed(0.045)


def test_the_probe_door_lets_in_one_request_for_each_kept_outcome():
    """``refuse_tpot=probe``: where most tight finishes missed, a kept latest outcome lets
    in one request at least as tight, not all of them; the next kept outcome one more."""
    flow = FlowMeter()
    for _ in range(6):
        flow.finished(0.0, 0.045, 0.046)  # a burst's urgent misses
    held = np.array([0.045])
    assert flow.probed(0.045) is False
    flow.admitted(0.045)  # admitted before the latest finish: not spent on this outcome
    flow.finished(1.0, 0.045, 0.030)  # a probe kept its SLO: 6 missed of 7 still
    assert tpot_door("probe", 0.045, flow, held) is None  # one may come in
    flow.admitted(0.2)  # a looser request spends nothing of the tight class's probe
    flow.admitted(None)  # nor does a best-effort one
    assert tpot_door("probe", 0.045, flow, held) is None
    flow.admitted(0.045)  # it came in
    assert flow.probed(0.045) and not flow.probed(0.040)  # spent for 45 ms, not for 40
    message, _ = tpot_door("probe", 0.045, flow, held)
    assert message == missed_reason(6, 7, 0.045, 1.0 / 6)
    assert tpot_door("latest", 0.045, flow, held) is None  # latest would let it in
    assert tpot_door("probe", 0.045, flow, np.array([0.2])) is None  # nobody tight held
    flow.finished(2.0, 0.045, 0.040)  # that one kept it too: one more may come in
    assert tpot_door("probe", 0.045, flow, held) is None
    flow.admitted(0.040)  # a tighter one spends it
    assert tpot_door("probe", 0.045, flow, held) is not None
    flow.finished(3.0, 0.045, 0.050)  # a miss finished: shut as latest is
    assert tpot_door("probe", 0.045, flow, held) is not None
    kept = _finished([(0.045, 0.040)] * 3)  # most kept: the door is open, probed or not
    kept.admitted(0.045)
    assert tpot_door("probe", 0.045, kept, held) is None


def test_the_engine_files_each_request_it_admits_for_the_probe_door():
    """The engine loop tells its meter what it let in (``EngineCore.add``), so the probe
    door can count: tight requests arrive while most tight finishes missed and the latest
    kept. The first is admitted, the next refused while it is held; a loose one is not;
    the next kept finish lets one more in."""
    from adaserve.engine.core import QueueFull
    from adaserve.engine.sampling import SamplingParams
    from adaserve.scheduler import SLO
    from adaserve.sim.driver import build
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup("adaserve:refuse_tpot=probe")
    core, _ = build(setup, max_context=4096, max_waiting=64)
    for t in range(5):
        core.flow.finished(float(t), 0.045, 0.060)
    core.flow.finished(5.0, 0.045, 0.030)  # the latest kept its SLO
    slo, params = SLO.from_ms(45.0), SamplingParams(max_tokens=16)
    core.add("first", [1] * 8, params, slo)
    with pytest.raises(QueueFull, match="TPOT SLO of 45 ms"):
        core.add("second", [1] * 8, params, slo)
    core.add("loose", [1] * 8, params, SLO.from_ms(500.0))
    core.flow.finished(6.0, 0.045, 0.030)  # another kept: 5 missed of 7 still
    core.add("third", [1] * 8, params, slo)
    with pytest.raises(QueueFull, match="5 of the 7"):
        core.add("fourth", [1] * 8, params, slo)

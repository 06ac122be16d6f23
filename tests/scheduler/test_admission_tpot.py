"""The TPOT door (scheduler/admission.py, option refuse_tpot): a request whose TPOT SLO is
shorter than the time a token takes the server's decoding requests now is refused on
arrival, 503 with Retry-After, and counts as a miss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaserve.scheduler.admission import (FlowMeter, late_of, retry_after_s, tpot_reason,
                                          tpot_refusal, tpot_retry_s)


def _meter(seconds: float, slos, tokens, n: int = 32) -> FlowMeter:
    flow = FlowMeter()
    for _ in range(n):
        flow.iteration(seconds, np.array(slos, float), np.array(tokens, float))
    return flow


NAN = float("nan")


def test_the_meter_gives_each_slo_the_pace_of_the_requests_at_least_as_tight():
    # a tight request (45 ms) got two tokens an iteration of 0.06 s, a loose one (150 ms)
    # one, a best-effort one one
    flow = _meter(0.06, [0.045, 0.150, NAN], [2, 1, 1])
    assert flow.token_s(0.045) == pytest.approx(0.03)
    # a 100-ms request is judged by the tight one's pace alone
    assert flow.token_s(0.100) == pytest.approx(0.03)
    # a 150-ms one by both: two iterations' seconds over three tokens
    assert flow.token_s(0.150) == pytest.approx(0.04)
    # nobody as tight as 20 ms decoded: no evidence
    assert flow.token_s(0.020) is None


def test_an_iteration_that_gave_a_request_nothing_still_counts_its_time():
    flow = _meter(0.1, [0.05], [1], n=31)
    flow.iteration(0.2, np.array([0.05]), np.array([0.0]))  # a prefill chunk beside it
    assert flow.token_s(0.05) == pytest.approx((31 * 0.1 + 0.2) / 31)
    # requests that got nothing at all in the window: their pace is unbounded
    assert _meter(0.1, [0.05], [0]).token_s(0.05) == math.inf


def test_the_meter_says_nothing_until_its_window_is_full():
    assert _meter(0.1, [0.05], [1], n=31).token_s(0.05) is None
    assert FlowMeter().token_s(0.05) is None


def test_the_door_refuses_only_an_slo_shorter_than_its_peers_pace():
    flow = _meter(0.06, [0.0449, 0.1078], [1, 1])
    assert tpot_refusal(0.0449, flow) == pytest.approx(0.06)
    assert tpot_refusal(0.1078, flow) is None
    assert tpot_refusal(None, flow) is None  # best effort: no pace to miss
    assert tpot_refusal(0.0449, FlowMeter()) is None  # nothing measured: nobody refused
    # the batch's mean pace would refuse the tight request; its own class's does not
    fast = _meter(0.06, [0.036] + [0.15] * 9, [3] + [1] * 9)
    assert tpot_refusal(0.036, fast) is None
    text = tpot_reason(0.06, 0.0449, 2.34)
    assert "44.9 ms" in text and "60.0 ms" in text
    # the wait it names is read back as a TTFT refusal's is (SGLang's HTTP process)
    assert late_of(text) == pytest.approx(2.3) and retry_after_s(late_of(text)) == 3


def test_the_wait_named_is_the_gap_between_finishes():
    flow = FlowMeter()
    assert tpot_retry_s(flow) == 1.0  # before two finishes
    for t in (10.0, 12.0, 14.5):
        flow.finished(t)
    assert tpot_retry_s(flow) == pytest.approx(2.25)


def test_the_engine_refuses_a_tight_slo_under_load_and_a_refusal_is_a_miss():
    """Eight relaxed requests decode long outputs; once the meter has seen its window, four
    requests with an SLO shorter than any step arrive, then one best-effort request. With
    the door on, the first of the four is admitted (no request that tight has decoded: no
    evidence), and once it has decoded the other three are refused at arrival, each a miss
    in every reading; the relaxed and best-effort ones are served. With it off all are."""
    from adaserve.sim import SimRequest
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment

    reqs = ([SimRequest(i, 0.01 * i, "relaxed", 2000.0, 100, 400) for i in range(8)]
            + [SimRequest(8 + i, 5.0 + 0.1 * i, "tight", 1.0, 100, 64) for i in range(4)]
            + [SimRequest(12, 5.5, "best", None, 100, 64)])
    out = {}
    for door in ("on", "off"):
        setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:refuse_tpot={door}")
        out[door] = {r.index: r for r in run(setup, reqs).records}
    on, off = out["on"], out["off"]
    assert [i for i, r in on.items() if r.status == "rejected"] == [9, 10, 11]
    assert all(on[i].attained is False and on[i].attained_paper is False
               and on[i].attained_with_ttft(5000.0) is False for i in (9, 10, 11))
    assert all(on[i].status == "ok" for i in (*range(9), 12))
    assert all(r.status == "ok" for r in off.values())

"""The TTFT SLO without a model: where a request names it (body slo.ttft_ms, header
X-SLO-TTFT-MS in any case), the default rule (adaserve/server/slo_ttft.py) against a hand
computation, and what a request's stats report against it."""

from __future__ import annotations

import pytest

from adaserve.engine.request import Request
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import SLO, LatencyModel
from adaserve.server.protocol import SLOField
from adaserve.server.slo_classes import CUSTOM, parse_classes, request_slo, resolve
from adaserve.server.slo_ttft import QUEUE_SLACK, PrefillRate, default_ttft_ms
from adaserve.server.slo_value import SLOError

BASELINE = 40.0
CLASSES = parse_classes("urgent=x1,moderate=x2.4,chat=120ms,free", BASELINE)


def _ttft_ms(slo: SLO) -> float | None:
    return None if slo.ttft_s is None else round(slo.ttft_s * 1e3, 9)


@pytest.mark.parametrize("name", ["X-SLO-TTFT-MS", "x-slo-ttft-ms", "X-Slo-Ttft-Ms"])
def test_the_header_in_any_case(name):
    label, slo = resolve(None, {name: "250"}, CLASSES, "urgent")
    assert (label, slo.tpot_s, _ttft_ms(slo)) == ("urgent", 0.04, 250.0)


def test_a_ttft_goes_with_a_class_or_a_tpot_and_the_body_comes_first():
    # with a class (body or header) and with a TPOT: its own objective beside them
    label, slo = resolve({"class": "moderate", "ttft_ms": "300ms"}, {}, CLASSES, "urgent")
    assert (label, _ttft_ms(slo)) == ("moderate", 300.0)
    assert slo.tpot_s == pytest.approx(0.096)
    label, slo = resolve({"tpot_ms": 30, "ttft_ms": 500}, {}, CLASSES, "urgent")
    assert (label, slo.tpot_s, _ttft_ms(slo)) == (CUSTOM, 0.03, 500.0)
    label, slo = resolve(None, {"X-SLO-Class": "chat", "x-slo-ttft-ms": "700"}, CLASSES,
                         "urgent")
    assert (label, _ttft_ms(slo)) == ("chat", 700.0)
    # body first, then the header; a TTFT alone leaves the TPOT to the next source
    _, slo = resolve({"ttft_ms": 100}, {"X-SLO-TTFT-MS": "900"}, CLASSES, "urgent")
    assert _ttft_ms(slo) == 100.0
    label, slo = resolve({"ttft_ms": 100}, {"X-SLO-TPOT-MS": "55"}, CLASSES, "urgent")
    assert (label, slo.tpot_s, _ttft_ms(slo)) == (CUSTOM, 0.055, 100.0)
    # null is not given: the header decides
    _, slo = resolve({"ttft_ms": None}, {"X-SLO-TTFT-MS": "900"}, CLASSES, "urgent")
    assert _ttft_ms(slo) == 900.0
    # none named: none here (the server fills the class's default in once it knows the
    # prompt's length)
    assert resolve(None, {}, CLASSES, "urgent")[1].ttft_s is None
    # SGLang's custom_params give the TPOT; the TTFT still comes from the header
    label, slo = request_slo(None, {"slo_class": "chat"}, {"X-SLO-TTFT-MS": "800"}, CLASSES,
                             "urgent")
    assert (label, _ttft_ms(slo)) == ("chat", 800.0)
    # the pydantic body keeps it
    assert SLOField.model_validate({"class": "urgent", "ttft_ms": "40 ms"}).ttft_ms == 40.0


BAD = [0, -5, "-5", "0ms", "fast", "nan", "inf", True, 1e308, "99999999999999999999",
       3_600_001, 5e-324]


@pytest.mark.parametrize("value", BAD, ids=[repr(v)[:24] for v in BAD])
def test_a_bad_ttft_names_the_field_as_sent(value):
    with pytest.raises(SLOError) as e:
        resolve({"ttft_ms": value}, {}, CLASSES, "urgent")
    assert e.value.param == "slo.ttft_ms" and "slo.ttft_ms" in str(e.value)
    with pytest.raises(SLOError) as e:
        resolve(None, {"x-slo-ttft-ms": str(value)}, CLASSES, "urgent")
    assert e.value.param == "X-SLO-TTFT-MS"
    with pytest.raises(ValueError, match="slo.ttft_ms"):
        SLOField.model_validate({"ttft_ms": value})


def test_a_huge_ttft_says_what_to_do_instead():
    with pytest.raises(SLOError, match="for the class's default, leave it out"):
        resolve({"ttft_ms": 1e308}, {}, CLASSES, "urgent")
    with pytest.raises(SLOError, match="name a best-effort class"):  # the TPOT's, unchanged
        resolve({"tpot_ms": 1e308}, {}, CLASSES, "urgent")


def test_the_default_rule_against_a_hand_computation():
    # T = a*N_ctx + g*N_tok + c; a chunk of 128 new tokens: 0.02 + 0.003 * 128 = 0.404 s
    target = LatencyModel(alpha=1e-5, gamma=0.003, delta=0.02)
    rate = PrefillRate.of(target, 128)
    assert rate.chunk_s == pytest.approx(0.404)
    # a 64-token prompt: floor = 0.404 + 64 * 0.404 / 128 = 0.606 s; x1 of a 40-ms
    # baseline: 2 x 0.606 s = 1212 ms; x2.4: 2908.8 ms; a 120-ms class is x3: 3636 ms
    assert QUEUE_SLACK == 2.0
    assert default_ttft_ms(40.0, BASELINE, 64, rate) == pytest.approx(1212.0)
    assert default_ttft_ms(96.0, BASELINE, 64, rate) == pytest.approx(2908.8)
    assert default_ttft_ms(120.0, BASELINE, 64, rate) == pytest.approx(3636.0)
    # a 640-token prompt: floor = 0.404 * (1 + 5) = 2.424 s, urgent 4848 ms
    assert default_ttft_ms(40.0, BASELINE, 640, rate) == pytest.approx(4848.0)
    # nothing to reason from: best effort, no baseline, no profile
    assert default_ttft_ms(None, BASELINE, 64, rate) is None
    assert default_ttft_ms(40.0, None, 64, rate) is None
    assert default_ttft_ms(40.0, BASELINE, 64, None) is None
    assert PrefillRate.of(None, 128) is None
    assert PrefillRate.of(LatencyModel(0.0, 0.0, 0.0), 128) is None
    with pytest.raises(ValueError, match="prefill rate"):
        PrefillRate(0, 0.4)


def _finished(slo: SLO, ttft_s: float, tpot_s: float, tokens: int = 5) -> Request:
    r = Request("r", [1, 2, 3], SamplingParams(max_tokens=tokens), slo, seed=0, t_submit=10.0)
    r.tokens.extend(range(tokens))
    r.t_first, r.steps = 10.0 + ttft_s, tokens
    r.t_last = r.t_first + tpot_s * (tokens - 1)
    return r


def test_the_stats_report_each_objective_and_attained_means_all():
    st = _finished(SLO(0.05, ttft_s=0.001), ttft_s=0.2, tpot_s=0.01).stats()
    assert (st.slo_ttft_s, st.ttft_attained) == (0.001, False)
    assert st.slo_attained is False  # the TPOT was within its SLO, the TTFT was not
    st = _finished(SLO(0.05, ttft_s=1.0), ttft_s=0.2, tpot_s=0.01).stats()
    assert (st.ttft_attained, st.slo_attained) == (True, True)
    st = _finished(SLO(0.005, ttft_s=1.0), ttft_s=0.2, tpot_s=0.01).stats()
    assert (st.ttft_attained, st.slo_attained) == (True, False)
    # without a TTFT SLO, as before: the TPOT alone; best effort: None
    st = _finished(SLO(0.05), ttft_s=9.0, tpot_s=0.01).stats()
    assert (st.slo_ttft_s, st.ttft_attained, st.slo_attained) == (None, None, True)
    st = _finished(SLO(None), ttft_s=9.0, tpot_s=0.01).stats()
    assert (st.ttft_attained, st.slo_attained) == (None, None)
    # a best-effort TPOT with a TTFT SLO named: the TTFT is the one objective
    st = _finished(SLO(None, ttft_s=0.5), ttft_s=0.7, tpot_s=0.01).stats()
    assert (st.ttft_attained, st.slo_attained) == (False, False)


def test_the_slo_validates_its_ttft_like_its_tpot():
    assert SLO.from_ms(30, ttft_ms=500).ttft_s == 0.5
    assert SLO(0.03, True) == SLO.from_ms(30, True)  # the old constructor calls still work
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="TTFT SLO"):
            SLO(0.03, ttft_s=bad)
    assert SLO(ttft_s=0.5).ttft_attained(None) is False  # no first token: a miss
    assert SLO(0.03).ttft_attained(100.0) is None

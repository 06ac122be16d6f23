"""SLO classes from the command line, and the precedence of a request's SLO sources."""

from __future__ import annotations

import pytest

from adaserve.server.slo_classes import CUSTOM, SLOError, parse_classes, resolve


def test_classes_in_ms_multiples_and_best_effort():
    c = parse_classes("urgent=x1, moderate=x2.4 ,batch=250ms,chat=90,free", baseline_ms=12.5)
    assert {k: v.tpot_ms for k, v in c.items()} == {
        "urgent": 12.5, "moderate": 30.0, "batch": 250.0, "chat": 90.0, "free": None}
    assert c["free"].slo.best_effort and c["chat"].slo.tpot_s == pytest.approx(0.09)


@pytest.mark.parametrize("spec,baseline,match", [
    ("urgent=x1", None, "baseline"),
    ("urgent=fast", 10.0, "not a number"),
    ("urgent=-3", 10.0, "> 0"),
    ("urgent=xnan", 10.0, "not a multiple"),
    ("urgent=x0", 10.0, "> 0"),
    ("urgent=x1e-5", 10.0, "at least 0.001"),
    ("urgent=x1e6", 10.0, "at most 3600000"),
    ("urgent=x1e400", 10.0, "finite"),
    ("a=1,a=2", 10.0, "twice"),
    ("custom=5", 10.0, "reserved"),
    ("bad name=5", 10.0, "letters"),
    ("", 10.0, "no SLO classes"),
])
def test_bad_class_specs_fail_at_start_up(spec, baseline, match):
    with pytest.raises(ValueError, match=match):
        parse_classes(spec, baseline)


CLASSES = parse_classes("urgent=10,relaxed=100,best-effort", None)


def test_first_source_wins():
    h = {"X-SLO-TPOT-MS": "40", "X-SLO-Class": "urgent"}
    label, slo = resolve({"tpot_ms": 25}, h, CLASSES, "relaxed")
    assert label == CUSTOM and slo.tpot_s == pytest.approx(0.025)
    assert resolve({"class": "relaxed"}, h, CLASSES, "urgent")[0] == "relaxed"
    assert resolve({"tpot_ms": None, "class": None}, h, CLASSES, "relaxed")[1].tpot_s == 0.04
    assert resolve(None, {"x-slo-class": " urgent "}, CLASSES, "relaxed")[0] == "urgent"
    assert resolve(None, {}, CLASSES, "best-effort")[1].best_effort


@pytest.mark.parametrize("body,headers,param", [
    ({"tpot_ms": 5, "class": "urgent"}, {}, "slo"),
    ({"tpot_ms": "5 s"}, {}, "slo.tpot_ms"),
    ({"tpot_ms": float("inf")}, {}, "slo.tpot_ms"),
    ({"class": 3}, {}, "slo.class"),
    ({"klass": "urgent"}, {}, "slo"),
    (None, {"X-SLO-TPOT-MS": ""}, "X-SLO-TPOT-MS"),
    (None, {"X-SLO-Class": "gold"}, "X-SLO-Class"),
])
def test_bad_sources_name_their_param(body, headers, param):
    with pytest.raises(SLOError) as e:
        resolve(body, headers, CLASSES, "relaxed")
    assert e.value.param == param

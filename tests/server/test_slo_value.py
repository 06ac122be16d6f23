"""One SLO-value rule (adaserve.server.slo_value) for every place a TPOT is written: the
body's slo.tpot_ms, the X-SLO-TPOT-MS header, SGLang's custom_params (on both backends)
and --slo-classes."""

from __future__ import annotations

import pytest

from adaserve.server.protocol import SLOField
from adaserve.server.slo_classes import parse_classes, request_slo, resolve
from adaserve.server.slo_value import MAX_TPOT_MS, MIN_TPOT_MS, SLOError, parse_tpot_ms

CLASSES = parse_classes("relaxed=100", None)

ACCEPTED = [  # (as written, milliseconds)
    (30, 30.0), (12.5, 12.5), ("30", 30.0), ("30ms", 30.0), (" 30 ms ", 30.0),
    ("2.5MS", 2.5), ("1e2", 100.0), (".5", 0.5), ("+7", 7.0),
    (MIN_TPOT_MS, MIN_TPOT_MS), (MAX_TPOT_MS, MAX_TPOT_MS), (3_600_000, MAX_TPOT_MS),
]
REFUSED = [
    True, False, [], {}, "", "ms", "fast", "30 s", "30msms", "nan", "inf", "-inf",
    "Infinity", "0x10", "1_000", "3;5", 0, "0ms", -5, "-5", 5e-324, "5e-324",
    float("nan"), float("inf"), 1e308, 10 ** 400, "99999999999999999999", "1e400",
    MAX_TPOT_MS * 1.0001, "\ud800",
]


def _everywhere(value: object) -> dict[str, float]:
    """The milliseconds each source makes of ``value``; each raises for a refused one."""
    return {
        "body": resolve({"tpot_ms": value}, {}, CLASSES, "relaxed")[1].tpot_s * 1e3,
        "pydantic body": SLOField.model_validate({"tpot_ms": value}).tpot_ms,
        "custom_params": request_slo(None, {"tpot_slo_ms": value}, {}, CLASSES,
                                     "relaxed")[1].tpot_s * 1e3,
        "class flag": parse_classes(f"c={value}", None)["c"].tpot_ms,
        "header": resolve(None, {"X-SLO-TPOT-MS": str(value)}, CLASSES,
                          "relaxed")[1].tpot_s * 1e3,
    }


@pytest.mark.parametrize("value,ms", ACCEPTED, ids=[repr(v) for v, _ in ACCEPTED])
def test_every_source_accepts_the_same_forms(value, ms):
    assert parse_tpot_ms(value, "p") == ms
    for source, got in _everywhere(value).items():
        assert got == pytest.approx(ms), source


@pytest.mark.parametrize("value", REFUSED, ids=[repr(v)[:30] for v in REFUSED])
def test_every_source_refuses_the_same_values(value):
    with pytest.raises(SLOError) as e:
        parse_tpot_ms(value, "X-SLO-TPOT-MS")
    assert e.value.param == "X-SLO-TPOT-MS" and "X-SLO-TPOT-MS" in str(e.value)
    with pytest.raises(ValueError):
        resolve({"tpot_ms": value}, {}, CLASSES, "relaxed")
    with pytest.raises(ValueError):
        SLOField.model_validate({"tpot_ms": value})
    with pytest.raises(SLOError) as e:
        request_slo(None, {"tpot_slo_ms": value}, {}, CLASSES, "relaxed",
                    "sampling_params.custom_params")
    assert e.value.param == "sampling_params.custom_params.tpot_slo_ms"
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
        with pytest.raises(ValueError):  # as text: the header and the flag
            resolve(None, {"X-SLO-TPOT-MS": str(value)}, CLASSES, "relaxed")
        with pytest.raises(ValueError):
            parse_classes(f"c={value}", None)


def test_null_in_the_body_means_not_given_here():
    """"tpot_ms": null falls through to the headers, then the default class, like an
    absent header does."""
    assert resolve({"tpot_ms": None}, {}, CLASSES, "relaxed")[0] == "relaxed"
    label, slo = resolve({"tpot_ms": None}, {"X-SLO-TPOT-MS": "40ms"}, CLASSES, "relaxed")
    assert label == "custom" and slo.tpot_s == pytest.approx(0.04)


def test_the_rule_is_documented_with_its_bounds():
    import adaserve.server.slo_value as m

    assert "0.001 to 3600000" in m.__doc__ and '"30ms"' in m.__doc__ and "null" in m.__doc__

"""The per-class SLO metrics both servers share (adaserve.server.slo_metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from adaserve.server.slo_metrics import SloMetrics

RATIO = "adaserve_slo_attainment_ratio"


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("adaserve_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_a_class_without_an_slo_has_no_attainment_series():
    r = CollectorRegistry()
    m = SloMetrics(["urgent", "free"], r, best_effort=["free"])
    s = _samples(r)
    assert f'{RATIO}{{slo_class="urgent"}}' in s  # listed before its first request
    assert f'{RATIO}{{slo_class="free"}}' not in s
    m.observe("free", None, 5, 0.01, 0.1)
    m.observe("urgent", True, 3, 0.01, 0.1)
    m.observe("urgent", False, 3, 0.5, 0.1)
    s = _samples(r)
    assert f'{RATIO}{{slo_class="free"}}' not in s
    assert s[f'{RATIO}{{slo_class="urgent"}}'] == 0.5
    assert s['adaserve_goodput_tokens_total{slo_class="free"}'] == 5
    assert s['adaserve_requests_total{attained="none",slo_class="free"}'] == 1
    assert m.windows() == {"urgent": 0.5}


def test_the_sglang_call_still_works():
    """adaserve/sglang/report.py calls SloMetrics(list of names) and observe(...)."""
    r = CollectorRegistry()
    m = SloMetrics(["urgent", "best-effort"], r)
    m.observe("best-effort", None, 9, 1.0, 0.2)
    m.observe("urgent", True, 11, 0.04, 0.2)
    assert _samples(r)[f'{RATIO}{{slo_class="urgent"}}'] == 1.0

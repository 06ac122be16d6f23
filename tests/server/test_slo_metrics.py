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


def test_ttft_attainment_per_class_beside_the_tpot_one():
    """A request with a TTFT SLO is counted by whether its first token came within it;
    ``attained`` of adaserve_requests_total is every objective, so the miss shows there
    too. Requests without a TTFT SLO stay out of the TTFT series."""
    r = CollectorRegistry()
    m = SloMetrics(["urgent", "relaxed"], r)
    assert not any("ttft_attainment_ratio{" in k for k in _samples(r))  # none had one yet
    m.observe("urgent", False, 4, 0.01, 0.5, ttft_attained=False)
    m.observe("urgent", True, 4, 0.01, 0.1, ttft_attained=True)
    m.observe("relaxed", True, 4, 0.01, 0.1)  # no TTFT SLO
    s = _samples(r)
    assert s['adaserve_ttft_attainment_ratio{slo_class="urgent"}'] == 0.5
    assert s['adaserve_ttft_slo_requests_total{attained="false",slo_class="urgent"}'] == 1
    assert s['adaserve_ttft_slo_requests_total{attained="true",slo_class="urgent"}'] == 1
    assert 'adaserve_ttft_attainment_ratio{slo_class="relaxed"}' not in s
    assert s[f'{RATIO}{{slo_class="urgent"}}'] == 0.5
    assert m.ttft_windows() == {"urgent": 0.5}

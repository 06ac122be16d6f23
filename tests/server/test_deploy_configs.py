"""The Grafana dashboard and Prometheus config in deploy/ match what the server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _exported(metrics_text: str) -> set[str]:
    # a counter's TYPE line may name it with or without _total, by client version
    return {m.group(1).removesuffix("_total")
            for m in re.finditer(r"^# TYPE (\w+) (\w+)", metrics_text, re.M)}


def test_grafana_queries_only_exported_metrics(live):
    with live.client() as c:
        c.post("/v1/completions", json={"prompt": "metrics", "max_tokens": 2})
        text = c.get("/metrics").text
    families = _exported(text)
    # what a query may name: a family, or a histogram/counter series derived from one
    names = families | {f + s for f in families for s in ("_total", "_bucket", "_sum", "_count")}
    dash = json.loads((DEPLOY / "grafana" / "adaserve.json").read_text())
    used = set()
    for panel in dash["panels"]:
        for t in panel["targets"]:
            used |= set(re.findall(r"\badaserve_\w+", t["expr"]))
    assert used and used <= names, used - names
    # every DESIGN.md metric is on the dashboard
    design = {"adaserve_requests", "adaserve_tpot_seconds", "adaserve_ttft_seconds",
              "adaserve_slo_attainment_ratio", "adaserve_goodput_tokens",
              "adaserve_accepted_tokens_per_step", "adaserve_iteration_seconds",
              "adaserve_batch_tokens", "adaserve_spec_depth", "adaserve_spec_width",
              "adaserve_running_requests", "adaserve_waiting_requests"}
    assert design <= families
    assert all(any(u.startswith(d) for u in used) for d in design)


def test_prometheus_scrapes_the_metrics_path():
    text = (DEPLOY / "prometheus.yml").read_text()
    assert "metrics_path: /metrics" in text and "127.0.0.1:8000" in text


def _queried(dashboard: str) -> tuple[set[str], list[str]]:
    dash = json.loads((DEPLOY / "grafana" / dashboard).read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
    return {n for e in exprs for n in re.findall(r"\badaserve_\w+", e)}, exprs


def test_fleet_dashboard_queries_only_exported_metrics(live):
    """The fleet dashboard (issue 28) reads the per-class series every replica exports,
    summed over replicas for the fleet and split by `instance` per replica."""
    with live.client() as c:
        c.post("/v1/completions", json={"prompt": "metrics", "max_tokens": 2})
        families = _exported(c.get("/metrics").text)
    names = families | {f + s for f in families for s in ("_total", "_bucket", "_sum", "_count")}
    used, exprs = _queried("adaserve-fleet.json")
    assert used and used <= names, used - names
    assert any("by (slo_class)" in e and "adaserve_requests_total" in e for e in exprs)
    assert any("by (instance, slo_class)" in e and "adaserve_requests_total" in e for e in exprs)


def test_fleet_prometheus_scrapes_fleet_cpu_defaults():
    """deploy/prometheus-fleet.yml's targets are where `adaserve sglang fleet-cpu` puts the
    replicas and the router's metrics by default."""
    import argparse

    from adaserve.sglang.cpu.fleet import add_args, replica_ports

    p = argparse.ArgumentParser()
    add_args(p)
    args = p.parse_args([])
    text = (DEPLOY / "prometheus-fleet.yml").read_text()
    for port in replica_ports(args):
        assert f"127.0.0.1:{port}" in text
    assert f"127.0.0.1:{args.router_metrics_port}" in text and "metrics_path: /metrics" in text

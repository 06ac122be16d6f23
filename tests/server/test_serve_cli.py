"""`adaserve serve` with no flag but a port: the README's first command starts a server on
the embedded model pair that answers a chat request."""

from __future__ import annotations

import httpx

from adaserve.loadgen.serve_process import ServeProcess


def test_serve_starts_with_defaults_and_answers(tmp_path):
    server = ServeProcess([], tmp_path / "serve.log", timeout_s=240)  # only --port is given
    try:
        info = server.info
        assert info["policy"] == "adaserve" and info["draft"] == "smollm2-135m-distilled"
        assert [c["name"] for c in info["slo_classes"]] == ["urgent", "moderate", "relaxed",
                                                           "best-effort"]
        assert info["baseline_latency_ms"] > 0 and info["default_slo_class"] == "relaxed"
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4},
            headers={"X-SLO-Class": "moderate"})
        assert r.status_code == 200 and r.json()["slo_class"] == "moderate"
    finally:
        server.stop()

def test_without_a_profile_the_baseline_is_measured_at_start_up(monkeypatch):
    import adaserve.server.main as serve_main
    from adaserve.cli import build_parser

    monkeypatch.setattr(serve_main, "load_profile", lambda cfg: None)
    args = build_parser().parse_args(["serve", "--policy", "incremental", "--draft", "none"])
    built = serve_main.build(args)
    try:
        assert 5.0 < built.settings.baseline_ms < 5000.0  # one batch-8 decode step, in ms
        urgent = built.settings.classes["urgent"].tpot_ms
        assert urgent == built.settings.baseline_ms  # urgent = x1
        assert built.settings.classes["relaxed"].tpot_ms == 8 * urgent
    finally:
        built.engine.close()

"""`adaserve serve` with no flag but a port: the README's first command starts a server on
the embedded model pair that answers a chat request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_starts_with_defaults_and_answers(tmp_path):
    port = _free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "adaserve.cli", "serve", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.5)
        info = httpx.get(f"{url}/server_info").json()
        assert info["policy"] == "adaserve" and info["draft"] == "smollm2-135m-distilled"
        assert [c["name"] for c in info["slo_classes"]] == ["urgent", "moderate", "relaxed",
                                                           "best-effort"]
        assert info["baseline_latency_ms"] > 0 and info["default_slo_class"] == "relaxed"
        r = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4},
            headers={"X-SLO-Class": "moderate"})
        assert r.status_code == 200 and r.json()["slo_class"] == "moderate"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


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

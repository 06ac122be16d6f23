"""`adaserve loadgen` against a server whose /server_info lists no SLO classes (through
sglang-router 0.3.2, before the fleet's front answered it) stops at once and says which
flag gives them: Locust's dispatcher would fail to start and the headless run wait
forever."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest


@pytest.fixture
def server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"error": {"message": "the router: Not Found"}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_no_classes_stops_the_run_naming_the_flag(server, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "adaserve.cli", "loadgen", "--host", server,
                           "--requests", "2", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "lists no SLO classes (HTTP 404)" in proc.stderr
    assert "--class-tpot-ms" in proc.stderr
    assert not (tmp_path / "run" / "records.jsonl").exists()

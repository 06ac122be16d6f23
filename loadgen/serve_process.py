"""`adaserve serve` in its own process on a free loopback port, waited for until /health
answers, and its /metrics read: what the sweeps, the soak and memory benchmarks and the CLI
test each need."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ONLINE_PREFIX = "adaserve_online_draft_"
ONLINE_KEYS = ("updates", "rollbacks", "training")


def parse_metrics(text: str) -> dict[str, float]:
    """The server's adaserve_* samples as 'name{label="v",...}' -> value (labels sorted;
    histogram buckets and _created timestamps left out)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith("adaserve_") or s.name.endswith(("_bucket", "_created")):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
    return out


def online_counters(metrics: str) -> dict[str, float]:
    """From a server's /metrics text, its online draft counters (adaserve_online_draft_*):
    updates swapped in, rolled back, and 1 while one is training; 0 when adaptation is
    off. KeyError when the server exports one of them under another name."""
    m = parse_metrics(metrics)
    return {k: m[ONLINE_PREFIX + k] for k in ONLINE_KEYS}


class ServeProcess:
    def __init__(self, flags: list[str], log: Path, timeout_s: float = 300.0) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adaserve.cli", "serve", "--port", str(self.port), *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"adaserve serve exited; see {log}")
                try:
                    if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"adaserve serve did not come up; see {log}")
                time.sleep(0.5)
            self.info = httpx.get(f"{self.url}/server_info").json()
        except BaseException:
            self.stop()
            raise

    def online_draft(self) -> dict[str, float]:
        """The server's online draft counters now (online_counters of its /metrics)."""
        return online_counters(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

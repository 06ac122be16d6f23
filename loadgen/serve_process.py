"""`adaserve serve` in its own process on a free loopback port, waited for until /health
answers: what the sweeps, the memory benchmark and the CLI test each need."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ONLINE_PREFIX = "adaserve_online_draft_"
ONLINE_KEYS = ("updates", "rollbacks", "training")


def online_counters(metrics: str) -> dict[str, float]:
    """From a server's /metrics text, its online draft counters (adaserve_online_draft_*):
    updates swapped in, rolled back, and 1 while one is training; 0 when adaptation is
    off."""
    out = {}
    for line in metrics.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith(ONLINE_PREFIX) and name[len(ONLINE_PREFIX):] in ONLINE_KEYS:
            out[name[len(ONLINE_PREFIX):]] = float(value)
    return out


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

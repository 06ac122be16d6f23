"""`adaserve serve` in its own process on a free loopback port, waited for until /health
answers: what the sweeps, the memory benchmark and the CLI test each need."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


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

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

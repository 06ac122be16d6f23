"""The real servers the end-to-end SGLang tests share (conftest.py makes them session
fixtures): `adaserve sglang serve-cpu` without speculation and with ADASERVE, and the
embedded `adaserve serve`, each with a small pool, the same SLO classes and the same
context limit, so one request means the same thing to each."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

from adaserve.sglang.cpu.process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three prime numbers:",
           "Once upon a time", "Water boils at"]
SHAPE = ["--steps", "3", "--topk", "2", "--draft-tokens", "4"]
# tight enough that not every request gets its tree: 4 running requests x 4 positions =
# 16, and above n = 4, so the SLO classes have spare tokens to steer
BUDGET = 8
CLASSES = "urgent=1,relaxed=100000,best-effort"
# the default TTFT SLO's inputs (test values, not measurements): the classes' multiples
# are 1/80 and 1250, so urgent's default is always missed and relaxed's never, as its TPOT
BASELINE_MS, PREFILL_CHUNK_MS = 80.0, 100.0
PREFILL = ["--baseline-ms", str(BASELINE_MS), "--prefill-chunk-ms", str(PREFILL_CHUNK_MS)]
CONTEXT = 1024  # the embedded server's default --max-context; SGLang's --context-length


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ADASERVE_")
            or k == "ADASERVE_CACHE_DIR"}
    return {**base, **extra}


class Server(ServerProcess):
    """`adaserve sglang serve-cpu`, with a small pool and the caller's ADASERVE_* only."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logdir: Path) -> None:
        super().__init__([sys.executable, "-m", "adaserve.cli", "sglang", "serve-cpu",
                          "--max-running-requests", "8", "--max-total-tokens", "4096", *args,
                          "--", "--context-length", str(CONTEXT)],
                         logdir / f"{name}.log", env=_env(env), cwd=ROOT, timeout_s=600)

    def generate(self, prompt: str, *, headers=None, max_new_tokens: int = 24, **extra):
        return httpx.post(self.url + "/generate", headers=headers or {}, timeout=600, json={
            "text": prompt, "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                "max_new_tokens": max_new_tokens}, **extra})


def embedded_python() -> Path | None:
    """The main environment's interpreter (.ci/run builds it first): the embedded server
    needs torch 2.13, SGLang's venv has 2.14."""
    py = ROOT / ".venv/bin/python"
    return py if py.exists() else None


class Embedded(ServerProcess):
    """`adaserve serve` with the SGLang server's classes and context limit, the target
    alone (the contract does not depend on speculation)."""

    def __init__(self, logdir: Path) -> None:
        py = embedded_python()
        super().__init__([str(py), "-m", "adaserve.cli", "serve", "--policy", "incremental",
                          "--slo-classes", CLASSES, "--default-class", "relaxed",
                          "--max-context", str(CONTEXT)],
                         logdir / "embedded.log", health="/health", env=_env({}), cwd=ROOT,
                         timeout_s=600)

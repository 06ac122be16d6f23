"""Shared by the benchmark scripts: interleaved timing and a one-line machine description."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


class Timer:
    """Interleaved timing: every cell is sampled in each of several rounds, so a slow spell
    of this shared machine lands on all cells alike instead of on whichever ran then."""

    def __init__(self, repeats: int, rounds: int = 10) -> None:
        self.rounds = max(1, min(rounds, repeats))
        self.per_round = max(1, repeats // self.rounds)
        self.cells: dict[tuple, Callable[[], object]] = {}
        self.samples: dict[tuple, list[float]] = {}

    def add(self, key: tuple, fn: Callable[[], object]) -> None:
        fn()  # warm caches and lazy imports
        self.cells[key] = fn
        self.samples[key] = []

    def run(self) -> dict[tuple, float]:
        for _ in range(self.rounds):
            for key, fn in self.cells.items():
                for _ in range(self.per_round):
                    t0 = time.perf_counter()
                    fn()
                    self.samples[key].append(time.perf_counter() - t0)
        return {key: float(np.median(v)) * 1e3 for key, v in self.samples.items()}  # ms


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"


ROOT = Path(__file__).resolve().parents[2]  # the repository
RESULTS = ROOT / "results"
# the paper's kit (traces, latency tables) beside the repository, as in the dev set-up
KIT = ROOT.parent / "shared" / "paper-scale"


def commit() -> str:
    """The short hash of HEAD ("" outside a git checkout)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def write_results(name: str, text: str, data: dict) -> None:
    """Print a benchmark's table and keep it: results/<name>.md and results/<name>.json."""
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2))


def map_jobs(fn, items: list, jobs: int) -> list:
    """``fn`` over ``items`` in order, on ``jobs`` forked processes where there is more than
    one of each (the simulated sweeps and the rekeys' re-runs: the simulator is
    single-threaded)."""
    if jobs > 1 and len(items) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs) as pool:
            return pool.map(fn, items, chunksize=1)
    return [fn(x) for x in items]

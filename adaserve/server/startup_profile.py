"""The start-up profile, kept per machine and code version (issue 41).

Without a saved `adaserve profile`, `adaserve serve` measures a quick profile at start-up:
B by the budget rule as the median of several budget curves, the latency models and the
baseline latency. One curve gave any B from 2 to 8 on the dev CPU from start to start
(results/startup_budget.md), and the x-multiple SLOs moved with the baseline. So the
measurement is kept under the cache directory, keyed by this machine (host, CPU, cores,
torch threads and version, device) and the engine's code (a hash of adaserve/engine's
sources): every later start on the same machine and code loads it, and B and the SLO
milliseconds stay what they were. A new machine or a code change measures again; a profile
saved by `adaserve profile` is loaded before this one; deleting the file measures again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from pathlib import Path

import torch

import adaserve
from adaserve.engine.config import EngineConfig
from adaserve.engine.profile_data import Profile, default_profile_path
from adaserve.engine.profiler import (PROFILE_CURVES, QUICK_TABLE_GRID, STARTUP_REPEATS,
                                      budget_by_context, budget_spread, run_profile)

log = logging.getLogger("adaserve.serve")
ENGINE = Path(adaserve.__file__).resolve().parent / "engine"
# What the start-up profile took on the 2-core AVX2 dev CPU, quiet (docs/server.md).
STARTUP_PROFILE_S = 25


def machine_key(device: str) -> str:
    """What makes a timing this machine's: host, CPU model, cores, torch and its threads."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{platform.node()} | {cpu} | {os.cpu_count()} cores | {torch.get_num_threads()} "
            f"threads | torch {torch.__version__} | {device}")


def code_version() -> str:
    """A hash of the engine's sources (Python and the C++ kernels) and the package version:
    what the measured forwards and the budget rule ran."""
    h = hashlib.sha256(adaserve.__version__.encode())
    for p in sorted([*ENGINE.rglob("*.py"), *ENGINE.rglob("*.cpp")]):
        h.update(str(p.relative_to(ENGINE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def kept_path(cfg: EngineConfig, device: str) -> Path:
    """Where this machine's start-up profile of the pair is kept for this code version."""
    key = hashlib.sha256(f"{machine_key(device)}\n{code_version()}".encode()).hexdigest()[:16]
    saved = default_profile_path(cfg.model, cfg.draft)
    return saved.parent / "startup" / f"{saved.stem}__{key}.json"


def startup_profile(cfg: EngineConfig, models) -> Profile:
    """The kept start-up profile of this machine and code version, else one measured now
    and kept. Every policy then starts (turbospec needs the latency model, adaserve prices
    its draft steps with it), B follows the budget rule, and the baseline behind the
    x-multiple SLO classes is this machine's."""
    path = kept_path(cfg, str(models.device))
    if path.is_file():
        try:
            profile = Profile.load(path)
        except ValueError as e:  # a damaged file: measure again, over it
            log.warning("%s; measuring the start-up profile again", e)
        else:
            log.info("start-up profile kept for this machine and code version (%s, %s): B = %d "
                     "(%s), baseline latency %.1f ms%s; delete it to measure again, or save a "
                     "fuller one with `adaserve profile`", path, profile.date, profile.budget,
                     budget_spread(profile), profile.baseline_latency_s * 1e3,
                     _by_context(profile))
            return profile
    log.warning("no saved profile for %s + %s: measuring budget B (the median of %d curves), "
                "latency models, the forward against context (up to %d tokens) and baseline "
                "latency now (~%d s on a 2-core CPU), kept for later starts on this machine "
                "and code version in %s; `adaserve profile` saves a fuller one, to %d tokens "
                "of context", cfg.model, cfg.draft, PROFILE_CURVES,
                min(max(QUICK_TABLE_GRID[2]), cfg.max_context), STARTUP_PROFILE_S, path,
                cfg.max_context)
    t0 = time.perf_counter()
    profile = run_profile(cfg, repeats=STARTUP_REPEATS, quick=True, log=log.debug, models=models,
                          curves=PROFILE_CURVES)
    profile.save(path)
    log.info("measured in %.0f s (the context table %.0f s of it): B = %d tokens (%s; its "
             "forward costs %.2fx a one-token one), baseline latency %.1f ms%s",
             time.perf_counter() - t0, profile.samples["context_table_s"], profile.budget,
             budget_spread(profile), profile.samples["budget_ratio"],
             profile.baseline_latency_s * 1e3, _by_context(profile))
    return profile


def _by_context(profile: Profile) -> str:
    """"; B by context: 64: 8, 1020: 4" (the ratio rule on the context table), or ""."""
    text = budget_by_context(profile)
    return f"; {text}" if text else ""

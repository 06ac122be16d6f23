"""`adaserve profile` on the real target: it writes a profile the engine then plans with."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from adaserve.engine import Engine, EngineConfig
from adaserve.engine.profile_data import Profile
from adaserve.engine.profiler import KNEE_TOKENS


@pytest.mark.slow
def test_profile_cli_writes_a_profile_the_engine_loads(tmp_path, smollm):
    out = tmp_path / "prof.json"
    run = subprocess.run(
        [sys.executable, "-m", "adaserve.cli", "profile", "--draft", "layers:2", "--quick",
         "--repeats", "1", "--max-context", "512", "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"wrote {out}" in run.stdout and "B by context: 64: " in run.stdout
    prof = Profile.load(out)
    assert prof.model == "smollm2-135m" and prof.draft == "layers:2"
    assert min(KNEE_TOKENS) <= prof.budget <= max(KNEE_TOKENS)
    # every measured point is a real, positive forward time; the fits explain them
    knee = prof.samples["knee"]
    # --quick stops the curve past 2x a one-token forward, never before 4 counts
    n = len(knee["tokens"])
    assert n >= 4 and tuple(knee["tokens"]) == KNEE_TOKENS[:n] and min(knee["seconds"]) > 0
    assert prof.samples["target_r2"] > 0.5
    for m in (prof.target, prof.draft_model):
        assert all(math.isfinite(c) and c >= 0 for c in (m.alpha, m.gamma, m.delta))
    # a 2-layer draft step is cheaper than a 30-layer target forward of the same shape
    assert prof.draft_model.predict(1000, 16) < prof.target.predict(1000, 16)
    # the baseline is a decode iteration at batch 8: no faster than the fastest forward
    # measured at 8 tokens on the knee curve would allow, within timing noise
    # (a batch-8 decode step: no faster than a one-token forward, within timing noise)
    assert 0.5 * knee["seconds"][0] <= prof.baseline_latency_s < 10.0
    # the quick context table, capped by --max-context; the engine plans with it only with
    # its context_table option (off by default: the linear models, refitted online)
    assert prof.target_table.contexts == (64, 508) and prof.draft_table is not None
    with Engine(EngineConfig(draft="layers:2", policy="adaserve", profile=out,
                             context_table=True)) as eng:
        assert eng.core.latency.base.target == prof.target_table
    with Engine(EngineConfig(draft="layers:2", policy="adaserve", profile=out)) as eng:
        assert eng.profile == prof
        assert eng.core.latency.base.target == prof.target
        # B by the budget rule: its forward within 1.15x of the one-token forward, and the
        # next profiled count (if measured) past it
        assert prof.budget_rule == "ratio<=1.15"
        assert eng.core.policy.config.budget == prof.budget
        curve = dict(zip(knee["tokens"], knee["seconds"]))
        assert max(curve[t] for t in curve if t <= prof.budget) <= 1.15 * curve[1]
        above = [t for t in curve if t > prof.budget]
        if above:
            assert max(curve[t] for t in curve if t <= min(above)) > 1.15 * curve[1]


def test_a_profile_from_before_the_budget_rule_keeps_its_latency_but_not_its_budget(
        tmp_path, smollm):
    import json

    from adaserve.engine.config import DEFAULT_BUDGET
    from adaserve.scheduler import LatencyModel

    old = {"model": "smollm2-135m", "draft": None, "budget": 96, "knee_found": True,
           "target": LatencyModel(1e-6, 1e-3, 0.05).to_dict(), "draft_model": None,
           "baseline_latency_s": 0.09, "machine": "m", "date": "2026-11-01", "samples": {}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))  # written before budget_rule existed
    prof = Profile.load(path)
    assert prof.budget_rule == "hinge" and not prof.budget_trusted
    with Engine(EngineConfig(profile=path)) as eng:
        assert eng.core.policy.config.budget == DEFAULT_BUDGET
        assert eng.core.latency.base.target == prof.target


@pytest.mark.slow
def test_turbospec_without_a_saved_profile_says_which_command_makes_one(tmp_path, smollm):
    """A cache holding the converted models and no profile: `adaserve generate --policy
    turbospec` answers in one line naming `adaserve profile`, not with a traceback, and
    the policies that need no profile still run there."""
    import os

    from adaserve.engine.weights import CACHE_ENV, cache_root

    cache = tmp_path / "cache"
    cache.mkdir()
    for sub in ("models", "kernels"):  # what the session converted and built; no profiles/
        if (cache_root() / sub).is_dir():
            (cache / sub).symlink_to(cache_root() / sub)
    env = {**os.environ, CACHE_ENV: str(cache)}

    def generate(policy):
        return subprocess.run([sys.executable, "-m", "adaserve.cli", "generate", "--policy",
                               policy, "--max-tokens", "4", "Hello"],
                              capture_output=True, text=True, timeout=600, env=env)

    run = generate("turbospec")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("adaserve generate: error:")]
    assert len(lines) == 1 and "`adaserve profile`" in lines[0]
    assert not (cache / "profiles").exists()
    ok = generate("incremental")
    assert ok.returncode == 0, ok.stderr[-2000:]

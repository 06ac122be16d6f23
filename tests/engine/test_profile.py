"""`adaserve profile` on the real target: it writes a profile the engine then plans with."""

from __future__ import annotations

import math
import subprocess
import sys

from adaserve.engine import Engine, EngineConfig
from adaserve.engine.profile_data import Profile
from adaserve.engine.profiler import KNEE_TOKENS


def test_profile_cli_writes_a_profile_the_engine_loads(tmp_path, smollm):
    out = tmp_path / "prof.json"
    run = subprocess.run(
        [sys.executable, "-m", "adaserve.cli", "profile", "--draft", "layers:2", "--quick",
         "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"wrote {out}" in run.stdout
    prof = Profile.load(out)
    assert prof.model == "smollm2-135m" and prof.draft == "layers:2"
    assert min(KNEE_TOKENS) <= prof.budget <= max(KNEE_TOKENS)
    # every measured point is a real, positive forward time; the fits explain them
    knee = prof.samples["knee"]
    assert len(knee["seconds"]) == len(KNEE_TOKENS) and min(knee["seconds"]) > 0
    assert prof.samples["target_r2"] > 0.5
    for m in (prof.target, prof.draft_model):
        assert all(math.isfinite(c) and c >= 0 for c in (m.alpha, m.gamma, m.delta))
    # a 2-layer draft step is cheaper than a 30-layer target forward of the same shape
    assert prof.draft_model.predict(1000, 16) < prof.target.predict(1000, 16)
    # the baseline is a decode iteration at batch 8: no faster than the fastest forward
    # measured at 8 tokens on the knee curve would allow, within timing noise
    fastest8 = knee["seconds"][KNEE_TOKENS.index(8)]
    assert 0.5 * fastest8 <= prof.baseline_latency_s < 10.0
    with Engine(EngineConfig(draft="layers:2", policy="adaserve", profile=out)) as eng:
        assert eng.profile == prof
        assert eng.core.latency.base.target == prof.target
        if prof.knee_found:
            assert eng.core.policy.config.budget == prof.budget

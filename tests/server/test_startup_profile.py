"""The start-up profile is kept per machine and code version (issue 41): a start without a
saved profile measures B as the median of several curves and keeps the profile; the next
start on the same machine and code loads it, so B and the SLOs stay put from start to start.
Another machine or code version measures again."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from adaserve.engine.config import EngineConfig
from adaserve.engine.profile_data import Profile
from adaserve.engine.profiler import budget_spread
from adaserve.engine.weights import CACHE_ENV, cache_root
from adaserve.scheduler import LatencyModel
from adaserve.server import startup_profile as sp


def _kept(budget: int, curves: list[int]) -> Profile:
    """What a start-up measurement keeps: a profile whose B is its curves' median."""
    lat = LatencyModel(alpha=1e-7, gamma=1e-4, delta=0.05)
    return Profile(model="smollm2-135m", draft="smollm2-135m-distilled", budget=budget,
                   knee_found=False, target=lat, draft_model=lat, baseline_latency_s=0.05,
                   machine="m", date="2026-11-25",
                   samples={"budget_ratio": 1.1, "budget_curves": curves},
                   budget_rule="ratio<=1.15")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


def test_the_key_is_the_machine_and_the_code_version(cache, monkeypatch):
    cfg = EngineConfig()
    path = sp.kept_path(cfg, "cpu")
    assert path.parent == cache / "profiles" / "startup"
    assert path == sp.kept_path(cfg, "cpu")  # the same start to start
    assert sp.kept_path(cfg, "cuda:0") != path  # another device
    monkeypatch.setattr(sp, "code_version", lambda: "another engine")
    assert sp.kept_path(cfg, "cpu") != path  # another code version


def test_a_kept_profile_is_loaded_not_measured_and_says_its_spread(cache, monkeypatch, caplog):
    cfg = EngineConfig()
    _kept(6, [4, 6, 6, 6, 8]).save(sp.kept_path(cfg, "cpu"))

    def measure(*a, **k):
        raise AssertionError("a kept start-up profile must not be measured again")

    monkeypatch.setattr(sp, "run_profile", measure)
    with caplog.at_level(logging.INFO, logger="adaserve.serve"):
        got = [sp.startup_profile(cfg, SimpleNamespace(device="cpu")) for _ in range(3)]
    assert [p.budget for p in got] == [6, 6, 6]  # three starts, one B
    assert "the median of 5 curves, B 4-8 (4, 6, 6, 6, 8)" in caplog.text
    assert budget_spread(_kept(4, [])) == "one curve, no spread measured"


@pytest.mark.slow
def test_three_starts_give_one_b(tmp_path, monkeypatch, caplog):
    """`adaserve serve` three times on a cache without a saved profile: the first measures
    (the median of the curves, kept), the next two load it: the same B and SLOs."""
    import adaserve.server.main as serve_main
    from adaserve.cli import build_parser

    for sub in ("models", "kernels"):  # what the session converted and built; no profiles/
        if (cache_root() / sub).is_dir():
            (tmp_path / sub).symlink_to(cache_root() / sub)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    seen = []
    with caplog.at_level(logging.INFO, logger="adaserve.serve"):
        for _ in range(3):
            built = serve_main.build(build_parser().parse_args(["serve"]))
            try:
                seen.append((built.engine.core.policy.config.budget, built.settings.baseline_ms,
                             built.settings.classes["urgent"].tpot_ms))
                prof = built.engine.profile
            finally:
                built.engine.close()
    assert seen[0] == seen[1] == seen[2]
    assert len(prof.samples["budget_curves"]) == 5 and prof.budget == \
        sorted(prof.samples["budget_curves"])[2]
    assert caplog.text.count("no saved profile") == 1
    assert caplog.text.count("start-up profile kept for this machine") == 2
    assert len(list((tmp_path / "profiles" / "startup").glob("*.json"))) == 1

"""`adaserve serve` as a new user meets it: the README's command on a machine that has
never run the project (an empty model cache, no saved profile), a port already taken, and
every listed policy starting without a profile."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from adaserve.loadgen.serve_process import ServeProcess


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    """A model cache no process has written: the first start converts the packaged GGUF."""
    return tmp_path_factory.mktemp("fresh-cache")


@pytest.mark.slow
def test_a_fresh_machine_converts_measures_and_answers(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("ADASERVE_CACHE_DIR", str(fresh_cache))
    assert not any(fresh_cache.iterdir())
    log = tmp_path / "serve.log"
    server = ServeProcess([], log, timeout_s=600)  # the README's command: only --port is given
    try:
        # converted into the empty cache, and said in one line what it measures at start
        assert (fresh_cache / "models" / "smollm2-135m" / "model.safetensors").is_file()
        said = log.read_text()
        assert said.count("no saved profile") == 1 and "adaserve profile" in said
        # measured now and kept for this machine and code version, not saved as the profile
        assert [p.parent.name for p in (fresh_cache / "profiles").rglob("*.json")] == ["startup"]
        info = server.info
        assert info["policy"] == "adaserve" and info["draft"] == "smollm2-135m-distilled"
        assert [c["name"] for c in info["slo_classes"]] == ["urgent", "moderate", "relaxed",
                                                           "best-effort"]
        assert info["baseline_latency_ms"] > 0 and info["default_slo_class"] == "relaxed"
        prof = info["profile"]  # measured at start-up: B by the budget rule
        assert prof["budget_rule"] == "ratio<=1.15" and prof["budget_ratio"] <= 1.15
        assert info["budget"] == prof["budget"] >= 1
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 8, "temperature": 0}, headers={"X-SLO-Class": "moderate"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["slo_class"] == "moderate" and "Paris" in body["choices"][0]["message"]["content"]
    finally:
        server.stop()


@pytest.mark.slow
def test_turbospec_starts_without_a_profile(fresh_cache, tmp_path, monkeypatch):
    # turbospec plans with a latency model: without a saved profile it is measured at start
    monkeypatch.setenv("ADASERVE_CACHE_DIR", str(fresh_cache))
    server = ServeProcess(["--policy", "turbospec"], tmp_path / "serve.log", timeout_s=600)
    try:
        assert server.info["policy"] == "turbospec"
        r = httpx.post(f"{server.url}/v1/completions", timeout=120,
                       json={"prompt": "One, two, three,", "max_tokens": 4})
        assert r.status_code == 200, r.text
    finally:
        server.stop()


def test_a_port_in_use_is_refused_at_once_in_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "adaserve.cli", "serve", "--port", str(port)],
                             capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert lines == [f"adaserve serve: cannot listen on 127.0.0.1:{port}: the port is already "
                     "in use; choose another with --port"]
    assert "Loading" not in run.stdout + run.stderr  # refused before the model loaded
    assert took < 60  # generous for a loaded CI machine; the model load alone takes longer


@pytest.mark.parametrize("flags, says", [
    (["--default-class", "nope"], "--default-class 'nope' is not one of urgent"),
    (["--slo-classes", "fast=xq"], "SLO class 'fast': 'xq' is not a multiple"),
    (["--slo-classes", "fast=x2", "--default-class", "fast", "--max-batch", "0"], None),
])
def test_a_setting_that_cannot_run_ends_in_one_line_not_a_traceback(flags, says):
    # every ValueError of the build (classes, the engine's config) reaches the user as the
    # parser's errors do: exit 2 and one line; the classes are checked before the models load
    run = subprocess.run([sys.executable, "-m", "adaserve.cli", "serve", "--port", "0", *flags],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert "Traceback" not in run.stderr and lines[-1].startswith("adaserve serve: error: "), \
        run.stderr
    if says is not None:
        assert lines == [f"adaserve serve: error: {lines[0].split('error: ', 1)[1]}"]
        assert says in lines[0]


@pytest.mark.slow
def test_without_a_profile_budget_latency_and_baseline_are_measured_at_start_up(monkeypatch,
                                                                                 tmp_path):
    import adaserve.server.main as serve_main
    from adaserve.cli import build_parser
    from adaserve.engine.weights import CACHE_ENV, cache_root

    for sub in ("models", "kernels"):  # the session's; no start-up profile kept yet
        if (cache_root() / sub).is_dir():
            (tmp_path / sub).symlink_to(cache_root() / sub)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(serve_main, "load_profile", lambda cfg: None)
    args = build_parser().parse_args(["serve"])
    built = serve_main.build(args)
    try:
        prof = built.engine.profile
        assert prof.budget_trusted and prof.target is not None and prof.draft_model is not None
        # B follows the budget rule: the median of the curves just measured
        assert built.engine.core.policy.config.budget == prof.budget
        assert prof.budget == sorted(prof.samples["budget_curves"])[2]
        assert prof.samples["budget_ratio"] <= 1.15
        assert 5.0 < built.settings.baseline_ms < 5000.0  # one batch-8 decode step, in ms
        assert built.settings.baseline_ms == pytest.approx(prof.baseline_latency_s * 1e3)
        urgent = built.settings.classes["urgent"].tpot_ms
        assert urgent == built.settings.baseline_ms  # urgent = x1
        assert built.settings.classes["relaxed"].tpot_ms == 8 * urgent
    finally:
        built.engine.close()


def test_online_draft_flags_reach_the_trainer_config():
    # the replay share passes through to OnlineDraftConfig; a share outside [0, 1) is the
    # parser's error (exit 2, naming the flag), not a traceback after the models load
    from adaserve.cli import build_parser
    from adaserve.server.main import online_draft_config

    parse = build_parser().parse_args
    args = parse(["serve", "--online-draft", "--online-draft-interval", "16",
                  "--online-draft-replay-share", "0.25"])
    cfg = online_draft_config(args)
    assert (cfg.interval, cfg.replay_share, cfg.head_rows) == (16, 0.25, 0)
    defaults = online_draft_config(parse(["serve", "--online-draft"]))
    assert (defaults.replay_share, defaults.anchor_weight, defaults.steps) == (0.5, 0.25, 16)
    assert online_draft_config(parse(["serve", "--online-draft", "--online-draft-steps",
                                      "4"])).steps == 4
    assert online_draft_config(parse(["serve", "--online-draft", "--online-draft-anchor-weight",
                                      "0"])).anchor_weight == 0.0
    assert online_draft_config(parse(["serve", "--online-draft-replay-share", "0.25"])) is None
    for flag, bad in [("--online-draft-replay-share", "1"), ("--online-draft-replay-share",
                      "-0.1"), ("--online-draft-replay-share", "half"),
                      ("--online-draft-anchor-weight", "-1"), ("--online-draft-steps", "-1"),
                      ("--online-draft-interval", "0"), ("--online-draft-head-rows", "x")]:
        r = subprocess.run([sys.executable, "-m", "adaserve.cli", "serve", flag, bad],
                           capture_output=True, text=True)
        assert r.returncode == 2 and flag in r.stderr, r.stderr

"""`adaserve sglang serve-cpu` builds SGLang's launch (argv and environment) without
starting it: the part that runs in the main environment, where sglang is not installed.
The launch itself is tested end to end in tests/sglang_tier/test_serve_cpu.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adaserve.cli import build_parser
from adaserve.sglang.cpu.launch import BOOT, command, main


@pytest.fixture()
def model(tmp_path) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    return str(tmp_path)


def parse(*argv: str):
    return build_parser().parse_args(["sglang", "serve-cpu", *argv])


def test_adaserve_launch_sets_up_the_cpu_runtime(model, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    argv, env = command(parse("--model", model, "--draft", "target", "--budget", "6",
                              "--slo-classes", "urgent=50,relaxed=900", "--default-class",
                              "relaxed", "--verify", "uniform", "--iteration-log", "/tmp/it",
                              "--prefill-chunk-ms", "250", "--port", "31000", "--",
                              "--log-level", "info"))
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(argv[3::1], argv[4::1]))
    assert flags["--model-path"] == model and flags["--device"] == "cpu"
    assert flags["--attention-backend"] == "triton" and flags["--dtype"] == "float32"
    assert flags["--speculative-algorithm"] == "ADASERVE"
    assert flags["--speculative-draft-model-path"] == model  # the target drafts for itself
    assert (flags["--speculative-num-steps"], flags["--speculative-eagle-topk"],
            flags["--speculative-num-draft-tokens"]) == ("3", "2", "4")
    assert "--sleep-on-idle" in argv and flags["--port"] == "31000"
    assert argv[-2:] == ["--log-level", "info"]  # what follows -- goes to SGLang as is
    assert env["ADASERVE_SGLANG_CPU"] == env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["TRITON_INTERPRET"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT), "/elsewhere"]
    assert (BOOT / "sitecustomize.py").is_file()
    assert (env["ADASERVE_BUDGET"], env["ADASERVE_SLO_CLASSES"],
            env["ADASERVE_DEFAULT_CLASS"]) == ("6", "urgent=50,relaxed=900", "relaxed")
    assert (env["ADASERVE_VERIFY"], env["ADASERVE_ITERATION_LOG"]) == ("uniform", "/tmp/it")
    assert env["ADASERVE_PREFILL_CHUNK_MS"] == "250.0"  # the default TTFT's prefill rate


def test_the_default_draft_is_the_distilled_one_with_a_full_vocabulary(model, monkeypatch,
                                                                       tmp_path):
    """SGLang loads a standalone draft whose vocabulary is the target's: by default our
    distilled draft, exported into the cache with a full head on first use."""
    from adaserve.engine.weights import FULL_VOCAB_DRAFT

    monkeypatch.setenv("ADASERVE_CACHE_DIR", str(tmp_path))
    made = []
    monkeypatch.setattr("adaserve.sglang.cpu.launch.sglang_draft_dir",
                        lambda name: made.append(name) or f"/cache/{name}")
    argv, env = command(parse("--model", model))
    flags = dict(zip(argv[3::1], argv[4::1]))
    assert made == [FULL_VOCAB_DRAFT]
    assert flags["--speculative-draft-model-path"] == f"/cache/{FULL_VOCAB_DRAFT}"
    assert "ADASERVE_VERIFY" not in env  # ragged where the target can: the worker decides


def test_without_speculation_no_speculative_flag(model):
    argv, env = command(parse("--model", model, "--algorithm", "none"))
    assert not any(a.startswith("--speculative") for a in argv)
    assert "ADASERVE_BUDGET" not in env


def test_without_sglang_it_says_where_to_run_it(model, capsys):
    code = main(parse("--model", model))
    assert code == 2
    assert ".venv-sglang/bin/adaserve" in capsys.readouterr().err


@pytest.mark.parametrize("head, mapped", [("hot", True), ("full", False)])
def test_the_drafts_head_is_cut_to_its_trained_tokens_by_default(model, monkeypatch, tmp_path,
                                                                  head, mapped):
    """SGLang's --speculative-token-map with the draft's hot_tokens.pt (its 8,192 trained
    tokens) unless --draft-head full; only for ADASERVE, whose worker cuts the head."""
    from adaserve.engine.full_vocab import HOT_TOKENS

    (tmp_path / HOT_TOKENS).write_bytes(b"ids")
    monkeypatch.setattr("adaserve.sglang.cpu.launch.sglang_draft_dir", lambda name: str(tmp_path))
    argv, _ = command(parse("--model", model, "--draft-head", head))
    flags = dict(zip(argv[3::1], argv[4::1]))
    assert (flags.get("--speculative-token-map") == str(tmp_path / HOT_TOKENS)) is mapped
    argv, _ = command(parse("--model", model, "--algorithm", "STANDALONE"))
    assert "--speculative-token-map" not in argv  # SGLang's own worker would map twice


def test_the_boot_hook_runs_the_sitecustomize_it_shadows(tmp_path):
    """serve-cpu puts its boot directory first on PYTHONPATH; the environment's own
    sitecustomize (a development checkout's import mapping, a site's) still runs."""
    import subprocess
    import sys

    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED = 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BOOT), str(tmp_path)])}
    env.pop("ADASERVE_SGLANG_CPU", None)
    out = subprocess.run([sys.executable, "-c", "print(SHADOWED)"], env=env,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stderr

"""`adaserve distill-draft` end to end at a tiny scale on the real target: it writes a draft
the engine loads and speculates with, and the same arguments give the same weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from adaserve.cli import main
from adaserve.engine import Engine, EngineConfig, SamplingParams


@pytest.mark.slow
def test_distill_draft_writes_a_reproducible_loadable_draft(smollm, tmp_path):
    args = ["distill-draft", "--prompts", "8", "--layers", "1", "--head-tokens", "1024",
            "--epochs", "1", "--no-progress"]
    assert main(args + ["--out", str(tmp_path / "a"), "--work", str(tmp_path / "wa")]) == 0
    report = json.loads((tmp_path / "a" / "distill_report.json").read_text())
    assert report["sequences"]["train"] > 0 and report["steps"] > 0
    assert report["loss_last_25"] <= report["loss_first_25"] * 1.05  # mostly one short epoch
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["adaserve_draft"]["head_tokens"] == 1024

    # resume: the teacher shards and the finished checkpoint are reused, nothing retrained
    assert main(args + ["--out", str(tmp_path / "a2"), "--work", str(tmp_path / "wa")]) == 0
    # trained from scratch again (on a copy of the teacher data, whose generation the
    # batch-independence test covers): the same weights, bit for bit
    shutil.copytree(tmp_path / "wa" / "teacher", tmp_path / "wb" / "teacher")
    assert main(args + ["--out", str(tmp_path / "b"), "--work", str(tmp_path / "wb")]) == 0
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    a2 = load_file(str(tmp_path / "a2" / "model.safetensors"))
    assert a.keys() == b.keys() == a2.keys()
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], a2[k]) for k in a)

    cfg = EngineConfig(policy="adaserve", draft=str(tmp_path / "a"), budget=8)
    params = SamplingParams(max_tokens=10)
    with Engine(EngineConfig(), models=smollm) as inc:
        [want] = inc.generate(["The capital of France is"], params)
    with Engine(cfg) as eng:
        [got] = eng.generate(["The capital of France is"], params)
    assert got.token_ids == want.token_ids

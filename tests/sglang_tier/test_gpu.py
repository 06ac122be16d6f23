"""The GPU tier: SGLang launched with the plugin, end to end. Marked ``gpu`` and skipped
without a CUDA GPU (SGLang's kernels need one).

Model pair: SmolLM2-135M as target and as its own draft. The packaged draft has a reduced
vocabulary head, which SGLang's standalone draft cannot load; a draft equal to its target
still shows what is tested here: greedy outputs equal to non-speculative ones, and SLO
classes getting different accepted lengths once the budget is tighter than the layout
(with a perfect draft, a request's accepted length is the depth AdaServe kept for it).
The weights are the ones `adaserve serve` converts from the packaged GGUF on first use
(~/.cache/adaserve/models/smollm2-135m), or ADASERVE_GPU_MODEL's directory.

Never run so far: no GPU machine with sglang has been available to this project (the lent
machines cannot install packages of sglang's size). See docs/sglang-tests.md."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from adaserve.sglang.cpu.process import ServerProcess

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: SGLang's kernels run there")]

PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "List three prime numbers:", "def fibonacci(n):", "Once upon a time",
           "Explain what a hash table is in one sentence."]
SHAPE = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
         "--speculative-num-draft-tokens", "6"]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    src = Path(os.environ.get("ADASERVE_GPU_MODEL",
                              Path.home() / ".cache/adaserve/models/smollm2-135m"))
    if not (src / "config.json").is_file():
        pytest.skip(f"no model at {src}: run `adaserve serve` once, or set ADASERVE_GPU_MODEL")
    out = tmp_path_factory.mktemp("smollm2")
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = cfg.get("architectures") or ["LlamaForCausalLM"]  # SGLang needs it
    (out / "config.json").write_text(json.dumps(cfg))
    for f in src.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f)
    return str(out)


class Server(ServerProcess):
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        super().__init__(
            [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1",
             "--mem-fraction-static", "0.3", "--log-level", "warning", *args], log,
            # the CPU tests' Triton interpreter (conftest) must not reach SGLang's kernels
            env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **env})

    def generate(self, prompt: str, headers=None, max_new_tokens: int = 48) -> dict:
        import httpx

        r = httpx.post(self.url + "/generate", headers=headers or {}, timeout=600, json={
            "text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens":
                                                max_new_tokens, "ignore_eos": True}})
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def plain_outputs(model, tmp_path_factory):
    s = Server(["--model-path", model], {}, tmp_path_factory.mktemp("plain") / "log")
    try:
        return [s.generate(p)["text"] for p in PROMPTS]
    finally:
        s.stop()


@pytest.fixture(scope="module")
def adaserve(model, tmp_path_factory):
    # a budget under the layout (16 requests x 6 positions), so classes compete for it
    env = {"ADASERVE_SLO_CLASSES": "urgent=5,relaxed=2000,best-effort",
           "ADASERVE_BUDGET": "40"}
    s = Server(["--model-path", model, "--speculative-algorithm", "ADASERVE",
                "--speculative-draft-model-path", model, *SHAPE, "--enable-metrics",
                "--max-running-requests", "16"], env, tmp_path_factory.mktemp("ada") / "log")
    yield s
    s.stop()


def test_greedy_output_equals_non_speculative(adaserve, plain_outputs):
    assert [adaserve.generate(p)["text"] for p in PROMPTS] == plain_outputs


def test_slo_classes_get_different_accepted_lengths_under_load(adaserve):
    jobs = [(PROMPTS[i % len(PROMPTS)], {"X-SLO-Class": "urgent" if i % 2 else "relaxed"})
            for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda j: adaserve.generate(*j, max_new_tokens=128), jobs))
    by = {"urgent": [], "relaxed": []}
    for out in outs:
        meta = out["meta_info"]
        by[meta["slo_class"]].append(meta["accepted_tokens_per_step"])
    assert len(by["urgent"]) == len(by["relaxed"]) == 8
    assert sum(by["urgent"]) / 8 > sum(by["relaxed"]) / 8
    import httpx

    text = httpx.get(adaserve.url + "/metrics", timeout=30).text
    assert 'adaserve_requests_total{attained=' in text and 'slo_class="urgent"' in text

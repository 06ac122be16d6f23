"""The SGLang tier: runs where the real sglang 0.5.23 is installed (its own venv: it pins
torch 2.14.1), and is skipped elsewhere (tests/test_sglang_tier.py runs it from the main
suite in that venv). SGLang's Triton tree kernels run here on the CPU through Triton's
interpreter, which has to be chosen before any kernel module is imported."""

import importlib.util
import json
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["test_*.py"]


# a config-only Llama checkpoint: SGLang's argument resolution reads the architecture from
# config.json and loads no weights
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 512,
         "rms_norm_eps": 1e-5, "torch_dtype": "float32"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """That checkpoint's directory, with the plugin loaded as SGLang's launcher does."""
    from sglang.srt.plugins import load_plugins

    d = tmp_path_factory.mktemp("llama")
    (d / "config.json").write_text(json.dumps(LLAMA))
    load_plugins()
    return str(d)


@pytest.fixture
def slo_env(monkeypatch):
    """Sets a test's SLO environment (ADASERVE_BASELINE_MS, ADASERVE_PREFILL_CHUNK_MS), with
    the per-process caches that read it (and ADASERVE_POLICY) cleared before and after."""
    from adaserve.sglang import admission
    from adaserve.sglang.slo import configured_classes, configured_prefill

    cached = (configured_classes, configured_prefill, admission.served_options)

    def configure(baseline_ms: str, prefill_chunk_ms: str) -> None:
        monkeypatch.setenv("ADASERVE_BASELINE_MS", baseline_ms)
        monkeypatch.setenv("ADASERVE_PREFILL_CHUNK_MS", prefill_chunk_ms)
        for c in cached:
            c.cache_clear()

    yield configure
    for c in cached:
        c.cache_clear()


@pytest.fixture(scope="session")
def logdir(tmp_path_factory):
    return tmp_path_factory.mktemp("serve_cpu")


@pytest.fixture(scope="session")
def plain_outputs(logdir) -> dict[str, list[int]]:
    """Greedy outputs of SGLang without speculation, and no ADASERVE_* setting: the
    plugin's hooks are loaded into this server too (its entry point is installed) and
    must leave it alone. Before that fix its warm-up /generate answered 500 and the server
    never started. Stopped before the ADASERVE server starts: one at a time on 2 cores."""
    from servers import PROMPTS, Server

    s = Server("plain", ["--algorithm", "none"], {}, logdir)
    try:
        out = {}
        for p in PROMPTS:
            r = s.generate(p)
            assert r.status_code == 200, r.text
            out[p] = r.json()["output_ids"]
        return out
    finally:
        s.stop()


@pytest.fixture(scope="session")
def ada(logdir, plain_outputs):  # after the plain server has stopped
    """SGLang with ADASERVE: its real draft, ragged verify (the default), a budget under
    the layout, the iteration log, and SGLang's strict idle-time pool check; a baseline
    and a prefill rate (PREFILL, test inputs) give its classes a default TTFT SLO. The
    preset runs without its TPOT door: urgent's 1 ms is always missed, so once two urgent
    requests finished the door would refuse the next urgent one while another is held,
    and the tests sharing this server send urgent requests side by side on purpose (the
    door is tested in test_refusal_tpot.py)."""
    from servers import BUDGET, CLASSES, PREFILL, SHAPE, Server

    s = Server("adaserve", [*SHAPE, "--policy", "adaserve:refuse_tpot=off",
                            "--budget", str(BUDGET), "--slo-classes", CLASSES,
                            "--default-class", "relaxed", "--enable-metrics", *PREFILL,
                            "--iteration-log", str(logdir / "iterations.jsonl")],
               {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}, logdir)
    yield s
    assert s.alive(), s.tail()
    assert "memory leak detected" not in s.log.read_text(errors="replace")
    s.stop()

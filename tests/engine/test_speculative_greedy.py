"""Speculation is lossless: every policy's greedy output equals incremental greedy output,
token for token, in one mixed batch where requests join and finish mid-run (the static
chains too, and either prefill mode), with the draft's KV whole or bounded to sinks + a
recent window (draft_window.py: the ring wraps several times over these 70-90 tokens)."""

from __future__ import annotations

import pytest

from adaserve.engine import SamplingParams
from adaserve.engine.weights import DEFAULT_DRAFT
from adaserve.engine.systems import resolve_system
from adaserve.scheduler import POLICIES

from engine_helpers import PROMPTS, make_core, run_workload

SPECULATIVE = [p for p in POLICIES if p not in ("incremental", "turbospec")]
# the draft's KV: whole, or 4 sinks + the 16 most recent tokens
DRAFT_KV = {"full": {}, "window": {"draft_window": 16, "draft_sinks": 4}}


def _schedule(tokenizer):
    """10 requests: six at the start, four joining at later steps; 64..79 tokens each so
    they finish at different iterations."""
    sched = []
    for i, prompt in enumerate(PROMPTS[:10]):
        join = 0 if i < 6 else 3 * (i - 5)
        params = SamplingParams(max_tokens=64 + (i * 5) % 16, ignore_eos=True)
        sched.append((join, f"r{i}", tokenizer.encode(prompt), params))
    return sched


@pytest.fixture(scope="module")
def reference(tokenizer):
    core = make_core("incremental", max_batch=16)
    return run_workload(core, _schedule(tokenizer))


def test_incremental_matches_transformers_greedy(smollm, tokenizer, reference):
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(smollm.path), dtype=torch.float32).eval()
    ids = tokenizer.encode(PROMPTS[0])
    out = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):]
    assert reference["r0"][:24] == out.tolist()


@pytest.mark.slow
def test_waiting_for_a_free_slot_changes_nothing(tokenizer, reference):
    """Four KV slots for ten requests: later ones reuse slots freed by compaction."""
    core = make_core("incremental", max_batch=4)
    assert run_workload(core, _schedule(tokenizer)) == reference
    assert not core.slots and core.n_decode == 0


@pytest.mark.parametrize("system", ["vllm", pytest.param("vllm-spec-4", marks=pytest.mark.slow)])
def test_prefill_first_changes_no_token(system, tokenizer, reference):
    """vLLM's prefill-first and vLLM-Spec(4) (a static chain) on the real pair: the same
    greedy output as chunked incremental decoding, with prompts joining mid-run."""
    s = resolve_system(system)
    draft = None if s.policy == "incremental" else "layers:4"
    core = make_core(s.policy, draft=draft, prefill_mode=s.prefill_mode, max_batch=16,
                     budget=8, prefill_chunk=32)
    assert run_workload(core, _schedule(tokenizer)) == reference


@pytest.mark.slow
@pytest.mark.parametrize("kv", DRAFT_KV)
@pytest.mark.parametrize("policy", SPECULATIVE)
def test_target_as_draft_equals_incremental(policy, kv, tokenizer, reference):
    """The target drafts for itself: with its whole KV every greedy candidate is accepted
    (deepest paths); with a window (self-speculation, MagicDec) most are."""
    core = make_core(policy, draft="target", budget=24, max_batch=16, **DRAFT_KV[kv])
    out = run_workload(core, _schedule(tokenizer))
    assert out == reference
    assert core.n_slots - core.free_slots == 0
    steps = sum(s.running for s in core.stats)
    tokens = sum(s.emitted_tokens for s in core.stats)
    assert tokens / steps > 1.5  # speculation really happened


@pytest.mark.slow
@pytest.mark.parametrize("kv", DRAFT_KV)
@pytest.mark.parametrize("policy", SPECULATIVE + ["turbospec"])
def test_weak_draft_equals_incremental(policy, kv, tokenizer, reference):
    """A 4-layer cut of the target: most candidates are rejected."""
    core = _turbospec_core(**DRAFT_KV[kv]) if policy == "turbospec" else \
        make_core(policy, draft="layers:4", budget=32, max_batch=16, **DRAFT_KV[kv])
    out = run_workload(core, _schedule(tokenizer))
    assert out == reference


@pytest.mark.parametrize("policy", ["adaserve", pytest.param("chain-4", marks=pytest.mark.slow)])
def test_bounded_distilled_draft_equals_incremental(policy, tokenizer, reference):
    """The packaged distilled draft with its KV bounded: 2 sinks + 6 recent tokens, so a
    prefill chunk of 8 goes into the window in two pieces."""
    core = make_core(policy, draft=DEFAULT_DRAFT, budget=24, max_batch=16,
                     prefill_chunk=8, draft_window=6, draft_sinks=2)
    assert run_workload(core, _schedule(tokenizer)) == reference
    assert sum(s.emitted_tokens for s in core.stats) > sum(s.running for s in core.stats)


def _turbospec_core(**kw):
    """turbospec needs a latency model; a flat one (every k costs the same) makes it
    speculate, which is what this test needs."""
    from adaserve.engine.core import EngineCore
    from adaserve.engine.config import EngineConfig
    from adaserve.engine.loader import load_models
    from adaserve.engine.profile_data import Profile
    from adaserve.scheduler import LatencyModel

    cfg = EngineConfig(policy="turbospec", draft="layers:4", budget=32, max_batch=16, **kw)
    flat = LatencyModel(alpha=0.0, gamma=0.0, delta=0.05)
    prof = Profile("test", "layers:4", 32, False, flat, None, 0.05, "test", "", {})
    return EngineCore(cfg, load_models(cfg), prof)

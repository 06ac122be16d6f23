"""The committed distilled draft, and the other draft directories the loader accepts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from engine_helpers import PROMPTS

from adaserve.distill.prompts import phase1
from adaserve.distill.teacher import continue_prompts, score_sequence
from adaserve.engine import Engine, EngineConfig, SamplingParams
from adaserve.engine.engine import encode_chat
from adaserve.engine.loader import load_models
from adaserve.engine.weights import DEFAULT_DRAFT, resolve_draft

# Held-out greedy agreement of the committed draft on the sample below: 0.599 measured
# 2026-11-21 on the dev CPU; the floor leaves a margin for float noise across machines
# (a flipped near-tie moves it by 1/192). A broken export or a mismatched vocabulary
# mapping lands near 0.
AGREEMENT_FLOOR = 0.50


@pytest.fixture(scope="module")
def distilled():
    return load_models(EngineConfig(policy="adaserve"))  # "auto": the packaged draft


def test_the_committed_draft_is_small_and_loads_by_default(distilled):
    path = resolve_draft(DEFAULT_DRAFT)
    assert (path / "model.safetensors").stat().st_size <= 32 * 2**20
    card = (path / "README.md").read_text()
    assert "held-out" in card and "Forward KL" in card
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["adaserve_draft"]["shared_embeddings"]
    assert EngineConfig(policy="adaserve").draft == DEFAULT_DRAFT
    assert EngineConfig().draft is None  # incremental loads no draft
    ids = distilled.draft_token_ids
    assert ids is not None and ids.numel() == cfg["adaserve_draft"]["head_tokens"]
    assert ids.unique().numel() == ids.numel() and int(ids.max()) < distilled.target.cfg.vocab
    assert distilled.eos_ids <= set(ids.tolist())
    # the embeddings are the target's own tensor's values, not a copy of something else
    assert torch.equal(distilled.draft.embed, distilled.target.embed)


def _agreement(models, n_prompts: int = 6, new: int = 32) -> float:
    held = [dataclasses.replace(p, sampled=False, max_new=new)
            for p in phase1(1200) if p.split == "heldout"][:n_prompts]
    enc = [encode_chat(models.tokenizer, [{"role": r, "content": c} for r, c in p.messages])
           for p in held]
    shard = continue_prompts(models.target, held, enc, models.eos_ids, k=1)
    hits = []
    for i in range(len(shard)):
        toks, n_prompt = shard.sequence(i)
        pred = models.draft_token_ids[score_sequence(models.draft, toks.tolist(), n_prompt).argmax(-1)]
        hits.append(pred.numpy() == toks[n_prompt:])  # greedy: each token is the target's argmax
    return float(np.concatenate(hits).mean())


def test_held_out_greedy_agreement_stays_above_the_floor(distilled):
    assert _agreement(distilled) >= AGREEMENT_FLOOR


@pytest.mark.slow
def test_speculating_with_the_distilled_draft_is_lossless(distilled, smollm):
    params = SamplingParams(max_tokens=24)
    with Engine(EngineConfig(), models=smollm) as inc:
        want = [c.token_ids for c in inc.generate(PROMPTS[:3], params)]
    with Engine(EngineConfig(policy="adaserve", budget=16), models=distilled) as eng:
        got = eng.generate(PROMPTS[:3], params)
    assert [c.token_ids for c in got] == want
    assert max(c.stats.accepted_tokens_per_step for c in got) > 1.0, "nothing was accepted"


def _save_hf_draft(path, vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)


@pytest.mark.slow
def test_any_hf_format_draft_with_the_tokenizer_loads(smollm, tmp_path):
    _save_hf_draft(tmp_path / "ok", smollm.target.cfg.vocab)
    smollm.tokenizer.save_pretrained(str(tmp_path / "ok"))
    cfg = EngineConfig(policy="adaserve", draft=str(tmp_path / "ok"), budget=8)
    models = load_models(cfg)
    assert models.draft.n_layers == 1 and models.draft_token_ids is None
    params = SamplingParams(max_tokens=12)
    with Engine(EngineConfig(), models=smollm) as inc:
        [want] = inc.generate(PROMPTS[:1], params)
    with Engine(cfg, models=models) as eng:
        [got] = eng.generate(PROMPTS[:1], params)
    assert got.token_ids == want.token_ids

    _save_hf_draft(tmp_path / "small", 1000)
    with pytest.raises(ValueError, match="cannot share the tokenizer"):
        load_models(EngineConfig(policy="adaserve", draft=str(tmp_path / "small")))

"""The distilled draft exported as a standard full-vocabulary Llama checkpoint (what SGLang
loads as a standalone draft): transformers loads it by itself, it scores the 8,192 trained
tokens exactly as the packaged draft does, every other token through the target's own head
row, and it speaks the target's tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from engine_helpers import PROMPTS

from adaserve.distill.teacher import score_sequence
from adaserve.engine.full_vocab import HOT_TOKENS, export_full_vocab
from adaserve.engine.weights import (
    DEFAULT_DRAFT,
    DEFAULT_MODEL,
    TOKEN_IDS_KEY,
    load_state,
    resolve_draft,
    resolve_model,
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "draft"
    export_full_vocab(resolve_draft(DEFAULT_DRAFT), resolve_model(DEFAULT_MODEL), out)
    return out


def test_the_checkpoint_is_a_plain_llama_with_the_targets_vocabulary(exported):
    from transformers import AutoTokenizer

    cfg = json.loads((exported / "config.json").read_text())
    target_cfg = json.loads((resolve_model(DEFAULT_MODEL) / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 3
    assert cfg["vocab_size"] == target_cfg["vocab_size"] and not cfg["tie_word_embeddings"]
    state, draft = load_state(exported), load_state(resolve_draft(DEFAULT_DRAFT))
    target = load_state(resolve_model(DEFAULT_MODEL))
    embed = target["model.embed_tokens.weight"]
    ids = draft[TOKEN_IDS_KEY].long()
    head = state["lm_head.weight"]
    assert head.shape == embed.shape and state["model.embed_tokens.weight"].dtype == torch.float32
    assert torch.equal(state["model.embed_tokens.weight"], embed)
    assert torch.equal(head[ids], draft["lm_head.weight"].float())
    others = torch.ones(head.shape[0], dtype=torch.bool)
    others[ids] = False
    assert torch.equal(head[others], embed[others])  # SmolLM2's head is its embedding
    assert torch.load(exported / HOT_TOKENS) == ids.tolist()
    same = AutoTokenizer.from_pretrained(str(exported)).get_vocab()
    assert same == AutoTokenizer.from_pretrained(str(resolve_model(DEFAULT_MODEL))).get_vocab()


def test_transformers_runs_it_as_the_packaged_draft_scores(exported, models):
    """Loaded by transformers alone, on the target's tokens of a prompt: the trained
    tokens' logits are the packaged draft's (run by our engine), every layer exported."""
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(str(exported), dtype=torch.float32).eval()
    toks = models.tokenizer(PROMPTS[0])["input_ids"] + models.tokenizer(PROMPTS[1])["input_ids"]
    with torch.no_grad():
        full = hf(torch.tensor([toks])).logits[0]  # [T, 49152]
    ours = torch.as_tensor(score_sequence(models.draft, toks, 1))  # [T - 1, 8192] from pos 1
    ids = models.draft_token_ids
    torch.testing.assert_close(full[: len(toks) - 1][:, ids], ours[: len(toks) - 1],
                               atol=2e-3, rtol=2e-3)

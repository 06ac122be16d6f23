"""A tiny randomly initialised Llama pair: fast enough for statistical tests."""

from __future__ import annotations

import torch

from adaserve.engine.loader import Models
from adaserve.engine.model import Llama, ModelConfig

TINY = ModelConfig(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                   vocab=64, rms_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
                   max_positions=512, tie_embeddings=False)


def tiny_state(seed: int, head_scale: float = 6.0) -> dict[str, torch.Tensor]:
    """Weights in Hugging Face names. A large head makes next-token distributions peaked,
    so a wrong sampler moves mass visibly."""
    g = torch.Generator().manual_seed(seed)
    c = TINY

    def rnd(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    s = {"model.embed_tokens.weight": rnd(c.vocab, c.hidden, scale=1.0),
         "model.norm.weight": torch.ones(c.hidden),
         "lm_head.weight": rnd(c.vocab, c.hidden, scale=head_scale / c.hidden ** 0.5)}
    for i in range(c.layers):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = torch.ones(c.hidden)
        s[p + "post_attention_layernorm.weight"] = torch.ones(c.hidden)
        s[p + "self_attn.q_proj.weight"] = rnd(c.heads * c.head_dim, c.hidden)
        s[p + "self_attn.k_proj.weight"] = rnd(c.kv_heads * c.head_dim, c.hidden)
        s[p + "self_attn.v_proj.weight"] = rnd(c.kv_heads * c.head_dim, c.hidden)
        s[p + "self_attn.o_proj.weight"] = rnd(c.hidden, c.heads * c.head_dim)
        s[p + "mlp.gate_proj.weight"] = rnd(c.intermediate, c.hidden)
        s[p + "mlp.up_proj.weight"] = rnd(c.intermediate, c.hidden)
        s[p + "mlp.down_proj.weight"] = rnd(c.hidden, c.intermediate)
    return s


def perturbed(state: dict[str, torch.Tensor], seed: int, noise: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + noise * v.std() * torch.randn(v.shape, generator=g) for k, v in state.items()}


def tiny_models(tokenizer, target_state, draft_state) -> Models:
    target = Llama(TINY, target_state)
    draft = Llama(TINY, draft_state)
    return Models(target, draft, None, tokenizer, frozenset(), None, "cpu")


def hf_tiny(state):
    """The same weights in transformers' Llama: an independent reference implementation."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = TINY
    cfg = LlamaConfig(vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate,
                      num_hidden_layers=c.layers, num_attention_heads=c.heads,
                      num_key_value_heads=c.kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_eps,
                      rope_theta=c.rope_theta, max_position_embeddings=c.max_positions,
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).eval()
    m.load_state_dict(state, strict=False)
    return m

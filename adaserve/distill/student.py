"""The draft in training form: the engine's Llama math with autograd, no KV cache.

The draft shares the target's tokenizer and its input embeddings (frozen, never saved:
the engine hands the target's to the draft at load time), has a few decoder layers
initialised from the target's first layers, and an output head over a vocabulary subset
(``head_ids``, target ids) initialised from the target's tied head rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from adaserve.engine.model import ModelConfig, _rope, rope_tables
from adaserve.engine.weights import TOKEN_IDS_KEY


class Student(nn.Module):
    def __init__(self, cfg: ModelConfig, target_state: dict, n_layers: int,
                 head_ids: torch.Tensor) -> None:
        super().__init__()
        self.cfg, self.n_layers = cfg, n_layers
        embed = target_state["model.embed_tokens.weight"].float()
        self.register_buffer("embed", embed, persistent=False)  # frozen, shared with the target
        self.register_buffer("head_ids", head_ids.to(torch.int64))
        self.layers = nn.ModuleList()
        for i in range(n_layers):
            p = f"model.layers.{i}."
            layer = nn.ParameterDict({
                k.replace(".", "__"): nn.Parameter(target_state[p + k].float().clone())
                for k in ("input_layernorm.weight", "self_attn.q_proj.weight",
                          "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")})
            self.layers.append(layer)
        self.norm = nn.Parameter(target_state["model.norm.weight"].float().clone())
        head = target_state.get("lm_head.weight", embed)
        self.head = nn.Parameter(head.float()[self.head_ids].clone())  # [K, hidden]
        cos, sin = rope_tables(cfg, cfg.max_positions)
        self.register_buffer("cos", cos.float(), persistent=False)
        self.register_buffer("sin", sin.float(), persistent=False)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps) * w

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states [B, T, hidden] of right-padded sequences (causal
        attention: padding at the end never reaches a real position)."""
        c = self.cfg
        b, t = tokens.shape
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos[:t, None, :], self.sin[:t, None, :]  # [T, 1, D]
        for p in self.layers:
            h = self._rms(x, p["input_layernorm__weight"])
            q = F.linear(h, p["self_attn__q_proj__weight"]).view(b, t, c.heads, c.head_dim)
            k = F.linear(h, p["self_attn__k_proj__weight"]).view(b, t, c.kv_heads, c.head_dim)
            v = F.linear(h, p["self_attn__v_proj__weight"]).view(b, t, c.kv_heads, c.head_dim)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True, enable_gqa=True)
            x = x + F.linear(a.transpose(1, 2).reshape(b, t, -1), p["self_attn__o_proj__weight"])
            h = self._rms(x, p["post_attention_layernorm__weight"])
            g, u = F.linear(h, p["mlp__gate_proj__weight"]), F.linear(h, p["mlp__up_proj__weight"])
            x = x + F.linear(F.silu(g) * u, p["mlp__down_proj__weight"])
        return self._rms(x, self.norm)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head)  # [..., K] over head_ids

    def export_state(self, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
        """Hugging Face names, as the engine's loader reads them; no embeddings."""
        out = {}
        for i, p in enumerate(self.layers):
            for k, v in p.items():
                out[f"model.layers.{i}.{k.replace('__', '.')}"] = v.detach().to(dtype).contiguous()
        out["model.norm.weight"] = self.norm.detach().to(dtype)
        out["lm_head.weight"] = self.head.detach().to(dtype).contiguous()
        out[TOKEN_IDS_KEY] = self.head_ids.clone()
        return out


def draft_config(target_config: dict, n_layers: int, n_head: int, extra: dict) -> dict:
    """The draft's config.json: the target's, with its own depth and our sharing markers."""
    cfg = dict(target_config)
    cfg.update(num_hidden_layers=n_layers, tie_word_embeddings=False)
    cfg.pop("adaserve_source", None)
    cfg["adaserve_draft"] = dict(extra, shared_embeddings=True, head_tokens=n_head)
    return cfg


def save_draft(out: Path, state: dict[str, torch.Tensor], config: dict, card: str) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    (out / "README.md").write_text(card)

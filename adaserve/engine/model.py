"""A Llama-family decoder in plain PyTorch, reading and writing a preallocated KV cache.

One forward serves every phase (prefill chunks, draft beam steps, tree verification): the
caller hands a `ForwardBatch` whose explicit mask says which cache columns each query sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from adaserve.engine.batch import ForwardBatch
from adaserve.engine.kv_cache import KVCache


@dataclass(frozen=True, slots=True)
class ModelConfig:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rms_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_positions: int
    tie_embeddings: bool

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelConfig:
        if cfg.get("model_type") not in ("llama", "mistral", "qwen2", None):
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not a Llama-family model")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ValueError("attention/MLP biases are not supported")
        heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        return cls(
            hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"], heads=heads,
            kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"],
            rms_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=float(theta),
            rope_scaling=None if kind == "default" else dict(rope, rope_type=kind),
            max_positions=cfg.get("max_position_embeddings", 4096),
            tie_embeddings=cfg.get("tie_word_embeddings", False),
        )


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies [head_dim/2], with the model's own theta and scaling."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = cfg.rope_scaling
    if s is None:
        return inv
    kind = s["rope_type"]
    if kind == "linear":
        return inv / s["factor"]
    if kind == "llama3":  # Llama 3.1: scale long wavelengths, keep short ones, blend between
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * inv / factor + smooth * inv
        out = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        return torch.where(mid, blended, out)
    raise ValueError(f"rope scaling {kind!r} is not supported (default, linear, llama3)")


def rope_tables(cfg: ModelConfig, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, head_dim] in float64, for positions 0..positions-1."""
    freqs = torch.outer(torch.arange(positions, dtype=torch.float64), rope_inv_freq(cfg))
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


class Llama(torch.nn.Module):
    """Weights as plain tensors: Q/K/V fused into one matmul, gate/up into another."""

    def __init__(self, cfg: ModelConfig, state: dict, *, layers: int | None = None,
                 dtype: torch.dtype = torch.float32, device: str = "cpu",
                 skinny: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_layers = cfg.layers if layers is None else layers
        if not 1 <= self.n_layers <= cfg.layers:
            raise ValueError(f"layers must be in 1..{cfg.layers}, got {layers}")
        self.dtype, self.device = dtype, device

        def w(name: str) -> torch.Tensor:
            return state[name].to(device=device, dtype=dtype)

        self.embed = w("model.embed_tokens.weight")  # [V, hidden]
        head = "model.embed_tokens.weight" if cfg.tie_embeddings or "lm_head.weight" not in state \
            else "lm_head.weight"
        self.lm_head = self.embed if head == "model.embed_tokens.weight" else w(head)
        # A [hidden, V] copy of the head: for one row, x @ W^T streams it about twice as
        # fast as the [V, hidden] layout on the dev CPU (MKL, AVX2).
        self.lm_head_t = self.lm_head.t().contiguous()
        # matmul row buckets (CPU only; a GPU takes any row count as it comes)
        self.row_buckets: tuple[int, ...] = ROW_BUCKETS if device == "cpu" else ()
        # few-row products through the compiled kernel (adaserve.engine.kernels), which the
        # caller has loaded; fp32 CPU only
        self.skinny = skinny and device == "cpu" and dtype == torch.float32
        # where the CPU runs AVX-512, whole forwards stay on the kernels to 64 rows (below)
        self.skinny_rows = (WIDE_SKINNY_ROWS if self.skinny and
                            torch.ops.adaserve.avx512() else SKINNY_ROWS)
        self.norm = w("model.norm.weight")
        self.blocks = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            self.blocks.append((
                w(p + "input_layernorm.weight"),
                torch.cat([w(p + f"self_attn.{x}_proj.weight") for x in "qkv"]).contiguous(),
                w(p + "self_attn.o_proj.weight"),
                w(p + "post_attention_layernorm.weight"),
                torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")]).contiguous(),
                w(p + "mlp.down_proj.weight"),
            ))
        cos, sin = rope_tables(cfg, cfg.max_positions + 1024)
        self.cos = cos.to(device=device, dtype=dtype)  # [P, head_dim]
        self.sin = sin.to(device=device, dtype=dtype)

    def weight_bytes(self) -> int:
        ts = [self.embed, self.norm] + [t for b in self.blocks for t in b]
        if self.lm_head is not self.embed:
            ts.append(self.lm_head)
        return sum(t.numel() * t.element_size() for t in ts)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.cfg.rms_eps) * weight

    @torch.inference_mode()
    def forward(self, kv: KVCache, fb: ForwardBatch) -> torch.Tensor:
        """Logits [R, V] for the rows fb.out_rows (flat indices into [n*Q]); writes K/V of
        every token of fb into the cache columns fb.write_pos."""
        cfg = self.cfg
        n, q = fb.tokens.shape
        h_, kvh, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        x = F.embedding(fb.tokens, self.embed)  # [n, Q, hidden]
        cos = self.cos[fb.positions].unsqueeze(2)  # [n, Q, 1, D]
        sin = self.sin[fb.positions].unsqueeze(2)
        rows = fb.slots
        write_at = _cache_rows(kv, rows, fb.write_pos, kvh)  # shared by every layer
        t = fb.kv_len
        # decode and verify read the cache through the compiled attention: one pass over
        # each request's K and V serves all its query tokens and heads (SDPA reads them
        # once per head, and again per small query block)
        own_attention = self.skinny and fb.tree_mask is not None and q <= ATTENTION_Q
        if own_attention:
            slot_ids = rows if isinstance(rows, torch.Tensor) else \
                torch.arange(rows.start, rows.stop)  # [n]
        else:
            # SDPA turns a bool mask into an additive one on every call: once here instead
            # of once per layer (two ops x 30 layers)
            mask = torch.zeros(fb.mask.shape, dtype=x.dtype, device=x.device).masked_fill_(
                ~fb.mask, float("-inf"))
        pad = self.row_buckets
        # decode and verify shapes run on the compiled kernels: one skinny matmul streams
        # each weight once for all rows, and one op each does a norm, a rotary, a gating
        fused = self.skinny and n * q <= self.skinny_rows
        if fused:
            ops, eps, nq = torch.ops.adaserve, cfg.rms_eps, n * q
            cos2, sin2 = cos.reshape(nq, d), sin.reshape(nq, d)
            res = None  # the MLP output not yet added into x (added inside the next norm)
        for layer, (ln1, wqkv, wo, ln2, wgu, wdown) in enumerate(self.blocks):
            if fused:
                qkv = ops.skinny_linear(ops.add_rms_norm_(x, res, ln1, eps).view(nq, -1), wqkv)
                ops.rope_qk_(qkv, cos2, sin2, h_, kvh)
                qh, kh, vh = qkv.view(n, q, -1).split([h_ * d, kvh * d, kvh * d], dim=-1)
                qh, kh = qh.view(n, q, h_, d), kh.view(n, q, kvh, d)
            else:
                # row-major q/k/v: the CPU flash kernel of SDPA needs a unit last stride (a
                # column-major query sends it to the math kernel: 121 ms against 14 ms per
                # batch-32 decode step, benchmarks/engine/forward_parts.py)
                qkv = _linear(self._rms(x, ln1), wqkv, pad).contiguous()  # [n, Q, (H + 2Hkv) * D]
                qh, kh, vh = qkv.split([h_ * d, kvh * d, kvh * d], dim=-1)
                qh = _rope(qh.view(n, q, h_, d), cos, sin)
                kh = _rope(kh.view(n, q, kvh, d), cos, sin)
            kc, vc = kv.k[layer], kv.v[layer]  # [S, Hkv, C, D]
            kc.view(-1, d).index_copy_(0, write_at, kh.reshape(-1, d))
            vc.view(-1, d).index_copy_(0, write_at, vh.reshape(-1, d))
            if own_attention:
                att = torch.ops.adaserve.tree_attention(
                    qh, kc, vc, slot_ids, fb.prefix_len, fb.tree_mask)  # [n, Q, H * D]
            else:
                keys, values = kc[rows, :, :t], vc[rows, :, :t]  # [n, Hkv, T, D]
                att = F.scaled_dot_product_attention(
                    qh.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True)
                att = att.transpose(1, 2).reshape(n, q, h_ * d)
            if fused:
                o = ops.skinny_linear(att.view(nq, -1), wo).view_as(x)
                hn = ops.add_rms_norm_(x, o, ln2, eps).view(nq, -1)  # x += o in place
                res = ops.skinny_linear(ops.silu_mul(ops.skinny_linear(hn, wgu)), wdown).view_as(x)
            else:
                x = x + _linear(att, wo, pad)
                gate, up = _linear(self._rms(x, ln2), wgu, pad).chunk(2, dim=-1)
                x = x + _linear(F.silu(gate) * up, wdown, pad)
        if fused:
            x.add_(res)
        h = x.view(n * q, cfg.hidden)
        if fb.out_rows is not None:
            h = h[fb.out_rows]
        h = self._rms(h, self.norm)
        if self.skinny and h.shape[0] <= self.skinny_rows:
            return torch.ops.adaserve.skinny_linear(h.contiguous(), self.lm_head)  # [R, V]
        if h.shape[0] == 1 and not pad:
            return h @ self.lm_head_t  # [1, V]
        if h.device.type != "cpu":
            return F.linear(h, self.lm_head)
        return _head_rows(h, self.lm_head, pad)  # [R, V]


# Row counts the CPU matmuls are padded up to. MKL's kernels for a few rows are uneven: one
# row goes through GEMV, slower than a two-row GEMM, and 9-15 rows cost more than 16
# (benchmarks/row_padding.py measures a whole forward both ways). Above the last bucket
# the shapes are compute-bound and padding would only add work.
ROW_BUCKETS = (2, 4, 8, 16, 24, 32)


def padded_rows(m: int, buckets: tuple[int, ...] = ROW_BUCKETS) -> int:
    """The smallest bucket >= m, or m itself beyond the last bucket."""
    for b in buckets:
        if b >= m:
            return b
    return m


# Up to this many rows a forward runs on the compiled kernels when they are loaded: the
# skinny matmul reads each weight once for all rows, where MKL reads them at half the
# bandwidth (benchmarks/engine/engine.py measures both; at 24 and 32 rows it still beat MKL, 64 vs
# 95 and 79 vs 98 ms a forward on the dev CPU). Beyond it (prefill chunks) MKL's blocked
# GEMM takes the compute-bound shapes.
SKINNY_ROWS = 32
# ... and on an AVX-512 CPU (kernels/skinny_avx512.cpp): there whole verify forwards of
# 40-64 rows ran at 0.79-0.88x the MKL path's time (benchmarks/engine/skinny_bound.py, Intel
# Xeon, 2 cores, 2026-11-29; the fused norm, rotary and gating count as much as the
# products, which alone tie MKL from 32 rows)
WIDE_SKINNY_ROWS = 64

# Up to this many query tokens per request, attention runs on the compiled kernel
# (kernels/attention.cpp) when it is loaded; longer prefill chunks keep SDPA. At 1-16
# tokens it beat SDPA in every cell of benchmarks/engine/attention_grid.py (0.40-0.86x its time,
# the gap closing with more tokens); 32, the skinny bound, is not measured yet.
ATTENTION_Q = 32


def _linear(x: torch.Tensor, w: torch.Tensor, buckets: tuple[int, ...] = ()) -> torch.Tensor:
    """x @ w.T computed as (w @ x.T).T: for the few-row products of decoding, MKL runs this
    orientation up to 2x faster on the dev CPU (measured per weight shape, n = 1..64).
    The rows are padded with zeros up to a bucket (ROW_BUCKETS) and cut off again."""
    if x.device.type != "cpu":
        return F.linear(x, w)
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    m = x2.shape[0]
    p = padded_rows(m, buckets)
    if p != m:
        x2 = torch.cat([x2, x2.new_zeros(p - m, shape[-1])])
    # a column-major view: elementwise ops take it as is, and the next _linear wants
    # exactly this layout; callers that need rows contiguous copy (q/k/v only)
    return (w @ x2.t()).t()[:m].view(*shape[:-1], w.shape[0])


def _head_rows(h: torch.Tensor, w: torch.Tensor, buckets: tuple[int, ...] = (),
               chunk: int = 2048) -> torch.Tensor:
    """Row-major logits [R, V] = h @ w.T, in vocabulary chunks of the fast (w @ h.T)
    orientation. A column-major [R, V] would make every consumer's reduction over V
    strided (argmax over 128 rows: 59 ms strided vs 7 ms row-major on the dev CPU), and
    one whole-matrix transpose costs more than per-chunk copies that stay in cache."""
    m = h.shape[0]
    p = padded_rows(m, buckets)
    if p != m:
        h = torch.cat([h, h.new_zeros(p - m, h.shape[1])])
    out = torch.empty(m, w.shape[0], dtype=h.dtype, device=h.device)
    ht = h.t()
    for c in range(0, w.shape[0], chunk):
        out[:, c: c + chunk].copy_((w[c: c + chunk] @ ht)[:, :m].t())
    return out


def _cache_rows(kv: KVCache, slots: slice | torch.Tensor, write_pos: torch.Tensor,
                kv_heads: int) -> torch.Tensor:
    """Flat row of every (token, kv head) in one layer's cache viewed as [S*Hkv*C, D], in
    the order of k.reshape(-1, D) for k [n, Q, Hkv, D]: one index_copy_ per layer writes
    all new K (or V), cheaper than a three-index put."""
    ids = slots if isinstance(slots, torch.Tensor) else torch.arange(slots.start, slots.stop)
    c = kv.slot_len
    base = ids.to(write_pos.device)[:, None] * (kv_heads * c) + write_pos  # [n, Q]
    heads = torch.arange(kv_heads, device=write_pos.device) * c
    return (base[:, :, None] + heads).reshape(-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin

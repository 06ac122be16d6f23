"""Torch versions of the attention kernels SGLang's Triton attention backend calls.

SGLang's speculative decoding needs ``--attention-backend triton``; on a machine without a
GPU its Triton kernels run only under Triton's interpreter, minutes per request. These
functions take the kernels' names and arguments, write their output tensor in place like
the kernels, and compute the same attention with plain torch in float32. Each is checked
against SGLang's own kernel, interpreted (tests/sglang_tier/test_cpu_attention.py).

A CPU test vehicle, not a fast path: exact softmax over gathered K/V, no split-KV, no
tiling beyond bounding the score matrix's memory. ``REPLACEMENTS`` maps each SGLang target
to its replacement, for installing with SGLang's HookRegistry REPLACE hooks; the backend
imports the kernels inside ``TritonAttnBackend.__init__``, so the hooks must be applied
before it is built. Importing this module does not import sglang.

Covered: MHA/GQA, extend with a prefix in the KV cache (causal or not), the target-verify
tree mask (FULL_MASK layout), decode, logit capping, attention sinks, xAI temperature, KV
descales. Not covered, rejected with NotImplementedError: sliding windows, score_mod,
4-D (paged-view) KV buffers. The decode kernel's split-KV scratch (attn_logits, attn_lse)
is left untouched: only context-parallel decode (DCP) reads it back.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

# float32 elements one score block may hold; extend splits its query rows to stay under
# it (a 9-head, 8k-token prefill would otherwise be 2.4 GB of scores)
_SCORE_BUDGET = 1 << 24


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
            score_scale, logit_cap: float, temperature: Optional[torch.Tensor],
            sinks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax attention in float32, in the kernels' order of operations:
    scale, cap, temperature, mask; a sink adds exp(sink - max) to the denominator only.

    q [B, M, H, D]; k [Hkv, B, S, D]; v [Hkv, B, S, Dv] (kv head first, so both matmuls
    batch over (Hkv, B) without copying K or V); allowed [B, M, S] bool; score_scale a
    float or [B, S] (per key column); temperature None or [B, M]; sinks None or [H].
    Returns out [B, M, H, Dv] (0 where a row sees no key) and lse [B, M, H] (natural
    log, -inf where a row sees no key).
    """
    bsz, m, h, d = q.shape
    hkv = k.shape[0]
    g = h // hkv
    # query head h reads kv head h // G, as the kernels' cur_head // kv_group_num
    q = q.float().reshape(bsz, m, hkv, g, d).permute(2, 0, 3, 1, 4).reshape(hkv, bsz, g * m, d)
    s = torch.matmul(q, k.float().transpose(-1, -2)).view(hkv, bsz, g, m, -1)  # [Hkv,B,G,M,S]
    s.mul_(score_scale[None, :, None, None, :] if isinstance(score_scale, torch.Tensor)
           else score_scale)
    if logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    if temperature is not None:
        s.mul_(temperature[None, :, None, :, None])
    s.masked_fill_(~allowed[None, :, None], float("-inf"))
    row_max = s.amax(-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = s.sub_(row_max).exp_()
    deno = p.sum(-1, keepdim=True)  # [Hkv, B, G, M, 1]
    if sinks is not None:
        deno = deno + torch.exp(sinks.float().view(hkv, 1, g, 1, 1) - row_max)
    out = torch.matmul(p.view(hkv, bsz, g * m, -1), v.float()).view(hkv, bsz, g, m, -1)
    out = out / torch.where(deno > 0, deno, torch.ones_like(deno))
    lse = torch.where(deno > 0, torch.log(deno) + row_max, torch.full_like(deno, float("-inf")))
    # [Hkv, B, G, M, *] -> [B, M, H, *]
    return (out.permute(1, 3, 0, 2, 4).reshape(bsz, m, h, -1),
            lse.permute(1, 3, 0, 2, 4).reshape(bsz, m, h))


def _xai_temperature(positions: torch.Tensor, xai_temperature_len: int) -> torch.Tensor:
    """The xAI query-position temperature: log2(pos) / log2(len) past len, else 1."""
    pos = positions.float()
    scaled = torch.log2(pos.clamp(min=1)) / math.log2(xai_temperature_len)
    return torch.where(positions > xai_temperature_len, scaled, torch.ones_like(pos))


def _gather(buf: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
    """Rows loc of a [slots, Hkv, D] buffer, kv head first: [Hkv, *loc.shape, D] float32.
    One index_select over (slot, head) rows lands them in that order with no copy after;
    buf[loc] and a permute would be several times slower on a CPU."""
    hkv = buf.shape[1]
    heads = torch.arange(hkv, device=loc.device).view(-1, *([1] * loc.dim()))
    flat = loc.long()[None] * hkv + heads  # [Hkv, *loc.shape]
    rows = buf.view(-1, buf.shape[-1]).index_select(0, flat.reshape(-1))
    return rows.view(hkv, *loc.shape, -1).float()


def _check_kv_buffer(*buffers: torch.Tensor) -> None:
    # With a [slots, heads, dim] buffer the kernels' paged address math reduces to
    # slot * stride(0) for every page size; a 4-D shared view has its own layout.
    for buf in buffers:
        if buf.ndim != 3:
            raise NotImplementedError(
                f"CPU attention reads [slots, heads, dim] KV buffers, got shape {tuple(buf.shape)}")


def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits,
                         attn_lse, num_kv_splits, max_kv_splits, sm_scale, k_scale, v_scale,
                         logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False,
                         use_pdl=False, page_size: int = 1, score_mod=None, aux_tensors=None,
                         enable_lean=None, lean_Mp=None, lean_Lp=None, lean_Op=None,
                         lean_locks=None, uneven_batch=None):
    """One query per row over its KV-cache slice (sglang.kernels.ops.attention.
    decode_attention.decode_attention_fwd).

    q [B, H, Dk]; k_buffer [slots, Hkv, Dk]; v_buffer [slots, Hkv, Dv]; o [B, H, Dv],
    written in place; row b attends to slots kv_indices[kv_indptr[b]:kv_indptr[b + 1]].
    The split-KV and Lean arguments only steer the GPU kernels' work split.
    """
    if score_mod is not None:
        raise NotImplementedError("CPU decode attention does not support score_mod")
    _check_kv_buffer(k_buffer, v_buffer)
    bsz = q.shape[0]
    if bsz == 0:
        return
    starts = kv_indptr[:bsz].long()
    lens = kv_indptr[1: bsz + 1].long() - starts  # [B]
    max_len = int(lens.max())
    cols = torch.arange(max_len, device=q.device)
    allowed = cols[None, :] < lens[:, None]  # [B, L]
    # padded columns read slot kv_indices[0]; the mask drops them
    loc = kv_indices[(starts[:, None] + cols[None, :]).masked_fill(~allowed, 0)]
    temperature = None
    if xai_temperature_len > 0:
        temperature = _xai_temperature(lens - 1, xai_temperature_len)[:, None]
    out, _ = _attend(q[:, None], _gather(k_buffer, loc), _gather(v_buffer, loc),
                     allowed[:, None, :], sm_scale * k_scale, logit_cap, temperature, sinks)
    o.copy_((out[:, 0] * v_scale).to(o.dtype))


def extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                         qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal,
                         mask_indptr, max_len_extend, k_scale, v_scale, sm_scale=None,
                         logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1,
                         sinks=None, window_kv_offsets=None, xai_temperature_len=-1,
                         lse_extend=None, skip_prefix=False, skip_extend=False,
                         page_size: int = 1, score_mod=None, aux_tensors=None,
                         extend_seq_lens_cpu=None, identity_kv_indices: bool = False):
    """New tokens over their prefix in the KV cache plus themselves (sglang.kernels.ops.
    attention.extend_attention.extend_attention_fwd): prefill, target verify, draft extend.

    q_extend [N, H, Dk]; k_extend [N, Hkv, Dk]; v_extend [N, Hkv, Dv]; o_extend [N, H, Dv],
    written in place. Request b's new tokens are rows qo_indptr[b]:qo_indptr[b + 1] (n of
    them), its prefix the p slots kv_indices[kv_indptr[b]:kv_indptr[b + 1]]. custom_mask,
    when given, is request b's [n, p + n] FULL_MASK block, row-major from mask_indptr[b];
    it replaces the causal mask over the new tokens, and over the prefix only when
    skip_prefix_custom_mask is False. Prefix scores take k_scale, prefix values v_scale.
    (The Triton kernel, when causal, also never visits keys past the query's BLOCK_M tile;
    a tree mask from SGLang's builder, parents before children, has none there.)
    """
    if score_mod is not None:
        raise NotImplementedError("CPU extend attention does not support score_mod")
    if sliding_window_size is not None and sliding_window_size > 0:
        raise NotImplementedError("CPU extend attention does not support sliding windows")
    _check_kv_buffer(k_buffer, v_buffer)
    sm_scale = sm_scale or 1.0 / (q_extend.shape[-1] ** 0.5)
    bsz = qo_indptr.shape[0] - 1
    qo = qo_indptr.tolist()
    kvp = kv_indptr[: bsz + 1].tolist()
    if custom_mask is not None:
        mp = mask_indptr[: bsz + 1].tolist()
        need = mp[bsz]
        if custom_mask.numel() < need:
            # a QLEN_ONLY mask ([n, n] per request) is shorter than the FULL_MASK layout
            raise ValueError(
                f"custom_mask has {custom_mask.numel()} entries, mask_indptr addresses "
                f"{need}: the Triton backend reads a FULL_MASK tree mask")
    device = q_extend.device
    h = q_extend.shape[1]
    for b in range(bsz):
        q0, q1 = qo[b], qo[b + 1]
        n, p = q1 - q0, kvp[b + 1] - kvp[b]
        if n == 0:
            continue
        rows = torch.arange(n, device=device)
        if custom_mask is not None:
            mask = (custom_mask[mp[b]: mp[b] + n * (p + n)] != 0).view(n, p + n)
            allowed_new = mask[:, p:]
            allowed_prefix = (torch.ones(n, p, dtype=torch.bool, device=device)
                              if skip_prefix_custom_mask else mask[:, :p])
        else:
            allowed_prefix = torch.ones(n, p, dtype=torch.bool, device=device)
            allowed_new = (rows[:, None] >= rows[None, :] if is_causal
                           else torch.ones(n, n, dtype=torch.bool, device=device))
        keys, values, allowed, scale = [], [], [], []
        if not skip_prefix and p > 0:
            loc = (torch.arange(kvp[b], kvp[b + 1], device=device) if identity_kv_indices
                   else kv_indices[kvp[b]: kvp[b + 1]])
            keys.append(_gather(k_buffer, loc))
            values.append(_gather(v_buffer, loc) * v_scale)
            allowed.append(allowed_prefix)
            scale.append(torch.full((p,), sm_scale * k_scale, device=device))
        if not skip_extend:
            keys.append(k_extend[q0:q1].transpose(0, 1).float())
            values.append(v_extend[q0:q1].transpose(0, 1).float())
            allowed.append(allowed_new)
            scale.append(torch.full((n,), sm_scale, device=device))
        if not keys:  # both stages skipped: the kernel's empty partial
            o_extend[q0:q1] = 0
            if lse_extend is not None:
                lse_extend[q0:q1] = float("-inf")
            continue
        k, v = torch.cat(keys, 1)[:, None], torch.cat(values, 1)[:, None]  # [Hkv, 1, S, D]
        allowed, scale = torch.cat(allowed, 1), torch.cat(scale)[None]
        temperature = (_xai_temperature(p + rows, xai_temperature_len)
                       if xai_temperature_len > 0 else None)
        step = max(1, _SCORE_BUDGET // (h * k.shape[2]))
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            out, lse = _attend(q_extend[q0 + r0: q0 + r1][None], k, v, allowed[None, r0:r1],
                               scale, logit_cap,
                               None if temperature is None else temperature[None, r0:r1],
                               sinks)
            o_extend[q0 + r0: q0 + r1] = out[0].to(o_extend.dtype)
            if lse_extend is not None:
                lse_extend[q0 + r0: q0 + r1] = lse[0].to(lse_extend.dtype)


REPLACEMENTS = {
    "sglang.kernels.ops.attention.decode_attention.decode_attention_fwd": decode_attention_fwd,
    "sglang.kernels.ops.attention.extend_attention.extend_attention_fwd": extend_attention_fwd,
}

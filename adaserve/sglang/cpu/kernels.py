"""Torch versions of the ``sgl_kernel`` CPU ops SGLang's CPU branches call.

SGLang 0.5.23 ships its CPU kernels in ``sgl_kernel``'s CPU build; the wheel installed
with it is the CUDA build, which does not import without a GPU. On a CPU SGLang's code
then takes branches (``if _is_cpu:``) that call these ops by name. Each function here has
the op's name and argument order, writes its outputs in place like the op, and is checked
against SGLang's own Triton kernel for the same job (tests/sglang_tier/test_cpu_kernels.py).
They are bookkeeping over index tensors, not model compute: clear, vectorized torch.

A test vehicle for the plugin, not a fast path (docs/sglang-cpu.md).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch


def _segments(start: torch.Tensor, end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(segment id, position) of every element of the ragged ranges [start_i, end_i),
    concatenated in request order -- the layout SGLang packs out_cache_loc in."""
    lens = (end - start).long()
    seg = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens)
    first = torch.cumsum(lens, 0) - lens  # where each segment starts in the packed list
    pos = start.long()[seg] + torch.arange(seg.numel(), device=lens.device) - first[seg]
    return seg, pos


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """req_to_token[req_pool_indices[i], start_i:end_i] = request i's slice of the packed
    out_cache_loc (mem_cache/allocation.py:assign_req_to_token_pool)."""
    seg, pos = _segments(start_offset, end_offset)
    req_to_token[req_pool_indices.long()[seg], pos] = \
        out_cache_loc[: seg.numel()].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """The reverse: out_cache_loc, packed by request, = req_to_token[req, start_i:end_i]
    (kernels/ops/speculative/cache_locs.py:assign_extend_cache_locs)."""
    seg, pos = _segments(start_offset, end_offset)
    out_cache_loc[: seg.numel()] = \
        req_to_token[req_pool_indices.long()[seg], pos].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices: torch.Tensor,
                                           req_to_token: torch.Tensor, seq_lens: torch.Tensor,
                                           out_cache_loc: torch.Tensor, pool_len: int,
                                           topk: int, num_cols: int) -> None:
    """Request i's topk * num_cols slots from seq_lens[i] on, into out_cache_loc row i
    (cache_locs.py:assign_draft_cache_locs_contiguous)."""
    n = topk * num_cols
    cols = seq_lens.long()[:, None] + torch.arange(n, device=seq_lens.device)[None, :]
    rows = req_pool_indices.long()[:, None].expand_as(cols)
    out_cache_loc[: cols.numel()] = req_to_token[rows, cols].flatten().to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens: torch.Tensor, accept_lens: torch.Tensor,
                          bonus_tokens: torch.Tensor, accept_stride: int) -> None:
    """bonus_tokens[i] = request i's last accepted token (speculative/eagle.py)."""
    at = torch.arange(accept_lens.numel(), device=accept_lens.device) * accept_stride
    bonus_tokens.copy_(accept_tokens.flatten()[at + accept_lens.long() - 1])


def fill_accept_out_cache_loc_cpu(accept_index: torch.Tensor, out_cache_loc: torch.Tensor,
                                  accept_out_cache_loc: torch.Tensor) -> None:
    """The KV slots of the accepted positions (accept_index != -1), compacted in order."""
    idx = accept_index.flatten()
    idx = idx[idx != -1].long()
    accept_out_cache_loc[: idx.numel()] = out_cache_loc[idx].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor,
                                tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """In every KV buffer (one per layer, k and v; given by raw address and row stride in
    bytes), row tgt_loc[j] = row src_loc[j]. All source rows are read before any target is
    written, as the Triton kernel's tile does: moves may overlap (tgt of one = src of
    another) after speculative acceptance compacts a request's KV."""
    if tgt_loc.numel() == 0:
        return
    src = src_loc.long().cpu().numpy()
    tgt = tgt_loc.long().cpu().numpy()
    rows = int(max(src.max(), tgt.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(int(ptr))
        buf = np.frombuffer(raw, np.uint8).reshape(rows, stride)
        buf[tgt] = buf[src]  # fancy indexing copies the sources first


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
                                    positions, retrieve_index, retrieve_next_token,
                                    retrieve_next_sibling, topk, depth, draft_token_num,
                                    tree_mask_mode) -> None:
    """SGLang's own Triton version of the tree build (its XPU branch), under Triton's
    interpreter on a CPU: one program per request over a handful of positions."""
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    sgl_build_tree_kernel_triton(parent_list, selected_index, verified_seq_len, tree_mask,
                                 positions, retrieve_index, retrieve_next_token,
                                 retrieve_next_sibling, topk, depth, draft_token_num,
                                 tree_mask_mode)


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """Greedy tree verification: SGLang's Triton version (its XPU branch), interpreted.
    The op's keyword names (``retrive_*``, sic) are SGLang's call site's."""
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    verify_tree_greedy_triton(predicts=predicts, accept_index=accept_index,
                              accept_token_num=accept_token_num, candidates=candidates,
                              retrieve_index=retrive_index,
                              retrieve_next_token=retrive_next_token,
                              retrieve_next_sibling=retrive_next_sibling,
                              target_predict=target_predict)


OPS = {f.__name__: f for f in (
    assign_req_to_token_pool_cpu, assign_extend_cache_locs_cpu,
    assign_draft_cache_locs_contiguous_cpu, fill_bonus_tokens_cpu,
    fill_accept_out_cache_loc_cpu, copy_all_layer_kv_cache_cpu,
    build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu)}

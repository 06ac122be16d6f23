"""adaserve.sglang.cpu.attention computes what SGLang's Triton attention kernels compute:
each case runs SGLang's own kernel (interpreted on the CPU, see conftest.py) and ours on
the same random KV pool, ragged batch and, for target verify, a tree mask from SGLang's
own draft layout and tree builder. Small shapes: the interpreter is slow."""

from __future__ import annotations

import inspect
import pkgutil
import subprocess
import sys

import pytest
import torch
from drafts import random_draft
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd as sgl_decode
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd as sgl_extend
from sglang.kernels.ops.speculative import spec_tree
from sglang.srt.speculative.eagle_utils import organize_draft_results

from adaserve.sglang.cpu import attention
from adaserve.sglang.cpu.attention import REPLACEMENTS, decode_attention_fwd, extend_attention_fwd

SLOTS, D = 160, 64
TOL = dict(atol=5e-6, rtol=1e-5)


def indptr(lens, dtype=torch.int32) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=dtype)
    out[1:] = torch.cumsum(torch.as_tensor(lens), 0)
    return out


def kv_pool(gen, hkv):
    """Random K/V buffers and a shuffled slot order (a request's slots are not contiguous)."""
    return (torch.randn(SLOTS, hkv, D, generator=gen), torch.randn(SLOTS, hkv, D, generator=gen),
            torch.randperm(SLOTS, generator=gen))


def test_replacements_name_sglang_kernels_with_the_same_signatures():
    for target, ours in REPLACEMENTS.items():
        theirs = inspect.signature(pkgutil.resolve_name(target)).parameters
        mine = inspect.signature(ours).parameters
        assert [(p.name, p.default) for p in mine.values()] == \
            [(p.name, p.default) for p in theirs.values()], target


def test_importing_does_not_import_sglang():
    code = ("import sys, adaserve.sglang.cpu.attention; "
            "print(any(m.split('.')[0] == 'sglang' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


DECODE_CASES = {
    "gqa": dict(heads=(9, 3), lens=[1, 33, 70]),
    "mha": dict(heads=(4, 4), lens=[7, 64]),
    "draft-rows": dict(heads=(9, 3), lens=[3, 3, 12, 12, 5, 5]),
    "cap-sinks-scales-xai": dict(heads=(9, 3), lens=[20, 47], sm_scale=0.5, logit_cap=3.0,
                                 k_scale=0.7, v_scale=1.5, sinks=True, xai_temperature_len=16),
}


@pytest.mark.parametrize("case", DECODE_CASES, ids=str)
def test_decode_matches_triton(case):
    c = dict(DECODE_CASES[case])
    gen = torch.Generator().manual_seed(len(case))
    (h, hkv), lens = c.pop("heads"), c.pop("lens")
    k_buf, v_buf, perm = kv_pool(gen, hkv)
    bs, max_splits = len(lens), 4
    kv_indices = perm[: sum(lens)]
    q = torch.randn(bs, h, D, generator=gen)
    sinks = torch.randn(h, generator=gen) if c.pop("sinks", False) else None
    sm_scale = c.pop("sm_scale", D ** -0.5)
    k_scale, v_scale = c.pop("k_scale", 1.0), c.pop("v_scale", 1.0)
    outs = []
    for fn in (sgl_decode, decode_attention_fwd):
        o = torch.full((bs, h, D), float("nan"))
        fn(q, k_buf, v_buf, o, indptr(lens), kv_indices,
           torch.empty(bs, h, max_splits, D), torch.empty(bs, h, max_splits),
           torch.randint(1, max_splits + 1, (bs,), generator=gen, dtype=torch.int32),
           max_splits, sm_scale, k_scale, v_scale, sinks=sinks, **c)
        outs.append(o)
    torch.testing.assert_close(outs[1], outs[0], **TOL)


def run_extend(gen, prefix, new, *, heads=(9, 3), custom_mask=None, mask_indptr=None,
               is_causal=True, lse=False, sinks=False, **kw):
    """SGLang's extend kernel and ours on one random ragged batch: ((o, lse) theirs, ours)."""
    h, hkv = heads
    k_buf, v_buf, perm = kv_pool(gen, hkv)
    n = sum(new)
    q, k, v = (torch.randn(n, x, D, generator=gen) for x in (h, hkv, hkv))
    args = (k_buf, v_buf, indptr(new, torch.int64), indptr(prefix), perm[: sum(prefix)],
            custom_mask, is_causal, mask_indptr, max(new), kw.pop("k_scale", 1.0),
            kw.pop("v_scale", 1.0))
    sinks = torch.randn(h, generator=gen) if sinks else None
    results = []
    for fn in (sgl_extend, extend_attention_fwd):
        o = torch.full((n, h, D), float("nan"))
        lse_out = torch.full((n, h), float("nan")) if lse else None
        fn(q, k, v, o, *args, sinks=sinks, lse_extend=lse_out, **kw)
        results.append((o, lse_out))
    return results


EXTEND_CASES = {
    "prefill": dict(prefix=[0, 0], new=[5, 12]),
    "prefix": dict(prefix=[3, 0, 40], new=[4, 9, 6]),
    "mha": dict(prefix=[17], new=[8], heads=(4, 4)),
    "not-causal": dict(prefix=[6, 11], new=[7, 3], is_causal=False),
    "draft-extend": dict(prefix=[10, 25, 4], new=[4, 4, 4]),
    "identity-kv": dict(prefix=[5, 9], new=[3, 2], identity_kv_indices=True),
    "cap-sinks-scales-xai-lse": dict(prefix=[12, 30], new=[5, 7], sm_scale=0.5, logit_cap=3.0,
                                     k_scale=0.7, v_scale=1.5, sinks=True, lse=True,
                                     xai_temperature_len=16),
}


@pytest.mark.parametrize("case", EXTEND_CASES, ids=str)
def test_extend_matches_triton(case):
    (o_ref, lse_ref), (o, lse) = run_extend(torch.Generator().manual_seed(len(case)),
                                            **EXTEND_CASES[case])
    torch.testing.assert_close(o, o_ref, **TOL)
    if lse_ref is not None:
        torch.testing.assert_close(lse, lse_ref, **TOL)


def sglang_tree_mask(gen, seq_lens, topk, steps, n):
    """The FULL_MASK tree mask SGLang builds for target verify: its draft layout
    (organize_draft_results) through its tree builder, prefix columns all True."""
    bs = len(seq_lens)
    score_list, token_list, parents_list = random_draft(bs, topk, steps, gen=gen)
    parent_list, top_scores_index, _ = organize_draft_results(score_list, token_list,
                                                              parents_list, n)
    seq_lens = torch.tensor(seq_lens)
    mask = torch.full((int(seq_lens.sum()) * n + n * n * bs,), True)
    positions = torch.empty(bs * n, dtype=torch.long)
    index, next_token, next_sibling = torch.full((3, bs, n), -1, dtype=torch.long)
    spec_tree.sgl_build_tree_kernel_triton(
        parent_list, top_scores_index, seq_lens, mask, positions, index, next_token,
        next_sibling, topk, steps, n, spec_tree.TreeMaskMode.FULL_MASK)
    return mask, indptr([n * (s + n) for s in seq_lens.tolist()], torch.int64)


VERIFY_CASES = [  # seq_lens, topk, steps, num_draft_tokens
    ([9], 2, 3, 6),
    ([4, 30, 13], 3, 3, 8),
    ([21, 2], 4, 2, 5),
    ([15, 6], 1, 4, 5),  # a chain: the tree mask is the causal mask
]


@pytest.mark.parametrize("seq_lens, topk, steps, n", VERIFY_CASES)
def test_target_verify_tree_mask_matches_triton(seq_lens, topk, steps, n):
    gen = torch.Generator().manual_seed(sum(seq_lens) + topk)
    mask, mask_indptr = sglang_tree_mask(gen, seq_lens, topk, steps, n)
    tree = mask[seq_lens[0]: seq_lens[0] + n]  # request 0, draft row 0's tree columns
    blocks = [mask[int(a):int(b)].view(n, -1)[:, -n:]
              for a, b in zip(mask_indptr, mask_indptr[1:])]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    if topk > 1:  # otherwise the case could not tell a tree mask from causal attention
        assert any(not torch.equal(blk, causal) for blk in blocks)
    assert tree[0] and not tree[1:].any()
    (o_ref, _), (o, _) = run_extend(gen, seq_lens, [n] * len(seq_lens), custom_mask=mask,
                                    mask_indptr=mask_indptr)
    torch.testing.assert_close(o, o_ref, **TOL)


def test_prefix_custom_mask_when_not_skipped_matches_triton():
    gen = torch.Generator().manual_seed(7)
    prefix, new = [6, 10], [4, 3]
    mask = torch.rand(sum(n * (p + n) for p, n in zip(prefix, new)), generator=gen) < 0.6
    mask_indptr = indptr([n * (p + n) for p, n in zip(prefix, new)], torch.int64)
    (o_ref, _), (o, _) = run_extend(gen, prefix, new, custom_mask=mask, mask_indptr=mask_indptr,
                                    skip_prefix_custom_mask=False)
    # rows the random mask left without any key: SGLang writes 0 there, so do we
    torch.testing.assert_close(o, o_ref, **TOL)


def test_extend_row_blocks_do_not_change_the_result(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    k_buf, v_buf, perm = kv_pool(gen, 3)
    prefix, new = [20, 7], [30, 9]
    q, k, v = (torch.randn(sum(new), x, D, generator=gen) for x in (9, 3, 3))
    outs = []
    for budget in (attention._SCORE_BUDGET, 9 * 40 * 4):  # one block, then 4-row blocks
        monkeypatch.setattr(attention, "_SCORE_BUDGET", budget)
        o = torch.empty(sum(new), 9, D)
        extend_attention_fwd(q, k, v, o, k_buf, v_buf, indptr(new, torch.int64), indptr(prefix),
                             perm[: sum(prefix)], None, True, None, max(new), 1.0, 1.0)
        outs.append(o)
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=1e-6)


def test_unsupported_arguments_fail_loudly():
    gen = torch.Generator().manual_seed(0)
    k_buf, v_buf, perm = kv_pool(gen, 3)
    q, k, v = torch.randn(4, 9, D), torch.randn(4, 3, D), torch.randn(4, 3, D)
    o = torch.empty(4, 9, D)
    args = (q, k, v, o, k_buf, v_buf, indptr([4], torch.int64), indptr([5]), perm[:5])
    with pytest.raises(NotImplementedError, match="sliding"):
        extend_attention_fwd(*args, None, True, None, 4, 1.0, 1.0, sliding_window_size=8)
    with pytest.raises(NotImplementedError, match="score_mod"):
        extend_attention_fwd(*args, None, True, None, 4, 1.0, 1.0, score_mod=object())
    with pytest.raises(NotImplementedError, match="score_mod"):
        decode_attention_fwd(q, k_buf, v_buf, o, indptr([5] * 4), perm[:20], None, None, None,
                             4, 0.125, 1.0, 1.0, score_mod=object())
    qlen_only = torch.ones(4 * 4, dtype=torch.bool)  # [n, n]: no prefix columns
    with pytest.raises(ValueError, match="FULL_MASK"):
        extend_attention_fwd(*args, qlen_only, True, indptr([4 * 9], torch.int64), 4, 1.0, 1.0)

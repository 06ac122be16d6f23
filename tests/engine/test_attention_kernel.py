"""The compiled tree attention (torch.ops.adaserve.tree_attention) against plain softmax
attention with the explicit mask: random trees over random per-request prefixes, batch 1-8,
1-16 query tokens, split-K over long prefixes, and against SDPA as the model calls it on a
`tree_batch` mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adaserve.engine import kernels
from adaserve.engine.batch import tree_batch
from adaserve.engine.kv_cache import KVCache

pytestmark = pytest.mark.skipif(not kernels.load().available,
                                reason=f"fast kernels unavailable: {kernels.load().reason}")

H, HKV, D = 9, 3, 64  # SmolLM2-135M's heads


def random_tree(q: int, g: torch.Generator) -> torch.Tensor:
    """[q, q] ancestor matrix (self included) of a random tree: node j's parent is a random
    earlier node, node 0 the root."""
    anc = torch.eye(q, dtype=torch.bool)
    for j in range(1, q):
        parent = int(torch.randint(0, j, (), generator=g))
        anc[j] |= anc[parent]
    return anc


def reference(q, k, v, slots, prefix, tree):
    """Softmax attention in float64 with the explicit [Q, T] mask of each request: the
    prefix seen by every query, then the tree's own columns; a row seeing nothing reads 0."""
    n, nq, h, d = q.shape
    w = tree.shape[2]
    out = torch.zeros(n, nq, h * d, dtype=torch.float64)
    for i in range(n):
        p = int(prefix[i])
        vis = torch.cat([torch.ones(nq, p, dtype=torch.bool), tree[i]], dim=1)  # [Q, T]
        kk = k[slots[i], :, : p + w].double().repeat_interleave(h // k.shape[1], 0)  # [H, T, D]
        vv = v[slots[i], :, : p + w].double().repeat_interleave(h // k.shape[1], 0)
        s = torch.einsum("qhd,htd->hqt", q[i].double(), kk) / d ** 0.5
        prob = torch.softmax(s.masked_fill(~vis, float("-inf")), -1).nan_to_num(0.0)
        out[i] = torch.einsum("hqt,htd->qhd", prob, vv).reshape(nq, h * d)
    return out


def _case(seed: int, n: int, nq: int, max_prefix: int, extra: int = 0):
    """Queries as the model hands them (a strided view of a fused qkv row), a cache with
    more slots than requests, requests in shuffled slots, random prefix lengths."""
    g = torch.Generator().manual_seed(seed)
    w = nq + extra  # draft beam steps: more tree columns than queries
    cols = max_prefix + w + 1
    k = torch.randn(n + 2, HKV, cols, D, generator=g)
    v = torch.randn(n + 2, HKV, cols, D, generator=g)
    qkv = torch.randn(n, nq, H + 2 * HKV, D, generator=g)
    slots = torch.randperm(n + 2, generator=g)[:n]
    prefix = torch.randint(0, max_prefix + 1, (n,), generator=g)
    tree = torch.zeros(n, nq, w, dtype=torch.bool)
    for i in range(n):
        anc = random_tree(w, g)
        tree[i] = anc[w - nq:]  # the newest nodes query, seeing their ancestors
    return qkv[:, :, :H], k, v, slots, prefix, tree


@pytest.mark.parametrize("seed", range(12))
def test_random_trees_and_prefixes_match_the_reference(seed):
    g = torch.Generator().manual_seed(1000 + seed)
    n = int(torch.randint(1, 9, (), generator=g))
    nq = int(torch.randint(1, 17, (), generator=g))
    q, k, v, slots, prefix, tree = _case(seed, n, nq, max_prefix=300, extra=seed % 3)
    prefix[0] = 0 if seed % 2 else 1  # no prefix, and one column of it
    out = torch.ops.adaserve.tree_attention(q, k, v, slots, prefix, tree)
    assert out.shape == (n, nq, H * D) and out.is_contiguous()
    assert (out.double() - reference(q, k, v, slots, prefix, tree)).abs().max().item() < 1e-5


@pytest.mark.parametrize("n,nq,prefix", [(1, 1, 0), (1, 1, 63), (1, 1, 64), (1, 1, 65),
                                         (1, 16, 2500), (2, 8, 1027), (8, 4, 129), (3, 1, 7)])
def test_edge_lengths_and_split_k(n, nq, prefix):
    """One query token, prefixes at and around the 64-column block, and long prefixes that
    are split over several units (at batch 1 2500 columns make ~10) and merged."""
    q, k, v, slots, _, tree = _case(n * 100 + nq, n, nq, max_prefix=prefix)
    pre = torch.full((n,), prefix, dtype=torch.int64)
    pre[-1] = max(prefix - 5, 0)  # and one shorter request in the same batch
    out = torch.ops.adaserve.tree_attention(q, k, v, slots, pre, tree)
    assert (out.double() - reference(q, k, v, slots, pre, tree)).abs().max().item() < 1e-5


def test_a_row_that_sees_nothing_reads_zeros():
    q, k, v, slots, _, tree = _case(7, 2, 3, max_prefix=0)
    tree[1, 2] = False
    out = torch.ops.adaserve.tree_attention(q, k, v, slots, torch.zeros(2, dtype=torch.int64),
                                            tree)
    assert torch.equal(out[1, 2], torch.zeros(H * D))
    assert torch.isfinite(out).all() and out[1, 1].abs().sum() > 0


def test_equals_sdpa_on_a_tree_batch():
    """The kernel reads a `tree_batch`'s prefix_len and tree_mask; SDPA reads its full mask,
    as the model calls both: the valid queries' outputs agree (padded queries differ: SDPA
    shows them column 0, the kernel the prefix; no valid row reads them)."""
    g = torch.Generator().manual_seed(3)
    n, nq = 4, 7
    kv = KVCache(1, n + 1, HKV, D, 600)
    kv.k.normal_(generator=g)
    kv.v.normal_(generator=g)
    col_base = torch.tensor([512, 3, 0, 130])
    anc = torch.stack([random_tree(nq, g) for _ in range(n)])
    valid = torch.ones(n, nq, dtype=torch.bool)
    valid[2, 5:] = False
    valid[3, 1:] = False
    idx = torch.arange(nq)[None].expand(n, nq)
    slots = torch.tensor([3, 0, 4, 1])
    fb = tree_batch(slots, col_base, col_base, torch.zeros(n, nq, dtype=torch.int64), idx, idx,
                    anc, valid, kv.trash_col)
    q = torch.randn(n, nq, H, D, generator=g)
    kc, vc = kv.k[0], kv.v[0]
    ours = torch.ops.adaserve.tree_attention(q, kc, vc, slots, fb.prefix_len, fb.tree_mask)
    mask = torch.zeros(fb.mask.shape).masked_fill_(~fb.mask, float("-inf"))
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), kc[slots, :, :fb.kv_len],
                                         vc[slots, :, :fb.kv_len], attn_mask=mask,
                                         enable_gqa=True).transpose(1, 2).reshape(n, nq, H * D)
    assert (ours - ref)[valid].abs().max().item() < 1e-5


def test_refuses_what_it_cannot_take():
    q, k, v, slots, prefix, tree = _case(1, 2, 2, max_prefix=10)
    op = torch.ops.adaserve.tree_attention
    with pytest.raises(RuntimeError, match="float32 only"):
        op(q.double(), k.double(), v.double(), slots, prefix, tree)
    with pytest.raises(RuntimeError, match="exceed"):
        op(q, k, v, slots, prefix + k.shape[2], tree)
    with pytest.raises(RuntimeError, match="out of range"):
        op(q, k, v, slots + 100, prefix, tree)
    with pytest.raises(RuntimeError, match="groups"):
        op(q[:, :, :8], k, v, slots, prefix, tree)
    with pytest.raises(RuntimeError, match="tree is"):
        op(q, k, v, slots, prefix, tree[:, :1])


wide = pytest.mark.skipif(not (kernels.load().available and torch.ops.adaserve.avx512()),
                          reason="this CPU does not run AVX-512")


@wide
@pytest.mark.parametrize("seed", range(10))
def test_the_avx512_unit_matches_the_reference_and_the_avx2_unit(seed):
    """Verify shapes (2-32 query tokens: 6-96 rows, 1-6 vectors of 16 lanes a column or 1-12
    of 8 a column pair) on random trees and prefixes, past a block's end and split over
    several units: both units match the float64 reference, and each other."""
    g = torch.Generator().manual_seed(2000 + seed)
    n = int(torch.randint(1, 9, (), generator=g))
    nq = [2, 5, 6, 8, 11, 16, 21, 27, 32, 3][seed]
    q, k, v, slots, prefix, tree = _case(seed, n, nq, max_prefix=[0, 64, 300, 700, 2500][seed % 5],
                                         extra=seed % 3)
    ref = reference(q, k, v, slots, prefix, tree)
    avx2 = torch.ops.adaserve.tree_attention(q, k, v, slots, prefix, tree, 0)
    wide_ = torch.ops.adaserve.tree_attention(q, k, v, slots, prefix, tree, 1)
    assert (wide_.double() - ref).abs().max().item() < 1e-5
    assert (avx2.double() - ref).abs().max().item() < 1e-5
    assert (wide_ - avx2).abs().max().item() < 1e-5


@wide
@pytest.mark.parametrize("nq", [4, 8])  # 12 rows: one vector a column; 24: 3 a column pair
def test_the_avx512_unit_reads_zeros_where_a_row_sees_nothing(nq):
    q, k, v, slots, _, tree = _case(7, 2, nq, max_prefix=0)
    tree[1, 2] = False
    out = torch.ops.adaserve.tree_attention(q, k, v, slots, torch.zeros(2, dtype=torch.int64),
                                            tree, 1)
    assert torch.equal(out[1, 2], torch.zeros(H * D))
    assert torch.isfinite(out).all() and out[1, 1].abs().sum() > 0


@wide
@pytest.mark.parametrize("nq,prefix", [(8, 0), (8, 1), (8, 55), (8, 56), (8, 57), (2, 63),
                                       (7, 121), (11, 300)])
def test_the_paired_columns_take_odd_counts_and_block_edges(nq, prefix):
    """Where M rows fill fewer vectors with the columns paired (6, 21, 24, 33 rows), the
    unit interleaves each block's keys by pairs: an odd column count (a missing last
    column), a tree that starts mid-pair, and runs ending one short of, at, and one past a
    block's end all match the reference and the AVX2 unit."""
    q, k, v, slots, _, tree = _case(prefix, 3, nq, max_prefix=prefix)
    at = torch.full((3,), prefix, dtype=torch.int64)
    ref = reference(q, k, v, slots, at, tree)
    wide_ = torch.ops.adaserve.tree_attention(q, k, v, slots, at, tree, 1)
    avx2 = torch.ops.adaserve.tree_attention(q, k, v, slots, at, tree, 0)
    assert (wide_.double() - ref).abs().max().item() < 1e-5
    assert (wide_ - avx2).abs().max().item() < 1e-5


def test_the_isa_argument_is_checked():
    q, k, v, slots, prefix, tree = _case(1, 2, 4, max_prefix=10)
    op = torch.ops.adaserve.tree_attention
    with pytest.raises(RuntimeError, match="isa is -1"):
        op(q, k, v, slots, prefix, tree, 2)
    if not torch.ops.adaserve.avx512():
        with pytest.raises(RuntimeError, match="does not run"):
            op(q, k, v, slots, prefix, tree, 1)
    else:  # a head_dim the unit does not take is refused, not run on AVX2 behind the caller
        q8, k8, v8 = q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous()
        with pytest.raises(RuntimeError, match="head_dim 64"):
            op(q8, k8, v8, slots, prefix, tree, 1)
    # the default and AVX2 agree with the reference whichever unit the default takes
    ref = reference(q, k, v, slots, prefix, tree)
    for isa in (-1, 0):
        assert (op(q, k, v, slots, prefix, tree, isa).double() - ref).abs().max().item() < 1e-5

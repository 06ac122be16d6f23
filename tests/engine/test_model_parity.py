"""Our Llama forward against transformers' implementation of the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adaserve.engine.batch import chunk_batch, tree_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.verify import pack
from adaserve.scheduler import CandidateBatch

TOL = 1e-4


@pytest.fixture(scope="module")
def hf_model(smollm):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(smollm.path), dtype=torch.float32).eval()


def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


def test_prefill_logits_match_transformers(smollm, tokenizer, hf_model):
    m = smollm.target
    prompts = ["The capital of France is Paris, and the capital of Germany is",
               "def add(a, b):\n    return"]
    kv = KVCache(m.n_layers, 2, m.cfg.kv_heads, m.cfg.head_dim, 64)
    ids = [tokenizer.encode(p) for p in prompts]
    # two requests of different lengths in one padded, chunked forward
    fb = chunk_batch(slice(0, 2), torch.tensor([0, 0]), ids, kv.trash_col, "all")
    ours = m(kv, fb).view(2, -1, m.cfg.vocab)
    for i, x in enumerate(ids):
        ref = _hf_logits(hf_model, x)
        assert (ours[i, : len(x)] - ref).abs().max().item() < TOL


def test_chunked_prefill_equals_one_shot(smollm, tokenizer, hf_model):
    """Prefill in three chunks through the cache: the last chunk's logits match."""
    m = smollm.target
    ids = tokenizer.encode("Chunked prefill must see every earlier chunk through the cache, "
                           "so the logits at the end match a single forward pass.")
    kv = KVCache(m.n_layers, 1, m.cfg.kv_heads, m.cfg.head_dim, 64)
    cuts = [0, 7, 15, len(ids)]
    for a, b in zip(cuts, cuts[1:]):
        fb = chunk_batch(torch.tensor([0]), torch.tensor([a]), [ids[a:b]], kv.trash_col, "all")
        last = m(kv, fb)
    ref = _hf_logits(hf_model, ids)[cuts[-2]:]
    assert (last - ref).abs().max().item() < TOL


def test_tree_verification_logits_equal_sequential_decoding(smollm, tokenizer, hf_model):
    """Every node of a packed tree (two requests, different prefixes) gets the logits of
    decoding its root-to-node path after the prefix."""
    m = smollm.target
    rng = np.random.default_rng(0)
    prefixes = [tokenizer.encode("The weather today is"), tokenizer.encode("1, 2, 3, 4,")]
    # tree shape: 0 -> 1, 2; 1 -> 3, 4; 2 -> 5; 4 -> 6   (node 0 = the root token)
    parent = np.array([[-1, 0, 0, 1, 1, 2, 4]] * 2)
    depth = np.array([[0, 1, 1, 2, 2, 2, 3]] * 2)
    token = rng.integers(100, 20000, size=parent.shape)
    token[:, 0] = [p[-1] for p in prefixes]
    cands = CandidateBatch(parent, token, -depth.astype(float), depth, np.array([7, 7]))
    mask = np.ones_like(parent, dtype=bool)
    mask[1, 6] = False  # the second request verifies a sub-tree
    p = pack(cands, mask)
    kv = KVCache(m.n_layers, 2, m.cfg.kv_heads, m.cfg.head_dim, 64)
    starts = torch.tensor([0, 0])
    m(kv, chunk_batch(slice(0, 2), starts, [x[:-1] for x in prefixes], kv.trash_col, "none"))
    base = torch.tensor([len(x) - 1 for x in prefixes])
    q = p.valid.shape[1]
    fb = tree_batch(slice(0, 2), base, base, torch.from_numpy(p.token), torch.from_numpy(p.depth),
                    torch.arange(q)[None].expand(2, q), torch.from_numpy(p.ancestors),
                    torch.from_numpy(p.valid), kv.trash_col)
    logits = m(kv, fb).view(2, q, -1)
    checked = 0
    for i in range(2):
        for a in range(q):
            if not p.valid[i, a]:
                continue
            path, b = [], a
            while b >= 0:
                path.append(int(p.token[i, b]))
                b = int(p.parent[i, b])
            seq = prefixes[i][:-1] + path[::-1]
            ref = _hf_logits(hf_model, seq)[-1]
            assert (logits[i, a] - ref).abs().max().item() < TOL
            checked += 1
    assert checked == 13


def test_row_padding_changes_no_logit(smollm, tokenizer, hf_model):
    """Matmul rows padded up to a bucket (1 -> 2, 3 -> 4, 9 -> 16) are cut off again: the
    logits of 1, 3 and 9 decoded tokens match transformers with and without padding."""
    from adaserve.engine.model import ROW_BUCKETS, padded_rows

    assert [padded_rows(m) for m in (1, 2, 3, 9, 17, 33, 128)] == [2, 2, 4, 16, 24, 33, 128]
    m = smollm.target
    ids = tokenizer.encode("Padding rows must never leak into the rows that were asked for.")
    ref = _hf_logits(hf_model, ids)
    kv = KVCache(m.n_layers, 1, m.cfg.kv_heads, m.cfg.head_dim, 64)
    try:
        for buckets in ((), ROW_BUCKETS):
            m.row_buckets = buckets
            for q in (1, 3, 9):
                a = len(ids) - q
                fb = chunk_batch(torch.tensor([0]), torch.tensor([0]), [ids[:a]], kv.trash_col,
                                 "none")
                m(kv, fb)
                fb = chunk_batch(torch.tensor([0]), torch.tensor([a]), [ids[a:]], kv.trash_col,
                                 "all")
                assert (m(kv, fb) - ref[a:]).abs().max().item() < TOL, (buckets, q)
    finally:
        m.row_buckets = ROW_BUCKETS

"""Compacted (ragged) verify trees against SGLang's own: its tree builder's FULL_MASK and
links over the uniform [bs, N] layout (Triton, interpreted), its greedy tree verification
kernel, on random drafts selected by the scheduler under budgets below the layout.

What must hold for the ragged verify to be the uniform one minus the unselected positions:
- each request's compacted mask block is SGLang's block restricted to its kept positions,
  in compacted order (same attention for every verified token);
- greedy verification over the compacted padded layout accepts the same tokens as over
  the uniform layout with the unselected positions unlinked, whatever the target predicts;
- the batch verifies sum(keep) tokens, at most the budget, and the ragged rows address
  exactly the kept positions' slots in the verify window."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from drafts import random_draft
from sglang.kernels.ops.speculative import spec_tree
from test_links import children, sglang_verify

from adaserve.scheduler import BatchView, SchedulerConfig, SpecPlan, make_policy
from adaserve.sglang.compact import compact
from adaserve.sglang.links import unlink
from adaserve.sglang.select import organize


def sglang_tree(parent_list, top_scores_index, seq_lens, topk, steps, n):
    """SGLang's FULL_MASK tree mask, positions and links for the uniform layout."""
    bs = seq_lens.numel()
    mask = torch.full((int(seq_lens.sum()) * n + n * n * bs,), True)
    positions = torch.empty(bs * n, dtype=torch.long)
    index, next_token, next_sibling = torch.full((3, bs, n), -1, dtype=torch.long)
    spec_tree.sgl_build_tree_kernel_triton(
        parent_list, top_scores_index, seq_lens, mask, positions, index, next_token,
        next_sibling, topk, steps, n, spec_tree.TreeMaskMode.FULL_MASK)
    return mask, positions, index, next_token, next_sibling


def blocks(mask, seq_lens, lens):
    """A FULL_MASK laid out request by request as [L_b, s_b + L_b] blocks."""
    out, at = [], 0
    for s, length in zip(seq_lens.tolist(), lens):
        size = length * (s + length)
        out.append(mask[at: at + size].view(length, s + length))
        at += size
    assert at == mask.numel()
    return out


def case(seed):
    gen = torch.Generator().manual_seed(500 + seed)
    rng = np.random.default_rng(seed)
    bs, topk, steps = int(rng.integers(1, 6)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
    n = min(int(rng.integers(3, 10)), topk + (steps - 1) * topk * topk + 1)
    lists = random_draft(bs, topk, steps, gen=gen)
    roots = torch.randint(0, 40, (bs,), generator=gen)
    view = BatchView(tuple(range(bs)), rng.choice([np.nan, 0.02, 0.2], bs),
                     rng.uniform(0, 2, bs), rng.integers(0, 40, bs), np.full(bs, 50))
    budget = int(rng.integers(bs, bs * n + 1))
    policy = make_policy("adaserve", SchedulerConfig(budget=budget, max_depth=steps,
                                                     max_width=topk))
    o = organize(*lists, n, roots, policy, view, SpecPlan(depth=steps, width=topk,
                                                          t_spec_s=0.03))
    seq_lens = torch.tensor(rng.integers(3, 30, bs))
    mask, positions, index, nt, ns = sglang_tree(o.parent_list, o.top_scores_index, seq_lens,
                                                 topk, steps, n)
    draft = torch.cat([roots[:, None], o.draft_tokens], 1).flatten()
    window = torch.arange(bs * n) + 1000  # stand-in KV slots, distinct
    trees = compact(o.keep, o.parent, nt, ns, draft, positions, seq_lens, window)
    return bs, n, steps, budget, o, seq_lens, mask, positions, index, nt, ns, draft, trees, gen


@pytest.mark.parametrize("seed", range(12))
def test_compacted_trees_are_sglangs_restricted_to_the_kept_positions(seed):
    bs, n, steps, budget, o, seq_lens, mask, positions, index, nt, ns, draft, trees, gen = \
        case(seed)
    keep = o.keep
    lens = keep.sum(1).tolist()
    assert trees.lens.tolist() == lens
    assert trees.total == int(keep.sum()) <= max(budget, bs)  # the budget bounds verify
    theirs = blocks(mask, seq_lens, [n] * bs)
    ours = blocks(trees.custom_mask, seq_lens, lens)
    for b in range(bs):
        kept = torch.nonzero(keep[b]).flatten()  # ascending: the compacted order
        assert trees.order[b, : lens[b]].tolist() == kept.tolist()
        s = int(seq_lens[b])
        cols = torch.cat([torch.arange(s), s + kept])
        assert torch.equal(ours[b], theirs[b][kept][:, cols]), b
        # the ragged view: kept tokens, their depths, the first L_b window slots
        j = torch.arange(lens[b])
        rows = b * n + j
        assert torch.equal(trees.draft_token[rows], draft[b * n + kept])
        assert torch.equal(trees.positions[rows], positions[b * n + kept])
    flat = torch.arange(bs)[:, None] * n + torch.arange(n)[None, :]
    assert torch.equal(trees.rows, flat[torch.arange(n)[None, :] < trees.lens[:, None]])
    assert torch.equal(trees.out_cache_loc, trees.window[trees.rows])
    assert torch.equal(trees.tokens, trees.draft_token[trees.rows])
    # expand: padded position -> its own ragged row, or its request's root row
    ragged = torch.arange(trees.total)
    back = trees.expand(ragged).view(bs, n)
    starts = torch.cumsum(trees.lens, 0) - trees.lens
    for b in range(bs):
        assert back[b, : lens[b]].tolist() == list(range(int(starts[b]), int(starts[b]) + lens[b]))
        assert (back[b, lens[b]:] == starts[b]).all()


@pytest.mark.parametrize("seed", range(12))
def test_greedy_verification_accepts_what_the_uniform_layout_accepts(seed):
    bs, n, steps, budget, o, seq_lens, mask, positions, index, nt, ns, draft, trees, gen = \
        case(seed)
    keep = o.keep
    unt, uns = unlink(nt, ns, keep)
    cand = draft.view(bs, n)
    rng = np.random.default_rng(seed)
    for trial in range(6):
        # the target's greedy token after each original position: random, or lured onto a
        # child (kept or dropped) so that the walk goes deep
        target = torch.randint(0, 40, (bs, n), generator=gen)
        for b in range(bs):
            for p in range(n):
                kids = children(nt, ns, b, p)
                if kids and trial % 3:
                    target[b, p] = cand[b, kids[int(rng.integers(len(kids)))]]
        uniform = sglang_verify(cand, index, unt, uns, target, steps)
        target_c = torch.gather(target, 1, trees.order)  # the same prediction per node
        compacted = sglang_verify(trees.draft_token.view(bs, n), trees.retrieve_index,
                                  trees.retrieve_next_token, trees.retrieve_next_sibling,
                                  target_c, steps)
        for b in range(bs):
            assert [int(cand[b, k]) for k in uniform[b]] == \
                [int(trees.draft_token[b * n + j]) for j in compacted[b]]
            assert all(j < int(trees.lens[b]) for j in compacted[b])


def test_a_full_selection_keeps_sglangs_layout():
    """Every position kept (the default budget: the whole layout): compaction is the
    identity, the links and the mask are SGLang's."""
    gen = torch.Generator().manual_seed(3)
    bs, topk, steps, n = 3, 2, 3, 6
    score_list, token_list, parents_list = random_draft(bs, topk, steps, gen=gen)
    from sglang.srt.speculative.eagle_utils import organize_draft_results

    parent_list, top, tokens = organize_draft_results(score_list, token_list, parents_list, n)
    seq_lens = torch.tensor([5, 9, 2])
    mask, positions, index, nt, ns = sglang_tree(parent_list, top, seq_lens, topk, steps, n)
    keep = torch.ones(bs, n, dtype=torch.bool)
    # parents from SGLang's own mask: the deepest other visible position
    tree_part = [blk[:, s:] for blk, s in zip(blocks(mask, seq_lens, [n] * bs), seq_lens.tolist())]
    depth = positions.view(bs, n) - seq_lens[:, None]
    parent = torch.full((bs, n), -1)
    for b in range(bs):
        for i in range(1, n):
            seen = [k for k in range(n) if k != i and tree_part[b][i, k]]
            parent[b, i] = max(seen, key=lambda k: int(depth[b, k]))
    draft = torch.cat([torch.zeros(bs, 1, dtype=torch.long), tokens], 1).flatten()
    trees = compact(keep, parent, nt, ns, draft, positions, seq_lens, torch.arange(bs * n))
    assert torch.equal(trees.order, torch.arange(n).expand(bs, n))
    assert torch.equal(trees.retrieve_next_token, nt)
    assert torch.equal(trees.retrieve_next_sibling, ns)
    assert torch.equal(trees.retrieve_index, index)
    assert torch.equal(trees.custom_mask, mask)
    assert torch.equal(trees.expand_index, torch.arange(bs * n))


def test_compact_needs_every_root():
    keep = torch.tensor([[False, True]])
    with pytest.raises(ValueError, match="root"):
        compact(keep, torch.tensor([[-1, 0]]), torch.tensor([[1, -1]]),
                torch.tensor([[-1, -1]]), torch.zeros(2, dtype=torch.long),
                torch.zeros(2, dtype=torch.long), torch.tensor([3]), torch.arange(2))


@pytest.mark.parametrize("seed", range(3))
def test_the_verify_window_is_the_one_sglangs_uniform_prepare_assigns(seed, monkeypatch):
    """verify_window against SGLang's assign_extend_cache_locs_uniform_func (its Triton
    kernel, interpreted; the launch sits under `if _is_cuda`)."""
    from sglang.kernels.ops.speculative import cache_locs

    from adaserve.sglang.compact import verify_window

    gen = torch.Generator().manual_seed(seed)
    bs, n = 5, 6
    req_to_token = torch.randint(0, 10_000, (8, 64), generator=gen, dtype=torch.int32)
    req_pool_indices = torch.randperm(8, generator=gen)[:bs]
    seq_lens = torch.randint(0, 64 - n, (bs,), generator=gen)
    monkeypatch.setattr(cache_locs, "_is_cuda", True)
    theirs = cache_locs.assign_extend_cache_locs_uniform_func(
        req_pool_indices=req_pool_indices, req_to_token=req_to_token, start_offset=seq_lens,
        batch_size=bs, draft_token_num=n, device="cpu")
    assert torch.equal(verify_window(req_to_token, req_pool_indices, seq_lens, n), theirs)

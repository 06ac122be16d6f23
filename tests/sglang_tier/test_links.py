"""After unlinking, greedy verification over SGLang's retrieve links accepts only the
positions AdaServe kept: SGLang's real tree builder and greedy verify kernels (Triton,
interpreted on the CPU) against our pure-torch reference walk, over random trees."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from drafts import random_draft
from sglang.kernels.ops.speculative import spec_tree

from adaserve.scheduler import BatchView, SchedulerConfig, SpecPlan, make_policy
from adaserve.sglang.links import greedy_walk, unlink
from adaserve.sglang.select import organize


def build_links(parent_list, top_scores_index, bs, topk, steps, n):
    tree_mask = torch.full((n * bs * n,), True)
    positions = torch.empty(bs * n, dtype=torch.long)
    index, next_token, next_sibling = torch.full((3, bs, n), -1, dtype=torch.long)
    spec_tree.sgl_build_tree_kernel_triton(
        parent_list, top_scores_index, torch.full((bs,), 10), tree_mask, positions, index,
        next_token, next_sibling, topk, steps, n, spec_tree.TreeMaskMode.QLEN_ONLY)
    return index, next_token, next_sibling


def sglang_verify(candidates, index, next_token, next_sibling, target_predict, steps):
    bs, n = candidates.shape
    predicts = torch.full((bs * n,), -1, dtype=torch.long)
    accept_index = torch.full((bs, steps + 1), -1, dtype=torch.long)
    accept_num = torch.zeros(bs, dtype=torch.long)
    spec_tree.verify_tree_greedy_triton(predicts, accept_index, accept_num, candidates, index,
                                        next_token, next_sibling, target_predict)
    # accept_index holds flat positions b * n + k, root first
    return [[int(x) - b * n for x in accept_index[b, 1: 1 + int(accept_num[b])]]
            for b in range(bs)]


def children(next_token, next_sibling, b, p):
    out, c = [], int(next_token[b, p])
    while c != -1:
        out.append(c)
        c = int(next_sibling[b, c])
    return out


@pytest.mark.parametrize("seed", range(16))
def test_only_kept_positions_can_be_accepted(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    rng = np.random.default_rng(seed)
    bs, topk, steps = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(2, 5))
    n = min(int(rng.integers(3, 12)), topk + (steps - 1) * topk * topk + 1)
    score_list, token_list, parents_list = random_draft(bs, topk, steps, gen=gen)
    roots = torch.randint(0, 40, (bs,), generator=gen)
    view = BatchView(tuple(range(bs)), rng.choice([np.nan, 0.02, 0.05], bs),
                     rng.uniform(0, 2, bs), rng.integers(0, 40, bs), np.full(bs, 50))
    budget = int(rng.integers(bs, bs * n))  # below a full layout: something is dropped
    policy = make_policy("adaserve", SchedulerConfig(budget=budget, max_depth=steps,
                                                     max_width=topk))
    o = organize(score_list, token_list, parents_list, n, roots, policy, view,
                 SpecPlan(depth=steps, width=topk, t_spec_s=0.03))
    index, nt, ns = build_links(o.parent_list, o.top_scores_index, bs, topk, steps, n)
    cand = torch.cat([roots[:, None], o.draft_tokens], 1)
    new_nt, new_ns = unlink(nt, ns, o.keep)

    # the kept positions are exactly those still reachable from the root
    for b in range(bs):
        seen, stack = set(), [0]
        while stack:
            p = stack.pop()
            seen.add(p)
            stack += children(new_nt, new_ns, b, p)
        assert seen == set(np.flatnonzero(o.keep[b].numpy()).tolist())

    # adversarial targets: at every position predict a child's token, dropped ones first,
    # so a walk over the old links would go where AdaServe did not select
    for trial in range(4):
        target = torch.randint(0, 40, (bs, n), generator=gen)
        for b in range(bs):
            for p in range(n):
                kids = children(nt, ns, b, p)
                dropped = [c for c in kids if not bool(o.keep[b, c])]
                pool = dropped if dropped and trial % 2 == 0 else kids
                if pool:
                    target[b, p] = cand[b, pool[int(rng.integers(len(pool)))]]
        ours = greedy_walk(cand, target, new_nt, new_ns)
        theirs = sglang_verify(cand, index, new_nt, new_ns, target, steps)
        assert ours == theirs
        for b, path in enumerate(ours):
            assert all(bool(o.keep[b, k]) for k in path)
        if trial == 0:  # the teeth: over the old links the same targets reach dropped nodes
            before = greedy_walk(cand, target, nt, ns)
            for b in range(bs):
                if any(not bool(o.keep[b, c]) for c in children(nt, ns, b, 0)):
                    assert before[b] and not bool(o.keep[b, before[b][0]])


def test_unlink_checks_its_input():
    nt = torch.tensor([[1, -1]])
    ns = torch.tensor([[-1, -1]])
    with pytest.raises(ValueError, match="root"):
        unlink(nt, ns, torch.tensor([[False, True]]))
    with pytest.raises(ValueError, match="shape"):
        unlink(nt, ns, torch.tensor([[True]]))

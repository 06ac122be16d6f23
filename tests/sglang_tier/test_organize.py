"""The organize seam selects exactly what adaserve.scheduler chooses, inside SGLang's
layout: same top_scores_index / draft tokens / parent list as SGLang's own
organize_draft_results, and a keep-mask equal to the scheduler's selection over a tree
rebuilt independently from the flat layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from drafts import random_draft
from sglang.srt.speculative.eagle_utils import organize_draft_results

from adaserve.scheduler import (
    BatchView,
    CandidateTree,
    CandidateBatch,
    SchedulerConfig,
    SpecPlan,
    make_policy,
)
from adaserve.sglang.select import organize


def reference_candidates(score_list, token_list, parents_list, index, roots):
    """The verify positions' trees, walked node by node from SGLang's step lists."""
    topk = token_list[0].shape[1]
    scores = torch.cat(score_list, 1).flatten(1)
    tokens = torch.cat(token_list, 1)
    trees = []
    for b in range(scores.shape[0]):
        flat_parent = {}
        for j in range(scores.shape[1]):
            if j < topk:  # step 0: children of the root
                flat_parent[j] = -1
                continue
            # step i >= 1 expands, child by child, the beams step i - 1 chose: at step 1
            # every step-0 node, later the flat indices parents_list[i - 1] holds
            i, within = divmod(j - topk, topk * topk)
            i, beam = i + 1, within // topk
            flat_parent[j] = beam if i == 1 else int(parents_list[i - 1][b, beam])
        kept = [int(j) for j in index[b]]
        pos = {j: k + 1 for k, j in enumerate(kept)}
        parent = [-1] + [0 if flat_parent[j] < 0 else pos[flat_parent[j]] for j in kept]
        depth = [0]
        for k in range(1, len(parent)):
            depth.append(depth[parent[k]] + 1)
        log_prob = [0.0] + [float(np.log(np.float64(scores[b, j]))) for j in kept]
        tree = CandidateTree(np.array(parent), [int(roots[b])] + [int(tokens[b, j]) for j in kept],
                             np.array(log_prob), np.array(depth))
        trees.append(tree)
    return CandidateBatch.from_trees(trees)


def view(slos_ms, decoded, latency_s) -> BatchView:
    n = len(slos_ms)
    return BatchView(tuple(range(n)),
                     np.array([np.nan if s is None else s / 1e3 for s in slos_ms]),
                     np.asarray(latency_s, float), np.asarray(decoded, np.int64),
                     np.full(n, 100, np.int64))


@pytest.mark.parametrize("seed", range(12))
def test_keep_mask_is_the_schedulers_selection(seed):
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    bs, topk, steps = int(rng.integers(1, 6)), int(rng.integers(1, 5)), int(rng.integers(2, 6))
    n_draft = int(rng.integers(2, min(topk + (steps - 1) * topk * topk, 16) + 2))
    n_draft = min(n_draft, topk + (steps - 1) * topk * topk + 1)
    score_list, token_list, parents_list = random_draft(bs, topk, steps, gen=gen)
    roots = torch.randint(0, 40, (bs,), generator=gen)
    slos = [rng.choice([None, 20.0, 50.0, 200.0]) for _ in range(bs)]
    batch = view(slos, rng.integers(0, 50, bs), rng.uniform(0, 3, bs))
    budget = int(rng.integers(bs, bs * n_draft + 1))
    policy = make_policy("adaserve", SchedulerConfig(budget=budget, max_depth=steps,
                                                     max_width=topk))
    plan = SpecPlan(depth=steps, width=topk, t_spec_s=0.03)

    got = organize(score_list, token_list, parents_list, n_draft, roots, policy, batch, plan)

    # SGLang's layout is untouched
    pl, tsi, dt = organize_draft_results(score_list, token_list, parents_list, n_draft)
    assert torch.equal(got.top_scores_index, tsi)
    assert torch.equal(got.draft_tokens, dt)
    assert torch.equal(got.parent_list, pl)
    # the keep-mask is the policy's own selection on the same trees, SLOs and budget
    cand = reference_candidates(score_list, token_list, parents_list, tsi, roots)
    want = policy.select(batch, plan, cand)
    assert got.keep.dtype == torch.bool and got.keep.shape == (bs, n_draft)
    np.testing.assert_array_equal(got.keep.numpy(), want.mask)
    assert bool(got.keep[:, 0].all())
    assert int(got.keep.sum()) <= max(budget, bs)


def test_depth_cut_leaves_deeper_positions_out():
    gen = torch.Generator().manual_seed(7)
    score_list, token_list, parents_list = random_draft(2, 2, 5, gen=gen, sharpness=6.0)
    policy = make_policy("adaserve", SchedulerConfig(budget=20, max_depth=5, max_width=2))
    batch = view([20.0, None], [10, 0], [1.0, 0.0])
    got = organize(score_list, token_list, parents_list, 9, torch.zeros(2, dtype=torch.long),
                   policy, batch, SpecPlan(depth=2, width=2, t_spec_s=0.03))
    cand = reference_candidates(score_list, token_list, parents_list, got.top_scores_index,
                                torch.zeros(2))
    assert got.keep.numpy()[cand.depth > 2].sum() == 0
    assert got.keep.numpy()[cand.depth <= 2].sum() > 2  # budget 20 fills what depth 2 has

"""AdaServe's choice of verify positions for one SGLang iteration.

The replacement of ``organize_draft_results``: SGLang's own top-(N - 1) candidates per
request stay the verify layout (its kernels and CUDA graphs expect [bs, N]); within them
``adaserve.scheduler``'s policy decides, per request, which positions are verified, and
``links.unlink`` drops the rest. Every decision is the scheduler's: the same policy object,
the same BatchView of SLOs and progress, the same SpecPlan as the embedded engine uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaserve.scheduler import BatchView, Policy, SpecPlan
from adaserve.scheduler.selection import Selection
from adaserve.sglang.draft_tree import DraftTree


@dataclass(frozen=True, slots=True, eq=False)
class Organized:
    """What ``organize_draft_results`` returns, plus the positions AdaServe keeps."""

    parent_list: torch.Tensor  # as SGLang builds it (the beams of all but the last step)
    top_scores_index: torch.Tensor  # [bs, N - 1] SGLang's kept candidates, sorted
    draft_tokens: torch.Tensor  # [bs, N - 1]
    keep: torch.Tensor  # [bs, N] bool over verify positions, root (0) always kept
    parent: torch.Tensor  # [bs, N] int64: each verify position's parent position, -1 root
    selection: Selection  # the scheduler's decision, for stats (expected tokens, targets)


def organize(score_list: list[torch.Tensor], token_list: list[torch.Tensor],
             parents_list: list[torch.Tensor], num_draft_tokens: int, roots: torch.Tensor,
             policy: Policy, batch: BatchView, plan: SpecPlan) -> Organized:
    """SGLang's draft outputs in, SGLang's verify layout out, AdaServe's trees inside it.

    ``plan.depth`` (Eq. 8, at most the compiled number of draft steps) cuts deeper
    positions: they are offered to selection with f = 0, so no phase can pick them.
    """
    tree = DraftTree.from_lists(score_list, token_list, parents_list)
    if batch.n != tree.batch:
        raise ValueError(f"a BatchView of {batch.n} requests for a draft of {tree.batch}")
    index = tree.kept(num_draft_tokens)
    cand = tree.candidates(index, roots)
    if plan.depth < int(cand.depth.max(initial=0)):
        cut = cand.depth > plan.depth
        cand = type(cand)(cand.parent, cand.token, np.where(cut, -np.inf, cand.log_prob),
                          cand.depth, cand.size)
    selection = policy.select(batch, plan, cand)
    draft_tokens = torch.gather(tree.tokens, 1, index)
    keep = torch.from_numpy(selection.mask).to(tree.scores.device)
    parent = torch.from_numpy(cand.parent).to(tree.scores.device)
    return Organized(tree.parent_list, index, draft_tokens, keep, parent, selection)

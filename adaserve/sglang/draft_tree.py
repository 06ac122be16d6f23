"""SGLang's draft tree as ``adaserve.scheduler`` candidates, and a selection back.

Layout of the EAGLE draft loop (``select_top_k_tokens`` in speculative/spec_utils.py), per
request, for ``topk`` beams and ``steps`` draft steps:

- scores: step 0 gives [b, 1, topk], later steps [b, topk, topk]; each entry is the path
  probability of a candidate (already multiplied down the path). Concatenated and
  flattened they are the M = topk + (steps - 1) * topk^2 candidates, "flat index" j.
- tokens: [b, topk], then [b, topk^2]; concatenated in the same flat order.
- parents: [b, topk + 1] = [-1, 0..topk-1], then [b, topk] per step: the flat indices of
  the beams each step expanded. Concatenated without the last step, entry j // topk is
  the flat parent of candidate j (-1: the root) -- the rule ``build_tree_kernel_efficient``
  uses.

SGLang then keeps, per request, the num_draft_tokens - 1 candidates of highest score,
sorted by flat index (``organize_draft_results``); position 0 of the verify layout is the
root (the bonus token) and position k >= 1 is the k-th kept candidate. AdaServe chooses a
subset of those positions per request; the rest are unlinked (``links``), so SGLang's
fixed layout and kernels stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaserve.scheduler.tree import CandidateBatch


@dataclass(frozen=True, slots=True, eq=False)
class DraftTree:
    """One iteration's draft, flattened as SGLang lays it out (torch tensors on any device)."""

    scores: torch.Tensor  # [b, M] path probabilities
    tokens: torch.Tensor  # [b, M] token ids
    parents: torch.Tensor  # [b, M] flat index of each candidate's parent, -1 = root
    parent_list: torch.Tensor  # SGLang's own: the beams of all steps but the last ([b, 0]
    # for a one-step draft), what build_tree_kernel_efficient takes
    topk: int

    @classmethod
    def from_lists(cls, score_list: list[torch.Tensor], token_list: list[torch.Tensor],
                   parents_list: list[torch.Tensor]) -> DraftTree:
        """From the draft loop's per-step lists, as ``organize_draft_results`` receives them."""
        topk = int(token_list[0].shape[1])
        scores = torch.cat(score_list, dim=1).flatten(1)
        tokens = torch.cat(token_list, dim=1)
        b, m = scores.shape
        if tokens.shape != (b, m):
            raise ValueError(f"{tuple(tokens.shape)} tokens for {(b, m)} scores")
        if len(parents_list) > 1:
            parent_list = torch.cat(parents_list[:-1], dim=1)  # [b, 1 + (steps - 1) * topk]
            beams = parent_list
        else:  # one step: every candidate hangs off the root (slot 0, -1)
            parent_list = torch.empty(b, 0, dtype=torch.long, device=scores.device)
            beams = torch.full((b, 1), -1, dtype=torch.long, device=scores.device)
        parent_slot = torch.arange(m, device=scores.device) // topk  # [M]
        if int(parent_slot[-1]) >= beams.shape[1]:
            raise ValueError(f"{beams.shape[1]} beam entries cannot parent {m} candidates")
        return cls(scores, tokens, beams[:, parent_slot], parent_list, topk)

    @property
    def batch(self) -> int:
        return int(self.scores.shape[0])

    @property
    def size(self) -> int:
        return int(self.scores.shape[1])

    def kept(self, num_draft_tokens: int) -> torch.Tensor:
        """SGLang's own choice: the num_draft_tokens - 1 best candidates per request, sorted
        by flat index, exactly as ``organize_draft_results`` computes ``top_scores_index``."""
        top = torch.topk(self.scores, num_draft_tokens - 1, dim=-1).indices
        return torch.sort(top).values  # [b, num_draft_tokens - 1]

    def candidates(self, index: torch.Tensor, roots: torch.Tensor) -> CandidateBatch:
        """The verify positions (root + the candidates ``index`` keeps) as a CandidateBatch:
        node k of row i is verify position k, so a selection mask over nodes is directly a
        mask over SGLang's positions.

        ``index`` [b, K] must be ancestor-closed per row (SGLang's top-K is: path scores
        never grow along a path); ``roots`` [b] are the bonus tokens.
        """
        b, k = index.shape
        idx = index.detach().cpu().numpy().astype(np.int64)
        flat_parent = np.take_along_axis(self.parents.detach().cpu().numpy(), idx, 1)
        # flat parent -> verify position: the root is 0, kept candidate j is 1 + rank of j
        pos = np.zeros((b, self.size), np.int64)
        np.put_along_axis(pos, idx, np.arange(1, k + 1)[None, :].repeat(b, 0), 1)
        has_parent = flat_parent >= 0
        parent = np.where(has_parent, np.take_along_axis(pos, np.maximum(flat_parent, 0), 1), 0)
        if np.any(has_parent & (parent == 0)):
            raise ValueError("the kept candidates are not ancestor-closed")
        depth = np.zeros((b, k + 1), np.int64)
        for c in range(1, k + 1):  # parents precede children (flat order is depth order)
            depth[:, c] = np.take_along_axis(depth, parent[:, c - 1: c], 1)[:, 0] + 1
        score = np.take_along_axis(self.scores.detach().float().cpu().numpy(), idx, 1)
        with np.errstate(divide="ignore"):
            log_prob = np.log(np.clip(score.astype(np.float64), 0.0, 1.0))
        token = np.take_along_axis(self.tokens.detach().cpu().numpy(), idx, 1)
        root_token = roots.detach().cpu().numpy().astype(np.int64)[:, None]
        return CandidateBatch(
            parent=np.concatenate([np.full((b, 1), -1), parent], 1),
            token=np.concatenate([root_token, token], 1),
            log_prob=np.concatenate([np.zeros((b, 1)), log_prob], 1),
            depth=depth,
            size=np.full(b, k + 1, np.int64),
        )

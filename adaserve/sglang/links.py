"""Per-request trees inside SGLang's uniform verify layout, by unlinking.

``build_tree_kernel_efficient`` links every verify position of a request into one tree:
``next_token[p]`` is p's first child, ``next_sibling[c]`` the next child of c's parent,
-1 ending either list (positions are local, 0 = the root). Greedy verification walks only
these links from the root, so a position no link reaches can never be accepted, whatever
the target predicts. Removing the positions AdaServe did not select from both lists makes
each request verify exactly its own tree inside the fixed [bs, N] layout, with no new
kernel; the compute of the unselected positions is still spent (saving it needs ragged
verification, which this layout does not do).
"""

from __future__ import annotations

import torch


def unlink(next_token: torch.Tensor, next_sibling: torch.Tensor,
           keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Links with every position where ``keep`` is False skipped.

    next_token, next_sibling: [bs, N] int64 as the kernel built them; keep: [bs, N] bool,
    the root (position 0) kept, ancestor-closed (a dropped position's whole subtree is
    dropped too, so skipping it along its sibling list loses no kept node).
    Returns new tensors; dropped positions get -1 in both lists.
    """
    if next_token.shape != keep.shape or next_sibling.shape != keep.shape:
        raise ValueError("next_token, next_sibling and keep must share one [bs, N] shape")
    if not bool(keep[:, 0].all()):
        raise ValueError("the root (position 0) must be kept")
    n = keep.shape[1]
    rows = torch.arange(keep.shape[0], device=keep.device)[:, None].expand_as(keep)

    def skip(link: torch.Tensor) -> torch.Tensor:
        # follow sibling links past dropped positions; a list has at most N - 1 entries
        for _ in range(n):
            safe = link.clamp(min=0)
            dropped = (link >= 0) & ~keep[rows, safe]
            if not bool(dropped.any()):
                break
            link = torch.where(dropped, next_sibling[rows, safe], link)
        return link

    new_token = torch.where(keep, skip(next_token), torch.full_like(next_token, -1))
    new_sibling = torch.where(keep, skip(next_sibling), torch.full_like(next_sibling, -1))
    return new_token, new_sibling


def greedy_walk(candidates: torch.Tensor, target_predict: torch.Tensor,
                next_token: torch.Tensor, next_sibling: torch.Tensor) -> list[list[int]]:
    """Reference greedy tree verification over the links (what SGLang's verify_tree_greedy
    computes): from the root, move to the child whose draft token equals the target's
    prediction at the current position, until none does. Returns, per request, the
    accepted positions after the root.

    candidates: [bs, N] draft tokens (position 0 = the root); target_predict: [bs, N] the
    target's argmax at each position.
    """
    accepted: list[list[int]] = []
    for b in range(candidates.shape[0]):
        path, cur = [], 0
        while True:
            child = int(next_token[b, cur])
            while child != -1 and int(candidates[b, child]) != int(target_predict[b, cur]):
                child = int(next_sibling[b, child])
            if child == -1:
                break
            path.append(child)
            cur = child
        accepted.append(path)
    return accepted

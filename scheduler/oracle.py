"""Algorithm 1 of seed 002 on explicit finite trees: the exact optimum, kept as a test oracle.

Deliberately a different mechanism from ``selection``: nodes enter a frontier (sorted with
sortedcontainers) only once their parent is chosen, exactly as GetTop is described in
seed 002 §4.2, and it runs one node at a time in plain Python. If it and the vectorized
selection agree, both the ranking argument and the vectorization are right.

Budget accounting matches Algorithm 2: the n roots spend n of B first. Nodes with f = 0
are never chosen (they cannot be accepted). A tree that runs out of nodes before reaching
its threshold is infeasible, as running out of budget is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sortedcontainers import SortedList

from adaserve.scheduler.slo import SLO_EPS
from adaserve.scheduler.tree import MIN_LOG_PROB, CandidateTree


@dataclass(frozen=True, slots=True)
class OracleResult:
    valid: bool  # False: Algorithm 1 returns INVALID, no selection meets every threshold
    selected: tuple[np.ndarray, ...]  # per request, sorted node indices (empty if invalid)
    expected_accepted: np.ndarray  # [n] sum of f over each selected tree (zeros if invalid)

    @property
    def objective(self) -> float:
        """Expected accepted tokens over the batch, Eq. 6 (what Algorithm 1 maximizes)."""
        return float(self.expected_accepted.sum())


def _children(tree: CandidateTree) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in range(tree.size)]
    for v in range(1, tree.size):
        kids[int(tree.parent[v])].append(v)
    return kids


def algorithm1(trees: Sequence[CandidateTree], thresholds: Sequence[float],
               budget: int, n_max: int | None = None) -> OracleResult:
    """Optimal trees for the given per-request thresholds A(r_i), or INVALID.

    ``n_max``: Algorithm 2's cap (line 12) carried into step 1: a request stops adding
    once it holds n_max tokens, threshold met or not (not INVALID: the cap is a choice,
    not a failure); step 2 may still give it more. None: no cap, Algorithm 1 as published.
    """
    n = len(trees)
    kids = [_children(t) for t in trees]
    f = [np.exp(t.log_prob) for t in trees]
    chosen: list[list[int]] = [[0] for _ in range(n)]
    acc = [1.0] * n
    remaining = budget - n
    frontiers = [SortedList() for _ in range(n)]

    def open_children(i: int, v: int, frontier: SortedList) -> None:
        # Entries sort as the design's total order: f desc, depth, request, node index.
        frontier.update((-float(trees[i].log_prob[u]), int(trees[i].depth[u]), i, u)
                        for u in kids[i][v] if trees[i].log_prob[u] >= MIN_LOG_PROB)

    def take(entry: tuple[float, int, int, int], frontier: SortedList) -> None:
        nonlocal remaining
        _, _, i, v = entry
        chosen[i].append(v)
        acc[i] += float(f[i][v])
        remaining -= 1
        open_children(i, v, frontier)

    for i in range(n):
        open_children(i, 0, frontiers[i])
    # Step 1 (lines 7-15): each request in turn adds its best open node until it reaches
    # its threshold; running out of budget or of nodes first means INVALID.
    cap = n_max if n_max is not None else np.inf
    for i in range(n):
        while acc[i] < thresholds[i] - SLO_EPS and len(chosen[i]) < cap:
            if remaining <= 0 or not frontiers[i]:
                return OracleResult(False, tuple(np.empty(0, np.int64) for _ in range(n)),
                                    np.zeros(n))
            take(frontiers[i].pop(0), frontiers[i])
    # Step 2 (lines 16-21): the globally best open node while budget remains.
    pooled = SortedList()
    for frontier in frontiers:
        pooled.update(frontier)
    while remaining > 0 and pooled:
        take(pooled.pop(0), pooled)
    return OracleResult(True, tuple(np.sort(np.array(c, np.int64)) for c in chosen),
                        np.array(acc))

"""Candidate token trees: the carrier an engine's draft phase hands to selection.

A tree is flat arrays indexed by node, root at 0. ``log_prob`` is log f(v), the cumulative
draft log-probability of the path root -> v (seed 002 Eq. 7), so log f(root) = 0 and f never
grows along a path. That monotonicity is what makes greedy selection by f ancestor-closed
(seed 002 §A.1), so it is checked here rather than trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


# Nodes with f below e^-700 (~1e-304) are treated as f = 0: never worth verifying. A fixed
# cut in log space, rather than exp(log f) > 0, keeps every component agreeing on which
# nodes exist without computing exp near the subnormal edge.
MIN_LOG_PROB = -700.0


def _as(a, dtype, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(a, dtype=dtype)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class CandidateTree:
    """One request's candidate tree."""

    parent: np.ndarray  # [N] int64, -1 at the root; parent[i] < i
    token: np.ndarray  # [N] int64 token ids; the root is the request's last committed token
    log_prob: np.ndarray  # [N] float64 log f(v); 0 at the root; -inf allowed (f = 0)
    depth: np.ndarray  # [N] int64, 0 at the root; depth[i] = depth[parent[i]] + 1

    def __post_init__(self) -> None:
        arrays = {
            "parent": _as(self.parent, np.int64, "parent", 1),
            "token": _as(self.token, np.int64, "token", 1),
            "log_prob": _as(self.log_prob, np.float64, "log_prob", 1),
            "depth": _as(self.depth, np.int64, "depth", 1),
        }
        for name, arr in arrays.items():
            object.__setattr__(self, name, arr)
        sizes = {a.shape[0] for a in arrays.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"tree arrays must share one non-zero length, got {sorted(sizes)}")
        _validate(self.parent[None], self.log_prob[None], self.depth[None],
                  np.array([self.parent.shape[0]]))

    @classmethod
    def from_edges(cls, parent, token, edge_log_prob) -> CandidateTree:
        """Build from per-edge draft log-probabilities log q(v | path to parent); root entry ignored."""
        parent = _as(parent, np.int64, "parent", 1)
        edge = _as(edge_log_prob, np.float64, "edge_log_prob", 1)
        if parent.shape != edge.shape:
            raise ValueError("parent and edge_log_prob must have the same length")
        if np.any(edge[1:] > 0):
            raise ValueError("edge log-probabilities must be <= 0")
        log_prob = np.zeros_like(edge)
        depth = np.zeros_like(parent)
        for i in range(1, parent.shape[0]):  # parents precede children: one forward pass
            p = parent[i]
            if not 0 <= p < i:
                raise ValueError(f"node {i}: parent {p} must precede it")
            log_prob[i] = log_prob[p] + edge[i]
            depth[i] = depth[p] + 1
        return cls(parent=parent, token=token, log_prob=log_prob, depth=depth)

    @property
    def size(self) -> int:
        return int(self.parent.shape[0])

    @property
    def path_prob(self) -> np.ndarray:
        return np.exp(self.log_prob)


@dataclass(frozen=True, slots=True, eq=False)
class CandidateBatch:
    """n candidate trees stacked and right-padded to a common width N.

    Nodes ``[0, size[i])`` of row i are real; padding has parent -1, log_prob -inf and never
    gets selected. An engine's beam search produces this layout directly.
    """

    parent: np.ndarray  # [n, N] int64
    token: np.ndarray  # [n, N] int64
    log_prob: np.ndarray  # [n, N] float64
    depth: np.ndarray  # [n, N] int64
    size: np.ndarray  # [n] int64, real nodes per row (>= 1: the root)

    def __post_init__(self) -> None:
        for name, dtype in (("parent", np.int64), ("token", np.int64),
                            ("log_prob", np.float64), ("depth", np.int64)):
            object.__setattr__(self, name, _as(getattr(self, name), dtype, name, 2))
        object.__setattr__(self, "size", _as(self.size, np.int64, "size", 1))
        shape = self.parent.shape
        if any(getattr(self, k).shape != shape for k in ("token", "log_prob", "depth")):
            raise ValueError("parent, token, log_prob and depth must share one [n, N] shape")
        if self.size.shape != (shape[0],):
            raise ValueError(f"size must have shape ({shape[0]},)")
        if shape[0] and (shape[1] == 0 or self.size.min() < 1 or self.size.max() > shape[1]):
            raise ValueError(f"every tree needs 1..{shape[1]} nodes, got sizes {self.size}")
        pad = np.arange(shape[1])[None, :] >= self.size[:, None]
        # Padding sorts last in selection whatever the caller left there (a copy: the
        # caller's arrays are not ours to write).
        object.__setattr__(self, "log_prob", np.where(pad, -np.inf, self.log_prob))
        _validate(self.parent, self.log_prob, self.depth, self.size)

    @classmethod
    def from_trees(cls, trees: Sequence[CandidateTree]) -> CandidateBatch:
        n = len(trees)
        width = max((t.size for t in trees), default=1)
        parent = np.full((n, width), -1, np.int64)
        token = np.zeros((n, width), np.int64)
        log_prob = np.full((n, width), -np.inf)
        depth = np.zeros((n, width), np.int64)
        for i, t in enumerate(trees):
            parent[i, : t.size], token[i, : t.size] = t.parent, t.token
            log_prob[i, : t.size], depth[i, : t.size] = t.log_prob, t.depth
        return cls(parent, token, log_prob, depth, np.array([t.size for t in trees], np.int64))

    @classmethod
    def roots(cls, tokens) -> CandidateBatch:
        """Root-only trees: what a step without speculation verifies."""
        tok = _as(tokens, np.int64, "tokens", 1)[:, None]
        n = tok.shape[0]
        return cls(np.full((n, 1), -1), tok, np.zeros((n, 1)), np.zeros((n, 1), np.int64),
                   np.ones(n, np.int64))

    @property
    def n(self) -> int:
        return int(self.parent.shape[0])

    @property
    def width(self) -> int:
        return int(self.parent.shape[1])

    @property
    def valid(self) -> np.ndarray:
        return np.arange(self.width)[None, :] < self.size[:, None]  # [n, N] bool

    def tree(self, i: int) -> CandidateTree:
        s = int(self.size[i])
        return CandidateTree(self.parent[i, :s], self.token[i, :s],
                             self.log_prob[i, :s], self.depth[i, :s])


def _validate(parent: np.ndarray, log_prob: np.ndarray, depth: np.ndarray,
              size: np.ndarray) -> None:
    """Vectorized checks over [n, N]: structure, depths, and f non-increasing along paths."""
    n, width = parent.shape
    if n == 0:
        return
    # (ndarray methods and plain indexing rather than np.any and np.take_along_axis: every
    # candidate batch is checked, once per engine iteration, and their Python wrappers
    # cost more than the checks at these sizes)
    if (parent[:, 0] != -1).any() or depth[:, 0].any() or log_prob[:, 0].any():
        raise ValueError("node 0 must be the root: parent -1, depth 0, log_prob 0")
    if np.isnan(log_prob).any():
        raise ValueError("log_prob contains NaN")
    if width == 1:
        return
    cols = np.arange(1, width)[None, :]
    real = cols < size[:, None]  # [n, N-1]
    par = parent[:, 1:]
    if (real & ((par < 0) | (par >= cols))).any():
        bad = np.argwhere(real & ((par < 0) | (par >= cols)))[0]
        raise ValueError(f"tree {bad[0]} node {bad[1] + 1}: parent must precede the node")
    rows = np.arange(n)[:, None]
    safe = np.where(real, par, 0)
    if (real & (depth[:, 1:] != depth[rows, safe] + 1)).any():
        raise ValueError("depth must be parent's depth + 1")
    if (real & (log_prob[:, 1:] > log_prob[rows, safe])).any():
        raise ValueError("path probability must not increase from parent to child")

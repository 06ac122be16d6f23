"""Token selection over candidate trees under a hardware budget (seed 002 Algorithm 2).

Every phase works on one ranking: within a request, nodes ordered by f(v) descending, ties
broken by depth then node index. f never grows along a path, so any prefix of that order is
ancestor-closed (seed 002 §A.1). Each phase below takes a prefix per request, so their union
is a prefix too and the selected nodes always form valid trees.

Vectorized numpy: partitions find the few nodes that can win, one sort ranks them, then
cumulative sums run the SLO phase and a partition the global phase. No Python loop over
nodes or requests.

Budget accounting follows Algorithm 2: the n roots are verified every iteration and spend
budget first (line 7), so speculation gets B - n tokens. When n >= B the roots still run,
as in continuous batching, and nothing else is selected.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaserve.scheduler.slo import SLO_EPS
from adaserve.scheduler.tree import CandidateBatch


@dataclass(frozen=True, slots=True, eq=False)
class Selection:
    """The trees to verify: selected nodes per request, root always included."""

    mask: np.ndarray  # [n, N] bool
    expected_accepted: np.ndarray  # [n] float64, sum of f over selected nodes (root = 1)
    target: np.ndarray  # [n] float64, A_cap the SLO phase aimed for (1 where none)

    @property
    def n(self) -> int:
        return int(self.mask.shape[0])

    @property
    def counts(self) -> np.ndarray:
        return self.mask.sum(axis=1)  # [n]

    @property
    def tokens(self) -> int:
        """Tokens the verification pass processes (the budget actually used)."""
        return int(self.mask.sum())

    @property
    def slo_met(self) -> np.ndarray:
        return self.expected_accepted >= self.target - SLO_EPS  # [n] bool

    def nodes(self, i: int) -> np.ndarray:
        """Selected node indices of request i, ascending (parents before children)."""
        return np.flatnonzero(self.mask[i])


@dataclass(frozen=True, slots=True, eq=False)
class _Ranked:
    """The top of each row in rank order, compacted to the nodes selection can reach."""

    order: np.ndarray  # [n, K] node index at each rank; rank 0 is the root
    f: np.ndarray  # [n, K] f(v) at each rank; 0 past the ranked nodes
    usable: np.ndarray  # [n] ranks holding a node worth verifying (f > 0), root included


_MAX = np.finfo(np.float64).max


def _rank(c: CandidateBatch, row_k: np.ndarray, global_k: int) -> _Ranked:
    """Rank at least each row's top ``row_k`` and the global top ``global_k`` non-root nodes.

    Sorting every candidate is what dominates selection time, and only few can win: the
    throughput phase picks from the global top-S (S = spare budget) and the SLO phase from
    each row's top n_max - 1. Thresholds from O(N) partitions keep every node whose f reaches
    either cut, ties included; such a set is a prefix of each row's order, so ranking only it
    changes no decision. It is then sorted exactly: f desc, depth, index.
    """
    n, width = c.parent.shape
    # Roots take part: f = 1 and depth 0 put each at rank 0 of its row, and shifting every
    # cut by one root per row keeps the non-root counts above.
    neg = np.negative(c.log_prob)  # [n, N]; +inf for padding and f = 0
    cut = -np.inf
    if global_k > 0 and n:
        k = min(global_k + n, neg.size) - 1
        cut = np.partition(neg, k, axis=None)[k]
    k_max = min(int(row_k.max(initial=0)), width - 1)
    if k_max > 0:
        row_cut = np.partition(neg, k_max, axis=1)[:, k_max]
        cut = np.maximum(cut, np.where(row_k > 0, row_cut, -np.inf))
    # Clamped to the largest finite value so padding and f = 0 (neg = inf) never pass; the
    # roots (neg = 0) always do.
    cut = np.maximum(np.minimum(cut, _MAX), 0.0)
    flat = np.flatnonzero(neg <= (cut[:, None] if np.ndim(cut) else cut))  # row-major
    rows = flat // width
    lp = c.log_prob.ravel()[flat]
    # lexsort is stable and the last key is primary: row, then f desc, then depth; equal
    # keys keep flatnonzero's ascending node index.
    by = np.lexsort((c.depth.ravel()[flat], -lp, rows))
    rows, flat, lp = rows[by], flat[by], lp[by]
    counts = np.bincount(rows, minlength=n)
    pos = np.arange(rows.size) - (np.cumsum(counts) - counts)[rows]
    k = int(counts.max(initial=1))
    order = np.zeros((n, k), np.int64)
    order[rows, pos] = flat - rows * width
    f = np.zeros((n, k))
    f[rows, pos] = np.exp(lp)
    return _Ranked(order, f, (f > 0).sum(axis=1))


def _finish(c: CandidateBatch, r: _Ranked, take: np.ndarray, target: np.ndarray) -> Selection:
    """Select ranks [0, take[i]) of every row; take counts the root."""
    chosen = np.arange(r.order.shape[1]) < take[:, None]  # [n, K] in rank space
    mask = np.zeros(c.parent.shape, bool)
    mask[np.flatnonzero(chosen) // r.order.shape[1], r.order[chosen]] = True
    return Selection(mask, np.sum(r.f, axis=1, where=chosen), target)


def _slo_phase(r: _Ranked, priority: np.ndarray, target: np.ndarray, n_max: int,
               budget: int) -> np.ndarray:
    """Non-root nodes each request takes to reach its target (Algorithm 2 lines 9-17).

    Requests are served in ``priority`` order; a request adds nodes by descending f while
    the sum over its tree (root = 1) is below target and it holds fewer than n_max tokens,
    until the budget runs out.
    """
    # Rank 0 holds the root's f = 1, so the running sum is 1 + f1 + f2 + ... added one node
    # at a time: the same arithmetic as Algorithm 1, bit for bit. It never decreases, so
    # the ranks still below target form a prefix and counting them is enough.
    acc = np.cumsum(r.f, axis=1)[:, :-1]  # [n, K-1] sum before adding rank j+1
    need = (acc < (target - SLO_EPS)[:, None]).sum(axis=1)
    need = np.minimum(np.minimum(need, r.usable - 1), max(n_max - 1, 0))  # [n]
    need_p = need[priority]
    before = np.cumsum(need_p) - need_p
    take = np.empty_like(need)
    take[priority] = np.minimum(np.maximum(budget - before, 0), need_p)
    return take


def _global_phase(c: CandidateBatch, r: _Ranked, start: np.ndarray, budget: int) -> np.ndarray:
    """Extra ranks per request for the global top-``budget`` nodes past ``start`` (lines 18-23).

    The global order is f desc, then depth, then request, then node index. Restricted to one
    request it is that request's rank order, so the winners are a prefix of each row.
    """
    n, k = r.f.shape
    open_count = r.usable - start
    if budget <= 0 or n == 0:
        return np.zeros(n, np.int64)
    if int(open_count.sum()) <= budget:
        return open_count
    ranks = np.arange(k)
    open_ = (ranks >= start[:, None]) & (ranks < r.usable[:, None])  # [n, K]
    vals = np.where(open_, r.f, -1.0)
    kth = np.partition(vals, vals.size - budget, axis=None)[vals.size - budget]
    above = open_ & (r.f > kth)
    extra = above.sum(axis=1)
    short = budget - int(extra.sum())
    if short > 0:  # ties at the threshold: lowest depth, then request, then rank
        rows, at = np.nonzero(open_ & (r.f == kth))  # rows ascending, ranks ascending
        depth = c.depth[rows, r.order[rows, at]]
        pick = np.lexsort((at, rows, depth))[:short]
        extra += np.bincount(rows[pick], minlength=n)
    return extra


def select_slo_customized(c: CandidateBatch, budget: int, requirement: np.ndarray,
                          target: np.ndarray, n_max: int) -> Selection:
    """AdaServe selection: SLO-customized phase, then throughput-optimized phase.

    ``requirement`` is A(r) (orders the SLO phase, most behind first); ``target`` is A_cap.
    """
    target = np.asarray(target, np.float64)
    spare = max(budget - c.n, 0)
    pressed = (target > 1.0 + SLO_EPS) & (spare > 0)  # rows the SLO phase can add to
    r = _rank(c, np.where(pressed, max(n_max - 1, 0), 0), spare)
    priority = np.argsort(-np.asarray(requirement, np.float64), kind="stable")
    slo = _slo_phase(r, priority, target, n_max, spare)
    extra = _global_phase(c, r, 1 + slo, spare - int(slo.sum()))
    return _finish(c, r, 1 + slo + extra, target)


def select_global_greedy(c: CandidateBatch, budget: int) -> Selection:
    """Highest f across all requests until the budget is spent (EAGLE-2 / TETRIS style)."""
    spare = max(budget - c.n, 0)
    r = _rank(c, np.zeros(c.n, np.int64), spare)
    extra = _global_phase(c, r, np.ones(c.n, np.int64), spare)
    return _finish(c, r, 1 + extra, np.ones(c.n))


def select_equal_share(c: CandidateBatch, budget: int) -> Selection:
    """Budget split evenly over requests (earlier rows get the remainder), greedy per tree."""
    share = np.full(c.n, budget // max(c.n, 1), np.int64)
    share[: budget - int(share.sum())] += 1
    r = _rank(c, share - 1, 0)
    take = np.clip(share, 1, r.usable)
    return _finish(c, r, take, np.ones(c.n))


def select_all(c: CandidateBatch) -> Selection:
    """Every usable candidate node: fixed-shape trees and chains, no budget awareness."""
    f = np.exp(c.log_prob)  # padding is -inf: f = 0
    mask = f > 0
    return Selection(mask, np.where(mask, f, 0.0).sum(axis=1), np.ones(c.n))


def select_roots(c: CandidateBatch) -> Selection:
    """Roots only: one token per request, plain continuous batching."""
    mask = np.zeros(c.parent.shape, bool)
    mask[:, :1] = True
    return Selection(mask, np.ones(c.n), np.ones(c.n))

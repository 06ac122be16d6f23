"""Token selection over candidate trees under a hardware budget (seed 002 Algorithm 2).

Every phase works on one ranking: within a request, nodes ordered by f(v) descending, ties
broken by depth then node index. f never grows along a path, so any prefix of that order is
ancestor-closed (seed 002 §A.1). Each phase below takes a prefix per request, so their union
is a prefix too and the selected nodes always form valid trees.

Vectorized numpy, no Python loop over nodes or requests, and no full sort: the SLO phase
ranks only the top n_max of the rows it serves, and the throughput phase is a threshold
found by one O(N) partition (exact ties resolved among the few nodes at the threshold).

Budget accounting follows Algorithm 2: the n roots are verified every iteration and spend
budget first (line 7), so speculation gets B - n tokens. When n >= B the roots still run,
as in continuous batching, and nothing else is selected.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaserve.scheduler.slo import SLO_EPS
from adaserve.scheduler.tree import MIN_LOG_PROB, CandidateBatch


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


def _costs(c: CandidateBatch) -> np.ndarray:
    """-log f per node, +inf for roots, padding and unusable nodes: what competes for budget."""
    neg = np.negative(c.log_prob)  # [n, N]
    neg[neg > -MIN_LOG_PROB] = np.inf
    neg[:, 0] = np.inf  # roots are always verified and never compete
    return neg


def _row_ranking(c: CandidateBatch, neg: np.ndarray, rows: np.ndarray,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """Node indices and f of at least the top ``k`` non-root nodes of each row in ``rows``,
    in exact rank order (f desc, depth, index); f is 0 past a row's usable nodes.

    A value partition finds each row's k-th cost and every node at or below it is kept,
    ties included: a prefix of the row's order, so sorting just that set is exact. (The
    indirect argpartition/argsort are several times slower than the value partition here.)
    """
    sub = neg[rows]  # [P, N]
    p, width = sub.shape
    k = min(k, width)
    kth = np.partition(sub, k - 1, axis=1)[:, k - 1]
    flat = np.flatnonzero(sub <= kth[:, None])  # row-major
    r, col = np.divmod(flat, width)
    counts = np.bincount(r, minlength=p)
    pos = np.arange(flat.size) - (np.cumsum(counts) - counts)[r]
    shape = (p, int(counts.max()))
    cols = np.zeros(shape, np.int64)
    cols[r, pos] = col
    cost = np.full(shape, np.inf)  # past a row's kept nodes: sorts last, f = 0
    cost[r, pos] = sub.ravel()[flat]
    depth = np.zeros(shape, np.int64)
    depth[r, pos] = c.depth[rows[r], col]
    by = np.lexsort((cols, depth, cost), axis=-1)  # last key primary: cost, depth, index
    ri = np.arange(p)[:, None]
    return cols[ri, by], np.exp(-cost[ri, by])


def _mark(mask: np.ndarray, rows: np.ndarray, cols: np.ndarray, take: np.ndarray) -> None:
    """Select the first ``take[i]`` ranked nodes ``cols[i]`` of row ``rows[i]``."""
    ranks = np.arange(cols.shape[1]) < take[:, None]  # [P, K]
    mask[rows[np.nonzero(ranks)[0]], cols[ranks]] = True


def _top_k(c: CandidateBatch, cost: np.ndarray, k: int) -> np.ndarray:
    """Mask of the k cheapest nodes by (cost, depth, request, index), or every finite one."""
    if k <= 0:
        return np.zeros(cost.shape, bool)
    finite = cost < np.inf
    if int(finite.sum()) <= k:
        return finite
    kth = np.partition(cost, k - 1, axis=None)[k - 1]
    chosen = cost < kth
    short = k - int(chosen.sum())
    if short:  # ties at the threshold: lowest depth, then request, then index
        rows, cols = np.nonzero(cost == kth)  # row-major: request, then index ascending
        pick = np.argsort(c.depth[rows, cols], kind="stable")[:short]
        chosen[rows[pick], cols[pick]] = True
    return chosen


def _result(c: CandidateBatch, mask: np.ndarray, target: np.ndarray) -> Selection:
    mask[:, 0] = True
    f = np.exp(c.log_prob, where=mask, out=np.zeros(mask.shape))
    return Selection(mask, f.sum(axis=1), target)


def select_slo_customized(c: CandidateBatch, budget: int, requirement: np.ndarray,
                          target: np.ndarray, n_max: int,
                          worth: np.ndarray | None = None, ascending: bool = False,
                          throughput_rows: np.ndarray | None = None) -> Selection:
    """AdaServe selection: SLO-customized phase, then throughput-optimized phase.

    ``requirement`` orders the SLO phase: most behind (largest) first as seed 002's text
    has it, or smallest first with ``ascending`` as its authors' code does (authors.py);
    ``target`` is A_cap, what each row's tree should sum to (rows at 1 are not served);
    ``n_max`` the tokens a row may hold after the SLO phase, its root included.
    ``worth`` ([n], None = 1) scales what the SLO phase counts a node as, worth[i] * f(v)
    tokens instead of f(v), for a draft known to over- or under-promise on request i; the
    ranking, the throughput phase and ``expected_accepted`` keep the raw f.
    ``throughput_rows`` ([n] bool, None = all): the rows the throughput phase may add to;
    budget it cannot place on them is left unspent (a shorter verify).
    """
    target = np.asarray(target, np.float64)
    spare = max(budget - c.n, 0)
    cost = _costs(c)
    slo_mask = np.zeros(cost.shape, bool)
    pressed = np.flatnonzero(target > 1.0 + SLO_EPS)  # rows the SLO phase can add to
    if spare and n_max > 1 and pressed.size:
        # Algorithm 2 lines 9-17 on the pressed rows: each adds nodes by descending f while
        # its tree's sum (root = 1) is below target and it holds fewer than n_max tokens;
        # rows are served most-behind first until the budget runs out.
        cols, f = _row_ranking(c, cost, pressed, n_max - 1)
        gain = f if worth is None else f * np.asarray(worth, np.float64)[pressed, None]
        # Sequential running sum from the root's 1: the same arithmetic as adding f one
        # node at a time (Algorithm 1), bit for bit. It never decreases, so the nodes still
        # below target form a prefix and counting them is enough.
        acc = np.cumsum(np.concatenate([np.ones((pressed.size, 1)), gain[:, :-1]], axis=1),
                        axis=1)
        wanted = (acc < (target[pressed] - SLO_EPS)[:, None]) & (f > 0)
        need = np.minimum(wanted.sum(axis=1), n_max - 1)  # [P]
        key = np.asarray(requirement, np.float64)[pressed]
        order = np.argsort(key if ascending else -key, kind="stable")
        before = np.cumsum(need[order]) - need[order]
        take = np.empty_like(need)
        take[order] = np.minimum(np.maximum(spare - before, 0), need[order])
        _mark(slo_mask, pressed, cols, take)
        cost[slo_mask] = np.inf
        spare -= int(take.sum())
    # Algorithm 2 lines 18-23: the globally best remaining nodes. Restricted to one request
    # the global order is its own rank order, so the winners extend each prefix.
    if throughput_rows is not None:
        cost[~np.asarray(throughput_rows, bool)] = np.inf
    return _result(c, slo_mask | _top_k(c, cost, spare), target)


def trim(c: CandidateBatch, sel: Selection, cap: np.ndarray) -> Selection:
    """``sel`` with each row cut to its ``cap`` best tokens (root included; inf: no cap).

    Every phase takes a prefix of a row's rank order (f desc, depth, index), so a row's
    selected nodes are its first counts - 1 ranked ones, and its first cap - 1 ranked
    nodes are its best selected ones: still a prefix, so the trees stay ancestor-closed."""
    cap = np.asarray(cap, np.float64)
    rows = np.flatnonzero(sel.counts > cap)  # [P]
    if rows.size == 0:
        return sel
    cols, _ = _row_ranking(c, _costs(c), rows, c.parent.shape[1] - 1)  # [P, K] rank order
    mask = sel.mask.copy()
    mask[rows] = False
    _mark(mask, rows, cols, (cap[rows] - 1).astype(np.int64))
    return _result(c, mask, sel.target)


def top_yield(c: CandidateBatch, k: int) -> np.ndarray:
    """[n] expected tokens of each request's k best nodes, root included: 1 + the sum of
    the k - 1 highest f(v) of its tree (fewer where the tree has fewer usable nodes)."""
    if k <= 1 or c.n == 0:
        return np.ones(c.n)
    _, f = _row_ranking(c, _costs(c), np.arange(c.n), k - 1)
    return 1.0 + f[:, : k - 1].sum(axis=1)


def select_global_greedy(c: CandidateBatch, budget: int) -> Selection:
    """Highest f across all requests until the budget is spent (EAGLE-2 / TETRIS style)."""
    return _result(c, _top_k(c, _costs(c), budget - c.n), np.ones(c.n))


def select_equal_share(c: CandidateBatch, budget: int) -> Selection:
    """Budget split evenly over requests (earlier rows get the remainder), greedy per tree."""
    share = np.full(c.n, budget // max(c.n, 1), np.int64)
    share[: budget - int(share.sum())] += 1
    mask = np.zeros(c.parent.shape, bool)
    rows = np.arange(c.n)
    if int(share.max(initial=0)) > 1:
        cols, f = _row_ranking(c, _costs(c), rows, int(share.max()) - 1)
        _mark(mask, rows, cols, np.minimum(share - 1, (f > 0).sum(axis=1)))
    return _result(c, mask, np.ones(c.n))


def select_all(c: CandidateBatch) -> Selection:
    """Every usable candidate node: fixed-shape trees and chains, no budget awareness."""
    return _result(c, c.log_prob >= MIN_LOG_PROB, np.ones(c.n))


def select_roots(c: CandidateBatch) -> Selection:
    """Roots only: one token per request, plain continuous batching."""
    return _result(c, np.zeros(c.parent.shape, bool), np.ones(c.n))

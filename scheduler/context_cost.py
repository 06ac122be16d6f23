"""A forward's cost measured against context (issue 40, item 4): seconds over a grid of
requests n x tokens per request q x cached context per request c, and B per context.

TurboSpec's linear model (latency.LatencyModel) prices a forward by two sums, so one
extra verified token costs the same gamma at 64 tokens of context as at 8k. On the dev CPU
it does not: the attention kernel's work per query token grows with the context, so 8
query tokens per request cost 1.22x one at short context and ~2.2-2.4x one at 4k-8k
(results/attention_grid.md, results/context-grid/summary.md): the verify budget shrinks as
the context grows (the opposite of a GPU, where long contexts make the forward memory-bound
on the KV read and extra tokens ride free). A table measured on the machine says which.

Why (n, q, mean c) and not the two sums: the sums cannot tell 8 requests x 1 token from
1 x 8, nor 8 x 1k of context from 1 x 8k, and those cost differently. The batch's mean
context stands for its contexts: the attention reads every request's KV once per query
token, sum_i q * c_i = q * n * mean(c), so a batch of mixed contexts does the attention
work of a uniform one at the mean; what is not linear in c (caches, the kernel's tiling)
the table carries along its context axis. The prediction is multilinear in (n, q, c)
between grid points, clamped below the grid (a forward cannot get cheaper with less) and
extrapolated along the last segment above it (TableCost's rule: forwards grow about
linearly in tokens and context past the measured range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from adaserve.scheduler.latency import BUDGET_MAX_RATIO, Budget, budget_by_ratio

_AXES = ("requests", "tokens", "contexts")


@dataclass(frozen=True, slots=True)
class ContextTable:
    """Seconds of one forward: ``seconds[i][j][k]`` for ``requests[i]`` requests of
    ``tokens[j]`` tokens each over ``contexts[k]`` cached tokens each."""

    requests: tuple[int, ...]  # increasing, >= 1
    tokens: tuple[int, ...]  # increasing, >= 1: tokens per request
    contexts: tuple[int, ...]  # increasing, >= 0: cached tokens per request
    seconds: tuple[tuple[tuple[float, ...], ...], ...]  # [n][q][c]
    # the seconds as an array, made once: the policy prices a dozen shapes an iteration
    _array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in _AXES:
            g = np.asarray(getattr(self, name), np.float64)
            low = 0 if name == "contexts" else 1
            if g.ndim != 1 or g.size < 1 or np.any(g < low) or np.any(np.diff(g) <= 0):
                raise ValueError(f"ContextTable.{name} must be increasing integers >= {low}, "
                                 f"got {getattr(self, name)!r}")
        s = np.asarray(self.seconds, np.float64)
        shape = (len(self.requests), len(self.tokens), len(self.contexts))
        if s.shape != shape:
            raise ValueError(f"ContextTable.seconds must have shape {shape} (requests x tokens "
                             f"x contexts), got {s.shape}")
        if not (np.all(np.isfinite(s)) and np.all(s > 0)):
            raise ValueError("ContextTable.seconds must be finite and > 0; drop failed runs")
        s.setflags(write=False)
        object.__setattr__(self, "_array", s)  # [N, Q, C]

    @classmethod
    def measured(cls, requests, tokens, contexts, seconds: Any) -> ContextTable:
        """A table from timings [n, q, c]: made non-decreasing along every axis first (a
        running max, as budget_by_ratio does with its curve), since a forward cannot get
        cheaper with more requests, tokens or context and one lucky sample must not say so."""
        s = np.asarray(seconds, np.float64)  # [n, q, c]
        for axis in range(3):
            s = np.maximum.accumulate(s, axis=axis)
        return cls(tuple(int(x) for x in requests), tuple(int(x) for x in tokens),
                   tuple(int(x) for x in contexts), _nested(s))

    def predict(self, context_tokens: Any, batch_tokens: Any, requests: int | None = None) -> float:
        """Seconds of a forward of ``batch_tokens`` tokens over ``context_tokens`` cached
        ones (both summed over the batch) for ``requests`` requests; None: one request (a
        prefill chunk, or a caller that does not know the batch)."""
        n = 1 if requests is None else max(int(requests), 1)
        at = (float(n), float(batch_tokens) / n, float(context_tokens) / n)
        s = self._array  # [N, Q, C]
        lo, hi, w = zip(*(_bracket(getattr(self, a), x) for a, x in zip(_AXES, at)))
        total = 0.0
        for corner in range(8):  # the 2^3 corners of the cell, weighted multilinearly
            bits = [(corner >> a) & 1 for a in range(3)]
            idx = tuple(hi[a] if bits[a] else lo[a] for a in range(3))
            weight = math.prod(w[a] if bits[a] else 1.0 - w[a] for a in range(3))
            total += weight * float(s[idx])
        return max(total, 0.0)

    def to_dict(self) -> dict:
        """JSON-ready (the profile's and a hardware model's entry)."""
        return {"requests": list(self.requests), "tokens": list(self.tokens),
                "contexts": list(self.contexts), "seconds": self._array.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ContextTable:
        missing = [k for k in (*_AXES, "seconds") if k not in d]
        if missing:
            raise ValueError(f"a context table needs {missing}")
        return cls(tuple(int(x) for x in d["requests"]), tuple(int(x) for x in d["tokens"]),
                   tuple(int(x) for x in d["contexts"]),
                   _nested(np.asarray(d["seconds"], np.float64)))


def _nested(s: np.ndarray) -> tuple:
    return tuple(tuple(tuple(float(v) for v in row) for row in plane) for plane in s)


def _bracket(grid: tuple[int, ...], x: float) -> tuple[int, int, float]:
    """(lower index, upper index, weight of the upper) for x on one axis: clamped at the
    first point, extrapolated along the last segment past the last, constant on a
    one-point axis."""
    if len(grid) == 1 or x <= grid[0]:
        return 0, 0, 0.0
    i = min(int(np.searchsorted(grid, x, side="right")) - 1, len(grid) - 2)
    return i, i + 1, (x - grid[i]) / (grid[i + 1] - grid[i])


def budget_curve(table: ContextTable, context: int) -> tuple[list[int], list[float]]:
    """The profile's budget curve read off the table at ``context`` tokens per request:
    up to the most requests measured, roots of one token each, then those requests
    sharing more tokens each (profiler.KNEE_TOKENS's shape), as a verify spreads B."""
    n_max = table.requests[-1]
    shapes = [(n, 1) for n in table.requests] + [(n_max, q) for q in table.tokens[1:]]
    if 1 not in table.tokens:
        raise ValueError("a budget curve needs the table's one-token forwards (tokens 1)")
    tokens = [n * q for n, q in shapes]
    seconds = [table.predict(n * context, n * q, n) for n, q in shapes]
    return tokens, seconds


def budget_at(table: ContextTable, context: float, max_ratio: float = BUDGET_MAX_RATIO
              ) -> Budget | None:
    """B at ``context`` tokens per request by the ratio rule (latency.budget_by_ratio: the
    most tokens whose forward costs <= max_ratio x a one-token forward there, on the
    table's interpolated curve); None when the table has fewer than 4 points on its budget
    curve (the rule needs 4)."""
    if len(table.requests) + len(table.tokens) - 1 < 4 or table.tokens[0] != 1:
        return None
    return budget_by_ratio(*budget_curve(table, context), max_ratio=max_ratio)


def budget_table(table: ContextTable, max_ratio: float = BUDGET_MAX_RATIO
                 ) -> dict[int, Budget] | None:
    """B at each measured context (``budget_at``); None for a table too small for it."""
    if budget_at(table, table.contexts[0], max_ratio) is None:
        return None
    return {c: budget_at(table, c, max_ratio) for c in table.contexts}


def budget_table_text(budgets: Mapping[int, Budget] | None) -> str:
    """"B by context: 64: 8, 2048: 4, 8192: 1" for logs; "" without a table."""
    if not budgets:
        return ""
    return "B by context: " + ", ".join(f"{c}: {b.tokens}" for c, b in budgets.items())

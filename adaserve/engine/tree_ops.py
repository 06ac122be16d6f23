"""Vectorized helpers over per-request token trees stored as parent-index arrays."""

from __future__ import annotations

import numpy as np


def ancestor_matrix(parent: np.ndarray, valid: np.ndarray, max_depth: int) -> np.ndarray:
    """[n, Q, Q] bool: anc[i, a, b] iff b is a or an ancestor of a in row i.

    parent: [n, Q] int64, -1 for roots and padding. Pointer jumping, one pass per level.
    """
    n, q = parent.shape
    anc = np.zeros((n, q, q), dtype=bool)
    rows = np.broadcast_to(np.arange(n)[:, None], (n, q))
    cols = np.broadcast_to(np.arange(q)[None, :], (n, q))
    cur = np.where(valid, cols, -1)
    for _ in range(max_depth + 1):
        live = cur >= 0
        anc[rows[live], cols[live], cur[live]] = True
        cur = np.where(live, np.take_along_axis(parent, np.maximum(cur, 0), 1), -1)
    return anc

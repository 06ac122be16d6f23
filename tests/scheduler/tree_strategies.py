"""Hypothesis strategies for candidate trees and batches, shared by the scheduler tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from adaserve.scheduler import CandidateTree

# A small set of edge probabilities makes ties between nodes common, which is where
# tie-breaking and ancestor-closure bugs live. 1.0 gives f(child) == f(parent).
EDGE_PROBS = [1.0, 0.9, 0.5, 0.5, 0.25, 0.125, 0.1, 0.01, 0.0]


@st.composite
def trees(draw, max_nodes: int = 16, tie_heavy: bool | None = None) -> CandidateTree:
    size = draw(st.integers(1, max_nodes))
    parent = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, size)]
    if tie_heavy if tie_heavy is not None else draw(st.booleans()):
        edge = [0.0] + [draw(st.sampled_from(EDGE_PROBS)) for _ in range(1, size)]
    else:
        edge = [0.0] + [draw(st.floats(0.0, 1.0)) for _ in range(1, size)]
    with np.errstate(divide="ignore"):
        log_edge = np.log(np.array(edge))
    log_edge[0] = 0.0
    return CandidateTree.from_edges(parent, np.arange(size), log_edge)


@st.composite
def expanded_trees(draw) -> CandidateTree:
    """A fully expanded |V|-ary tree of depth D: every node's children carry a distribution."""
    vocab, depth = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    parent, edge, frontier = [-1], [0.0], [0]
    for _ in range(depth):
        nxt = []
        for p in frontier:
            weights = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=vocab + 1,
                                             max_size=vocab + 1)))
            probs = weights[:vocab] / weights.sum()  # the rest of the mass is off-tree
            for q in probs:
                parent.append(p)
                edge.append(float(np.log(q)))
                nxt.append(len(parent) - 1)
        frontier = nxt
    return CandidateTree.from_edges(parent, np.arange(len(parent)), edge)


def is_ancestor_closed(tree: CandidateTree, nodes: np.ndarray) -> bool:
    chosen = set(int(v) for v in nodes)
    return 0 in chosen and all(v == 0 or int(tree.parent[v]) in chosen for v in chosen)

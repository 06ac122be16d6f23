"""Acceptance models: candidate trees and what the target would say about every node.

One interface, several models (issue 17): *synthetic* (synthetic.py: per-request alignment,
per-node draft probabilities, a miscalibration parameter) and *replay* (replay.py: the
real draft's distributions and the target's tokens, recorded from the real pair by
record.py); models.py loads either by name or file. A model grows the trees the policy selects from and fixes, for every node,
the token the target emits after that node's path. Verification is then the walk every
executor does (DESIGN.md step 6): from the root, descend into the selected child carrying
the target's token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan

DATA = Path(__file__).parent / "data" / "acceptance"


@dataclass(frozen=True, slots=True)
class SimTrees:
    candidates: CandidateBatch  # [n, N] trees, as a draft model would grow them
    target_token: np.ndarray  # [n, N] int64, the target's token after each node's path


class AcceptanceModel(ABC):
    @abstractmethod
    def trees(self, reqs: Sequence[Request], plan: SpecPlan) -> SimTrees:
        """Candidate trees for the decoding requests (plan.depth 0: the roots alone)."""

    def root_tokens(self, reqs: Sequence[Request]) -> np.ndarray:
        """[n] int64 the target's token after each request's committed tokens: what an
        iteration without a draft emits (the roots-alone trees' only verdict)."""
        return self.trees(reqs, SpecPlan(depth=0, width=0)).target_token[:, 0]


def walk(c: CandidateBatch, mask: np.ndarray, target_token: np.ndarray
         ) -> tuple[list[np.ndarray], list[list[int]]]:
    """The acceptance walk over selected nodes (mask [n, N], ancestor-closed): a node is
    accepted iff it is selected, carries the target's token at its parent and its parent
    is accepted. Returns per request the accepted non-root nodes (root-down) and the new
    tokens (accepted tokens, then the target's bonus token)."""
    n = mask.shape[0]
    rows = np.arange(n)
    # Siblings carry distinct tokens (a draft proposes a token once per node), so at most
    # one child of an accepted node matches: the accepted nodes are one path per request,
    # found a depth at a time for the whole batch, with no loop over requests.
    says = target_token[rows[:, None], np.maximum(c.parent, 0)]  # [n, N] at each parent
    match = mask & (c.token == says)  # the root's parent index -1 never equals a node
    cur = np.zeros(n, np.int64)  # [n] deepest accepted node so far (the root first)
    alive = np.ones(n, bool)  # [n] rows whose path may still grow
    length = np.zeros(n, np.int64)
    steps = []
    while True:
        child = match & (c.parent == cur[:, None])  # [n, N]
        nxt = child.argmax(1)
        alive &= child[rows, nxt]
        if not alive.any():
            break
        cur = np.where(alive, nxt, cur)
        length += alive
        steps.append(cur)
    path = np.stack(steps, 1) if steps else np.zeros((n, 0), np.int64)  # [n, D]
    # accepted tokens then the bonus, which lands at column length[i]
    tokens = np.concatenate([c.token[rows[:, None], path], np.zeros((n, 1), np.int64)], 1)
    tokens[rows, length] = target_token[rows, cur]
    lens = length.tolist()
    return ([p[:k] for p, k in zip(path, lens)],
            [t[:k + 1] for t, k in zip(tokens.tolist(), lens)])

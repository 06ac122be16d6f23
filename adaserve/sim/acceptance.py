"""Acceptance models: candidate trees and what the target would say about every node.

One interface, several models (issue 17): *synthetic* (synthetic.py: per-request alignment,
per-node draft probabilities, a miscalibration parameter) and *replay* (replay.py: the
real draft's distributions and the target's tokens, recorded from the real pair by
record.py). A model grows the trees the policy selects from and fixes, for every node,
the token the target emits after that node's path. Verification is then the walk every
executor does (DESIGN.md step 6): from the root, descend into the selected child carrying
the target's token.
"""

from __future__ import annotations

import json
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


def walk(c: CandidateBatch, mask: np.ndarray, target_token: np.ndarray
         ) -> tuple[list[np.ndarray], list[list[int]]]:
    """The acceptance walk over selected nodes (mask [n, N], ancestor-closed): a node is
    accepted iff it is selected, carries the target's token at its parent and its parent
    is accepted. Returns per request the accepted non-root nodes (root-down) and the new
    tokens (accepted tokens, then the target's bonus token)."""
    n, width = mask.shape
    safe_parent = np.maximum(c.parent, 0)
    parent_says = np.take_along_axis(target_token, safe_parent, 1)  # [n, N]
    match = mask & (c.token == parent_says) & (c.parent >= 0)
    accepted = np.zeros((n, width), bool)
    accepted[:, 0] = True
    for d in range(1, int(c.depth.max()) + 1):  # parents first
        layer = c.depth == d
        accepted |= layer & match & np.take_along_axis(accepted, safe_parent, 1)
    accepted[:, 0] = False
    nodes, tokens = [], []
    for i in range(n):
        path = np.flatnonzero(accepted[i])
        path = path[np.argsort(c.depth[i, path], kind="stable")]
        last = int(path[-1]) if path.size else 0
        nodes.append(path)
        tokens.append(c.token[i, path].tolist() + [int(target_token[i, last])])
    return nodes, tokens


def load_acceptance(name_or_path: str | Path) -> AcceptanceModel:
    """A shipped acceptance model by name, a JSON file (synthetic), or a recording (.npz,
    replay)."""
    # these modules import this one
    from adaserve.sim.replay import Recording, ReplayAcceptance
    from adaserve.sim.synthetic import SyntheticAcceptance

    path = Path(name_or_path)
    if path.suffix == ".npz" and path.is_file():
        return ReplayAcceptance(Recording.load(path))
    if not path.is_file():
        path = DATA / f"{name_or_path}.json"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in DATA.glob("*.json")))
        raise ValueError(f"no acceptance model {name_or_path!r}; shipped: {shipped}, "
                         "or give a JSON file")
    d = json.loads(path.read_text())
    if d.get("kind") != "synthetic":
        raise ValueError(f"{path}: a JSON acceptance model has kind 'synthetic' (replay "
                         "models are .npz recordings)")
    return SyntheticAcceptance.from_dict(d)

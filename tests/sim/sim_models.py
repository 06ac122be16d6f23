"""Hand-checkable models for the simulator's tests."""

from __future__ import annotations

import numpy as np

from adaserve.scheduler import CandidateBatch, CandidateTree, LatencyModel, SpecPlan
from adaserve.sim import AcceptanceModel, HardwareModel, SimTrees


class ChainAcceptance(AcceptanceModel):
    """Chains of the plan's depth, tokens 1..d, edge probability 0.9 each; the target takes
    the first ``accept`` of them and then says 100 + depth."""

    def __init__(self, accept: int) -> None:
        self.accept = accept

    def trees(self, reqs, plan: SpecPlan) -> SimTrees:
        d = plan.depth
        tree = CandidateTree.from_edges(np.arange(-1, d), np.arange(d + 1),
                                        np.r_[0.0, np.full(d, np.log(0.9))])
        cands = CandidateBatch.from_trees([tree] * len(reqs))
        cands.token[:, 0] = [r.tokens[-1] for r in reqs]
        says = np.where(np.arange(d + 1) < self.accept, np.arange(1, d + 2), 100 + np.arange(d + 1))
        return SimTrees(cands, np.tile(says, (len(reqs), 1)))


def linear_hardware(draft_per_token_s: float = 0.0, **kw) -> HardwareModel:
    """Verify 10 ms + 1 ms per token, a draft step 2 ms (+ draft_per_token_s per token), no
    context cost."""
    return HardwareModel(name="test", target_model="t", draft_model="d", gpu="none", tp=1,
                         source="tests", target=LatencyModel(0.0, 1e-3, 10e-3),
                         draft=LatencyModel(0.0, draft_per_token_s, 2e-3), budget=4,
                         baseline_latency_ms=10.0, **kw)

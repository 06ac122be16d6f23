"""The synthetic acceptance model: per-request alignment, per-node draft probabilities and a
miscalibrated map from the draft's probabilities to what the target accepts.

Every node v has a key (a hash of the request's seed, the root's position and the ranks on
the path to v), so everything about v is a pure function of where it sits: the same node
gets the same draws whichever policy grows it, and runs are repeatable.

At node v the draft's distribution over its top_k children is geometric,
q_k = p (1 - p)^k for k = 0..top_k-1, with p = sigmoid(logit(a_r) + node_spread * L_v): a_r
is the request's alignment, sigmoid(logit(alignment) + request_spread * L_r), and L_v, L_r
are standard logistic draws (logit of a keyed uniform). The target's token after v is
child k with probability t_k = min(q_k ** miscalibration, 1 - sum_{j<k} t_j), else a token
outside the ranked children (its token id is the rank count). miscalibration 1 is a
calibrated draft (f(v) is exactly the chance the target accepts v's path); < 1 the draft
under-promises, as the measured CPU pair does (0.83: results/draft.md, fitted by
benchmarks/sim/fit_synthetic.py). Acceptance equal to f(v) would flatter Algorithm 2 by
construction.

Candidate trees come from the real draft's beam search (adaserve.engine.beam) over these
distributions. Token ids are ranks: child k of any node carries token k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adaserve.engine.beam import TreeArrays, beam_step, layer_widths
from adaserve.engine.request import Request
from adaserve.engine.sampling import keyed_uniform, splitmix64
from adaserve.scheduler import CandidateBatch, SpecPlan
from adaserve.sim.acceptance import AcceptanceModel, SimTrees

_P_MIN, _P_MAX = 1e-4, 1.0 - 1e-4
_DRAFT_P, _TARGET_U, _ALIGN = 1, 2, 3  # keyed_uniform streams
_S11 = np.array(11, np.uint64)  # a 0-d array: numpy's fast path, unlike a np.uint64


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = _clip(p)
    return np.log(p) - np.log1p(-p)


def _clip(p: np.ndarray | float) -> np.ndarray:
    # np.clip's values without its Python wrapper, which cost more than the arithmetic at
    # these sizes
    return np.minimum(np.maximum(p, _P_MIN), _P_MAX)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _child_key(key: np.ndarray, token: np.ndarray) -> np.ndarray:
    # the top 53 bits: keyed_uniform's draw * 2^53, exactly, without the float round trip
    return splitmix64(key, token + 17) >> _S11


@dataclass(frozen=True, slots=True)
class SyntheticParams:
    """Defaults: data/acceptance/synthetic-cpu-pair.json, the measured CPU pair (a test
    keeps the two equal; the file names the sources)."""

    top_k: int = 8  # children the draft proposes per node
    alignment: float = 0.42  # median top-1 draft probability, in (0, 1)
    request_spread: float = 0.5  # logistic scale of alignment across requests (0: all equal)
    node_spread: float = 1.0  # logistic scale of p across the nodes of one request
    miscalibration: float = 0.83  # gamma: the target accepts child k w.p. q_k ** gamma

    def __post_init__(self) -> None:
        if not (isinstance(self.top_k, int) and 1 <= self.top_k <= 4096):
            raise ValueError(f"top_k must be an integer in [1, 4096], got {self.top_k!r}")
        if not 0.0 < self.alignment < 1.0:
            raise ValueError(f"alignment must be in (0, 1), got {self.alignment!r}")
        for name in ("request_spread", "node_spread", "miscalibration"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        if self.miscalibration == 0:
            raise ValueError("miscalibration must be > 0 (1 = calibrated)")


class SyntheticAcceptance(AcceptanceModel):
    def __init__(self, params: SyntheticParams | None = None, name: str = "synthetic") -> None:
        self.params = params or SyntheticParams()
        self.name = name

    @classmethod
    def from_dict(cls, d: dict) -> SyntheticAcceptance:
        fields = {k: d[k] for k in SyntheticParams.__dataclass_fields__ if k in d}
        return cls(SyntheticParams(**fields), d.get("name", "synthetic"))

    # ---- per-node draws --------------------------------------------------------------

    def _draft_logp(self, key: np.ndarray, align_logit: np.ndarray, ranks: int) -> np.ndarray:
        """[..., ranks] log q at nodes with keys [...] of requests with alignment logits."""
        pr = self.params
        u = keyed_uniform(key, np.array(_DRAFT_P))  # elementwise: any shape
        p = _clip(_sigmoid(align_logit + pr.node_spread * _logit(u)))[..., None]
        return np.log(p) + np.arange(ranks) * np.log1p(-p)

    def _target_token(self, logq: np.ndarray, key: np.ndarray) -> np.ndarray:
        """[...] the target's choice: a child rank, or the rank count for a token outside."""
        t = np.exp(logq * self.params.miscalibration)  # [..., K] q_k ** gamma
        cum = np.minimum(np.cumsum(t, axis=-1), 1.0)  # capping t_k keeps the total <= 1
        u = keyed_uniform(key, np.array(_TARGET_U))
        return np.count_nonzero(u[..., None] >= cum, axis=-1).astype(np.int64)

    # ---- trees --------------------------------------------------------------------------

    def _roots(self, reqs: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
        """[n] the requests' alignment logits and their roots' keys."""
        n, pr = len(reqs), self.params
        seed = np.array([r.seed for r in reqs], dtype=np.uint64)
        u_req = keyed_uniform(seed, np.full(n, _ALIGN))
        align = _logit(pr.alignment) + pr.request_spread * _logit(u_req)  # [n]
        return align, splitmix64(seed, np.array([len(r.tokens) for r in reqs])) >> _S11

    def root_tokens(self, reqs: Sequence[Request]) -> np.ndarray:
        align, root_key = self._roots(reqs)
        logq = self._draft_logp(root_key, align, self.params.top_k)  # [n, top_k]
        return self._target_token(logq, root_key)

    def trees(self, reqs: Sequence[Request], plan: SpecPlan) -> SimTrees:
        n, pr = len(reqs), self.params
        roots = [r.tokens[-1] for r in reqs]
        if not plan.speculates:
            return SimTrees(CandidateBatch.roots(roots), self.root_tokens(reqs)[:, None])
        align, root_key = self._roots(reqs)
        widths = layer_widths(plan, n)
        # the draft ranks as many children as a layer may keep of one node (a beam of w
        # can take all w from the best node); ranks past top_k continue the geometric tail
        ranks = max(pr.top_k, *widths)
        # numpy arrays (beam_step's top-k alone is torch's, on a view): these hold a few
        # thousand values, and torch's per-call overhead was most of the iteration's cost
        tree = TreeArrays(n, widths, xp=np)
        key = np.empty((n, tree.n_nodes), np.uint64)
        logq = np.empty((n, tree.n_nodes, ranks))
        key[:, 0] = root_key
        logq[:, 0] = self._draft_logp(root_key, align, ranks)
        expansion = plan.expansion is not None
        rows = np.arange(n)[:, None]
        for k in widths:
            p_off, p_len = tree.prev
            local_parent, tok, lp = beam_step(tree.log_prob[:, p_off:p_off + p_len],
                                              logq[:, p_off:p_off + p_len], k, expansion)
            off, width = tree.add_layer(local_parent, tok, lp)
            new_key = _child_key(key[rows, tree.parent[:, off:off + width]], tok)
            key[:, off:off + width] = new_key
            logq[:, off:off + width] = self._draft_logp(new_key, align[:, None], ranks)
        cands = tree.candidates(roots)
        return SimTrees(cands, self._target_token(logq, key))

"""The shape logic of the draft's beam search (seed 002 §4.1), apart from any model.

The real draft (draft.py) feeds it model log-probabilities; the simulator
(adaserve.sim.synthetic) feeds it synthetic per-node top-K distributions. Both grow the
same trees: per request, layer 1 takes the root's best children; each later layer keeps
the best paths out of (previous layer x vocabulary), or, for SpecInfer's fixed expansion,
a fixed number of children per node.

Both take torch tensors (the real draft: a top-k over a whole vocabulary) or numpy arrays
(the synthetic model: a few thousand values per layer, where torch's per-call overhead
was most of a simulated iteration's cost).
"""

from __future__ import annotations

import numpy as np
import torch

from adaserve.scheduler import CandidateBatch, SpecPlan


def layer_widths(plan: SpecPlan, n: int) -> list[int]:
    """Nodes per request in each layer below the root."""
    return [s // n for s in plan.layer_sizes(n)[1:]]


def beam_step(path_lp: torch.Tensor | np.ndarray, step_logp: torch.Tensor | np.ndarray, k: int,
              expansion: bool) -> tuple:
    """The next layer's k nodes per request.

    path_lp: [n, L] float64 log f of the previous layer; step_logp: [n, L, V] float64 next-
    token log-probabilities at each of its nodes. Returns local parent (index into the L
    previous nodes), token index into V and log f, each [n, k], of the inputs' kind.
    """
    if isinstance(step_logp, np.ndarray):
        return _beam_step_numpy(path_lp, step_logp, k, expansion)
    n, p_len, vocab = step_logp.shape
    path = path_lp[:, :, None] + step_logp  # [n, L, V]
    if not expansion:  # beam: the best k paths out of L * V
        best = path.view(n, -1).topk(k, dim=-1)
        return best.indices // vocab, best.indices % vocab, best.values
    e = k // p_len  # SpecInfer: a fixed number of children per node
    best = path.topk(e, dim=-1)  # [n, L, e]
    local_parent = torch.arange(p_len).repeat_interleave(e)[None].expand(n, k)
    return local_parent, best.indices.reshape(n, k), best.values.reshape(n, k)


def _beam_step_numpy(path_lp: np.ndarray, step_logp: np.ndarray, k: int, expansion: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """beam_step on numpy arrays. The top-k itself is torch's, on a view of the same
    memory, so equal paths are ordered exactly as for torch inputs (torch does not
    specify that order, and the synthetic model's clipped probabilities do tie)."""
    n, p_len, vocab = step_logp.shape
    path = path_lp[:, :, None] + step_logp  # [n, L, V]
    if not expansion:
        best = torch.from_numpy(path.reshape(n, -1)).topk(k, dim=-1)
        local_parent, token = np.divmod(best.indices.numpy(), vocab)
        return local_parent, token, best.values.numpy()
    e = k // p_len
    best = torch.from_numpy(path).topk(e, dim=-1)  # [n, L, e]
    local_parent = np.broadcast_to(np.repeat(np.arange(p_len), e), (n, k))
    return local_parent, best.indices.numpy().reshape(n, k), best.values.numpy().reshape(n, k)


class TreeArrays:
    """n candidate trees of a plan's shape, filled layer by layer (root at node 0), as
    torch tensors or, with ``xp=numpy``, numpy arrays (whichever beam_step is fed)."""

    def __init__(self, n: int, widths: list[int], xp=torch) -> None:
        self.n_nodes, self.xp = 1 + sum(widths), xp
        self.token = xp.zeros((n, self.n_nodes), dtype=xp.int64)
        self.log_prob = xp.zeros((n, self.n_nodes), dtype=xp.float64)
        self.parent = xp.full((n, self.n_nodes), -1, dtype=xp.int64)
        self.depth = xp.zeros((n, self.n_nodes), dtype=xp.int64)
        self.prev = (0, 1)  # (offset, width) of the last layer added

    def add_layer(self, local_parent: torch.Tensor, token: torch.Tensor,
                  log_prob: torch.Tensor) -> tuple[int, int]:
        """Append a layer whose parents index the previous layer; returns (offset, width)."""
        p_off, p_len = self.prev
        off, k = p_off + p_len, token.shape[1]
        self.token[:, off:off + k] = token
        self.log_prob[:, off:off + k] = log_prob
        self.parent[:, off:off + k] = p_off + local_parent
        self.depth[:, off:off + k] = self.depth[0, p_off] + 1
        self.prev = (off, k)
        return self.prev

    def candidates(self, roots: list[int]) -> CandidateBatch:
        self.token[:, 0] = self.xp.asarray(roots, dtype=self.xp.int64)
        n = self.token.shape[0]
        # np.asarray of a CPU tensor is a view, as .numpy() is
        return CandidateBatch(np.asarray(self.parent), np.asarray(self.token),
                              np.asarray(self.log_prob), np.asarray(self.depth),
                              np.full(n, self.n_nodes, np.int64))

"""Speculation: batched draft beam search that grows one candidate tree per request.

Step 1 feeds each request's root (after any tokens the draft has not seen yet); each later
step feeds the previous layer's n x L nodes under a tree mask (seed 002 §4.1). Layer nodes
live in scratch columns after the root, so their K/V can be kept for the accepted path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaserve.engine.batch import chunk_batch, tree_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.model import Llama
from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan


@dataclass(frozen=True, slots=True)
class DraftTrees:
    candidates: CandidateBatch  # tree node t >= 1 has draft K/V at scratch column t - 1
    scratch_base: np.ndarray  # [n] int64, first scratch column of each request
    fed_depth: int  # nodes shallower than this were fed to the draft (their K/V exist)


def draft_trees(model: Llama, kv: KVCache, reqs: list[Request], plan: SpecPlan,
                token_ids: torch.Tensor | None = None) -> DraftTrees:
    """Candidate trees for the n decoding requests in slots [0, n).

    ``token_ids`` maps a draft whose head covers a vocabulary subset back to target ids.
    Updates each request's draft_len to cover its whole committed sequence.
    """
    n = len(reqs)
    starts = torch.tensor([r.draft_len for r in reqs], dtype=torch.int64)
    fb = chunk_batch(slice(0, n), starts, [r.tokens[r.draft_len:] for r in reqs],
                     kv.trash_col, "last")
    logp = torch.log_softmax(model(kv, fb).float(), dim=-1)  # [n, V']
    for r in reqs:
        r.draft_len = len(r.tokens)
    m = torch.tensor([len(r.tokens) for r in reqs], dtype=torch.int64)
    sizes = [s // n for s in plan.layer_sizes(n)[1:]]  # nodes per request per layer
    n_nodes = 1 + sum(sizes)
    tok = torch.zeros(n, n_nodes, dtype=torch.int64)
    lp = torch.zeros(n, n_nodes, dtype=torch.float64)
    parent = torch.full((n, n_nodes), -1, dtype=torch.int64)
    depth = torch.zeros(n, n_nodes, dtype=torch.int64)
    anc = torch.zeros(n, n_nodes - 1, n_nodes - 1, dtype=torch.bool)  # over scratch nodes

    # Layer 1: the best children of the root.
    k1 = sizes[0]
    top = logp.topk(k1, dim=-1)
    off = 1
    tok[:, off:off + k1] = _to_target(top.indices, token_ids)
    lp[:, off:off + k1] = top.values.double()
    parent[:, off:off + k1] = 0
    depth[:, off:off + k1] = 1
    prev = (off, k1)
    for step in range(2, plan.depth + 1):
        p_off, p_len = prev
        scratch = torch.arange(p_off - 1, p_off - 1 + p_len)  # [L]
        # a node sees what its parent sees, and itself
        par = parent[:, p_off:p_off + p_len]  # [n, L] tree indices
        par_rows = anc[torch.arange(n)[:, None], (par - 1).clamp(min=0)]  # [n, L, S]
        anc[:, scratch] = par_rows & (par >= 1)[:, :, None]
        anc[:, scratch, scratch] = True
        fb = tree_batch(slice(0, n), m, m - 1, tok[:, p_off:p_off + p_len],
                        depth[:, p_off:p_off + p_len], scratch[None].expand(n, p_len),
                        anc[:, scratch], torch.ones(n, p_len, dtype=torch.bool), kv.trash_col)
        v = model(kv, fb).float()
        vocab = v.shape[-1]
        path = lp[:, p_off:p_off + p_len, None] + torch.log_softmax(v, -1).view(
            n, p_len, vocab).double()  # [n, L, V']
        k = sizes[step - 1]
        if plan.expansion is None:  # beam: the best w paths out of L * V'
            best = path.view(n, -1).topk(k, dim=-1)
            local_parent, new_tok, new_lp = best.indices // vocab, best.indices % vocab, best.values
        else:  # SpecInfer: a fixed number of children per node
            e = k // p_len
            best = path.topk(e, dim=-1)  # [n, L, e]
            local_parent = torch.arange(p_len).repeat_interleave(e)[None].expand(n, k)
            new_tok, new_lp = best.indices.reshape(n, k), best.values.reshape(n, k)
        off = p_off + p_len
        tok[:, off:off + k] = _to_target(new_tok, token_ids)
        lp[:, off:off + k] = new_lp
        parent[:, off:off + k] = p_off + local_parent
        depth[:, off:off + k] = step
        prev = (off, k)
    tok[:, 0] = torch.tensor([r.tokens[-1] for r in reqs])
    cands = CandidateBatch(parent.numpy(), tok.numpy(), lp.numpy(), depth.numpy(),
                           np.full(n, n_nodes, np.int64))
    return DraftTrees(cands, m.numpy(), plan.depth)


def _to_target(idx: torch.Tensor, token_ids: torch.Tensor | None) -> torch.Tensor:
    return idx if token_ids is None else token_ids[idx]

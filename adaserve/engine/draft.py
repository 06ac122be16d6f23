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
from adaserve.engine.beam import TreeArrays, beam_step, layer_widths
from adaserve.engine.draft_window import DraftWindow
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.model import Llama
from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan


@dataclass(frozen=True, slots=True)
class DraftTrees:
    candidates: CandidateBatch  # tree node t >= 1 has draft K/V at scratch column t - 1
    scratch_base: np.ndarray  # [n] int64, first scratch column of each request
    committed: np.ndarray  # [n] int64, tokens each request had (node at depth k: position
    #                        committed - 1 + k)
    fed_depth: int  # nodes shallower than this were fed to the draft (their K/V exist)


def draft_trees(model: Llama, kv: KVCache, reqs: list[Request], draft_len: np.ndarray,
                plan: SpecPlan, token_ids: torch.Tensor | None = None,
                window: DraftWindow | None = None) -> DraftTrees:
    """Candidate trees for the n decoding requests in slots [0, n).

    ``draft_len`` [>= n] holds the tokens each slot's draft cache has seen; they are fed the
    rest of their committed sequence first, and it is updated to cover it. ``token_ids``
    maps a draft whose head covers a vocabulary subset back to target ids. ``window``: the
    draft's KV is bounded (draft_window.py), else it holds the whole context.
    """
    n = len(reqs)
    starts = torch.from_numpy(draft_len[:n].copy())
    catch_up = [r.tokens[int(draft_len[i]):] for i, r in enumerate(reqs)]
    if window is None:
        logits = model(kv, chunk_batch(slice(0, n), starts, catch_up, kv.trash_col, "last"))
    else:
        logits = window.feed(model, kv, slice(0, n), starts, catch_up, want_logits=True)
    logp = torch.log_softmax(logits.float(), dim=-1)  # [n, V']
    m = torch.tensor([len(r.tokens) for r in reqs], dtype=torch.int64)
    draft_len[:n] = m.numpy()
    # the tree's scratch starts after the columns the context occupies
    col = m if window is None else m.clamp(max=window.ring_end)  # [n]
    sizes = layer_widths(plan, n)
    tree = TreeArrays(n, sizes)
    anc = torch.zeros(n, tree.n_nodes - 1, tree.n_nodes - 1, dtype=torch.bool)  # scratch nodes

    # Layer 1: the best children of the root.
    top = logp.topk(sizes[0], dim=-1)
    tree.add_layer(torch.zeros_like(top.indices), _to_target(top.indices, token_ids),
                   top.values.double())
    for step in range(2, plan.depth + 1):
        p_off, p_len = tree.prev
        scratch = torch.arange(p_off - 1, p_off - 1 + p_len)  # [L]
        # a node sees what its parent sees, and itself
        par = tree.parent[:, p_off:p_off + p_len]  # [n, L] tree indices
        par_rows = anc[torch.arange(n)[:, None], (par - 1).clamp(min=0)]  # [n, L, S]
        anc[:, scratch] = par_rows & (par >= 1)[:, :, None]
        anc[:, scratch, scratch] = True
        fb = tree_batch(slice(0, n), col, m - 1, tree.token[:, p_off:p_off + p_len],
                        tree.depth[:, p_off:p_off + p_len], scratch[None].expand(n, p_len),
                        anc[:, scratch], torch.ones(n, p_len, dtype=torch.bool), kv.trash_col)
        v = model(kv, fb).float()
        step_logp = torch.log_softmax(v, -1).view(n, p_len, v.shape[-1]).double()  # [n, L, V']
        local_parent, new_tok, new_lp = beam_step(tree.log_prob[:, p_off:p_off + p_len],
                                                  step_logp, sizes[step - 1],
                                                  plan.expansion is not None)
        tree.add_layer(local_parent, _to_target(new_tok, token_ids), new_lp)
    cands = tree.candidates([r.tokens[-1] for r in reqs])
    return DraftTrees(cands, col.numpy(), m.numpy(), plan.depth)


def _to_target(idx: torch.Tensor, token_ids: torch.Tensor | None) -> torch.Tensor:
    return idx if token_ids is None else token_ids[idx]

"""Verification: every selected node of every request in ONE target forward, then the
acceptance walk (DESIGN.md step 6) and the K/V commit of each accepted path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaserve.engine.batch import tree_batch
from adaserve.engine.executor import VerifyResult
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.model import Llama
from adaserve.engine.request import Request
from adaserve.engine.sampling import RowParams, keyed_uniform, target_tokens
from adaserve.engine.tree_ops import ancestor_matrix
from adaserve.scheduler import CandidateBatch


@dataclass(frozen=True, slots=True)
class Packed:
    """The selected nodes of each tree, packed left in tree order (parents first)."""

    node: np.ndarray  # [n, Q] int64 tree index of each packed node, -1 = padding
    parent: np.ndarray  # [n, Q] int64 packed index of the parent, -1 for root and padding
    token: np.ndarray  # [n, Q] int64
    depth: np.ndarray  # [n, Q] int64
    valid: np.ndarray  # [n, Q] bool
    ancestors: np.ndarray  # [n, Q, Q] bool


def pack(c: CandidateBatch, mask: np.ndarray) -> Packed:
    n, width = mask.shape
    counts = mask.sum(1)
    q = int(counts.max())
    order = np.argsort(~mask, axis=1, kind="stable")[:, :q]  # selected first, in tree order
    valid = np.arange(q)[None, :] < counts[:, None]
    node = np.where(valid, order, -1)
    inv = np.full((n, width), -1, np.int64)
    rows = np.broadcast_to(np.arange(n)[:, None], (n, q))
    inv[rows[valid], node[valid]] = np.broadcast_to(np.arange(q), (n, q))[valid]
    safe = np.maximum(node, 0)
    tree_parent = np.take_along_axis(c.parent, safe, 1)
    parent = np.where(valid & (tree_parent >= 0),
                      np.take_along_axis(inv, np.maximum(tree_parent, 0), 1), -1)
    depth = np.where(valid, np.take_along_axis(c.depth, safe, 1), 0)
    token = np.where(valid, np.take_along_axis(c.token, safe, 1), 0)
    anc = ancestor_matrix(parent, valid, int(depth.max()))
    return Packed(node, parent, token, depth, valid, anc)


def verify(model: Llama, kv: KVCache, reqs: list[Request], c: CandidateBatch,
           mask: np.ndarray, keep_bonus: bool = False) -> VerifyResult:
    """Verify the selected nodes (mask [n, N], ancestor-closed) of the requests in slots
    [0, n); moves each accepted path's K/V after the request's target_len committed columns
    and returns the tokens to append (the caller commits: target_len += 1 + accepted).
    ``keep_bonus``: also return the logits rows the bonus tokens were chosen from."""
    n = len(reqs)
    p = pack(c, mask)
    base = torch.tensor([r.target_len for r in reqs], dtype=torch.int64)  # root's column
    q = p.valid.shape[1]
    valid = torch.from_numpy(p.valid)
    flat = torch.nonzero(valid.flatten()).flatten()  # rows wanting logits, request-major
    fb = tree_batch(slice(0, n), base, base, torch.from_numpy(p.token),
                    torch.from_numpy(p.depth), torch.arange(q)[None].expand(n, q),
                    torch.from_numpy(p.ancestors), valid, kv.trash_col, flat)
    logits = model(kv, fb)  # [R, V]
    choice_flat = target_tokens(logits, _row_params(reqs, p))
    choice = np.zeros((n, q), np.int64)
    choice[p.valid] = choice_flat.numpy()
    # The walk, all requests at once: a node is accepted iff it and every ancestor carries
    # the token the target chose at its parent (siblings carry distinct tokens, so the
    # accepted nodes of a row form one root-down chain).
    parent_choice = np.take_along_axis(choice, np.maximum(p.parent, 0), 1)
    match = p.valid & ((p.parent < 0) | (p.token == parent_choice))
    accepted = p.valid & ~(p.ancestors & ~match[:, None, :]).any(-1)  # [n, Q]
    out_nodes, out_tokens = [], []
    slots, src, dst = [], [], []
    for i, r in enumerate(reqs):
        path = np.flatnonzero(accepted[i])  # packed indices, parents first: root .. deepest
        new = p.token[i, path[1:]].tolist() + [int(choice[i, path[-1]])]
        out_nodes.append(p.node[i, path[1:]])
        out_tokens.append(new)
        moved = path[1:][path[1:] != np.arange(1, len(path))]
        if moved.size:
            slots.append(np.full(moved.size, i))
            src.append(r.target_len + moved)
            dst.append(r.target_len + p.depth[i, moved])
    kv.move_columns(slots, src, dst)
    bonus = None
    if keep_bonus:  # logits rows are request-major over the valid nodes, packed left
        first = np.concatenate([[0], np.cumsum(p.valid.sum(1))[:-1]])
        last = np.array([np.flatnonzero(accepted[i])[-1] for i in range(n)], np.int64)
        bonus = logits[torch.from_numpy(first + last)]  # [n, V]
    return VerifyResult(out_nodes, out_tokens, p.valid.sum(1), bonus)


def _row_params(reqs: list[Request], p: Packed) -> RowParams:
    """Sampling parameters for each verified node (request-major, like the logits rows)."""
    counts = p.valid.sum(1)
    per = np.array([(r.params.temperature, r.params.top_p, r.params.top_k) for r in reqs],
                   dtype=np.float64).reshape(len(reqs), 3)
    rep = np.repeat(per, counts, axis=0)
    # the node at depth k of request r produces sequence position len(tokens) + k
    position = (np.array([len(r.tokens) for r in reqs])[:, None] + p.depth)[p.valid]
    seed = np.repeat(np.array([r.seed for r in reqs], dtype=np.uint64), counts)
    return RowParams(torch.from_numpy(rep[:, 0]), torch.from_numpy(rep[:, 1]),
                     torch.from_numpy(rep[:, 2].astype(np.int64)),
                     torch.from_numpy(keyed_uniform(seed, position)))

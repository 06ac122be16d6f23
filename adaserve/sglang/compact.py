"""Ragged tree verification: each request's selected positions moved to the front of its
verify block, and the ragged tensors the target forward runs on.

SGLang lays one iteration's verify out as [bs, N]: request b's block holds the root
(position 0, the bonus token) and its N - 1 best draft candidates, linked into a tree by
``retrieve_next_token`` / ``retrieve_next_sibling``. AdaServe keeps a subset per request
(``keep``, ancestor-closed, root included, L_b positions). ``compact`` reorders every block
so its kept positions come first, in their original order (parents still precede
children), and rebuilds the tree over the compacted positions:

- the padded view, SGLang's [bs, N] shape with the tree in slots 0..L_b - 1 and nothing
  reachable past them: draft tokens, positions, ``retrieve_index`` and the two link lists.
  Sampling, greedy or tree verification, accept-path compaction, the KV move and the draft
  extend keep running on it unchanged;
- the ragged view, T = sum L_b tokens: what the target forward computes (tokens, positions,
  the tree mask in SGLang's FULL_MASK layout, one [L_b, s_b + L_b] block per request), the
  KV slots it writes (the first L_b slots of request b's verify window, so the accepted
  path's KV is where SGLang's move reads it) and, per padded position, the ragged row whose
  logits it takes (``expand``).

Pure tensor code, vectorized over requests; the loop in ``_ancestors`` runs over tree depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from adaserve.sglang.links import unlink


@dataclass(frozen=True, slots=True, eq=False)
class RaggedTrees:
    """One iteration's trees, compacted. bs requests, N = the verify width, T = sum(lens)."""

    lens: torch.Tensor  # [bs] int64, L_b: positions request b verifies, root included
    order: torch.Tensor  # [bs, N] int64: the original position now at compacted slot j
    # padded view, [bs, N] / [bs * N], for everything after the target forward
    draft_token: torch.Tensor  # [bs * N]; past L_b: the root's token, never reachable
    positions: torch.Tensor  # [bs * N]
    retrieve_index: torch.Tensor  # [bs, N]: b * N + j for j < L_b, else -1
    retrieve_next_token: torch.Tensor  # [bs, N], over compacted slots
    retrieve_next_sibling: torch.Tensor  # [bs, N]
    window: torch.Tensor  # [bs * N] KV slots of the verify window, as SGLang assigns them
    # ragged view, T tokens, for the target forward
    rows: torch.Tensor  # [T]: padded index b * N + j of each verified token
    tokens: torch.Tensor  # [T]
    token_positions: torch.Tensor  # [T]
    out_cache_loc: torch.Tensor  # [T]: window[rows]
    custom_mask: torch.Tensor  # [sum_b L_b * (s_b + L_b)] bool, FULL_MASK layout
    expand_index: torch.Tensor  # [bs * N]: the ragged row each padded position reads

    @property
    def total(self) -> int:
        return int(self.rows.numel())

    def expand(self, ragged: torch.Tensor) -> torch.Tensor:
        """[T, ...] rows of the ragged forward as [bs * N, ...] in the padded layout (a
        position past L_b repeats its request's root row: unreachable, never read)."""
        return ragged.index_select(0, self.expand_index)


def compact(keep: torch.Tensor, parent: torch.Tensor, next_token: torch.Tensor,
            next_sibling: torch.Tensor, draft_token: torch.Tensor, positions: torch.Tensor,
            seq_lens: torch.Tensor, window: torch.Tensor) -> RaggedTrees:
    """keep [bs, N] bool (root kept, ancestor-closed); parent [bs, N] int64, each verify
    position's parent position (-1 for the root); next_token / next_sibling [bs, N] as
    SGLang's tree builder made them; draft_token, positions [bs * N] in SGLang's order;
    seq_lens [bs] committed lengths (the prefix each tree attends to); window [bs * N] the
    verify window's KV slots (request b's N slots from seq_lens[b] on)."""
    bs, n = keep.shape
    dev = keep.device
    if not bool(keep[:, 0].all()):
        raise ValueError("every request must verify its root (position 0)")
    cols = torch.arange(n, device=dev)
    # kept positions first, each group in ascending position order (a stable sort)
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices  # [bs, N]
    inv = torch.empty_like(order).scatter_(1, order, cols.expand(bs, n))  # [bs, N]
    lens = keep.sum(1)  # [bs]
    live = cols[None, :] < lens[:, None]  # [bs, N] compacted slots that hold a kept node

    def remap(pos: torch.Tensor) -> torch.Tensor:
        """[bs, N] positions (or -1), read at compacted slots, as compacted slots."""
        src = torch.gather(pos, 1, order)
        return torch.where(src >= 0, torch.gather(inv, 1, src.clamp(min=0)), -1)

    new_token, new_sibling = unlink(next_token, next_sibling, keep)
    next_token_c, next_sibling_c = remap(new_token), remap(new_sibling)
    parent_c = torch.where(live, remap(parent), -1)
    flat = torch.arange(bs, device=dev)[:, None] * n + cols[None, :]  # [bs, N]
    tokens_p = torch.gather(draft_token.view(bs, n), 1, order)
    # a slot past L_b gets its root's token: any valid id, never reachable
    tokens_p = torch.where(live, tokens_p, tokens_p[:, :1]).flatten()
    positions_p = torch.gather(positions.view(bs, n), 1, order).flatten()
    rows = flat[live]  # [T], row-major: request by request, slot order
    starts = torch.cumsum(lens, 0) - lens  # [bs] first ragged row of each request
    expand_index = (starts[:, None] + torch.where(live, cols[None, :], 0)).flatten()
    return RaggedTrees(
        lens=lens, order=order, draft_token=tokens_p, positions=positions_p,
        retrieve_index=torch.where(live, flat, -1), retrieve_next_token=next_token_c,
        retrieve_next_sibling=next_sibling_c, window=window, rows=rows,
        tokens=tokens_p[rows], token_positions=positions_p[rows], out_cache_loc=window[rows],
        custom_mask=full_mask(_ancestors(parent_c), lens, seq_lens),
        expand_index=expand_index)


def verify_window(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                  seq_lens: torch.Tensor, n: int) -> torch.Tensor:
    """[bs * N] KV slots of the verify window: request b's N slots from seq_lens[b] on, in
    its req_to_token row -- what SGLang's uniform verify prepare assigns as out_cache_loc
    (``assign_extend_cache_locs_uniform``)."""
    cols = seq_lens.long()[:, None] + torch.arange(n, device=seq_lens.device)[None, :]
    return req_to_token[req_pool_indices.long()[:, None], cols].flatten().to(torch.int64)


def _ancestors(parent: torch.Tensor) -> torch.Tensor:
    """[bs, N, N] bool: slot k is slot i or an ancestor of it (parent [bs, N], -1 = none).
    One step up the tree per loop turn: at most the tree's depth."""
    bs, n = parent.shape
    anc = torch.eye(n, dtype=torch.bool, device=parent.device).repeat(bs, 1, 1)
    cur = torch.arange(n, device=parent.device).expand(bs, n)
    rows = torch.arange(bs, device=parent.device)[:, None].expand(bs, n)
    slot = torch.arange(n, device=parent.device).expand(bs, n)
    for _ in range(n - 1):
        cur = torch.where(cur >= 0, torch.gather(parent, 1, cur.clamp(min=0)), -1)
        up = cur >= 0
        if not bool(up.any()):
            break
        anc[rows[up], slot[up], cur[up]] = True
    return anc


def full_mask(anc: torch.Tensor, lens: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """SGLang's FULL_MASK tree mask for ragged blocks: request b's rows are its L_b tokens,
    each of s_b + L_b entries (its committed prefix, all visible, then its tree: a token
    sees itself and its ancestors), blocks back to back. anc [bs, N, N] over compacted
    slots (only the first L_b of each row and column are read)."""
    bs, n, _ = anc.shape
    lens, seq_lens = lens.long(), seq_lens.long()
    width = seq_lens + lens  # [bs] entries per row
    start = torch.cumsum(lens * width, 0) - lens * width  # [bs] where each block begins
    mask = torch.ones(int((lens * width).sum()), dtype=torch.bool, device=anc.device)
    i = torch.arange(n, device=anc.device)
    # entry (b, i, k) of the tree part: start_b + i * width_b + s_b + k, for i, k < L_b
    at = (start[:, None, None] + i[None, :, None] * width[:, None, None]
          + seq_lens[:, None, None] + i[None, None, :])  # [bs, N, N]
    inside = (i[None, :, None] < lens[:, None, None]) & (i[None, None, :] < lens[:, None, None])
    mask[at[inside]] = anc[inside]
    return mask

"""The typed input of one model forward, and the one builder every phase uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True, slots=True)
class ForwardBatch:
    """n rows (one per request) of Q query tokens, right-padded.

    Row i reads and writes cache slot ``slots[i]`` (a slice when the slots are contiguous,
    which lets attention read the cache as a view).
    """

    slots: slice | torch.Tensor  # n slots: slice(a, a + n) or [n] int64
    tokens: torch.Tensor  # [n, Q] int64
    positions: torch.Tensor  # [n, Q] int64, RoPE positions (prefix length + depth)
    write_pos: torch.Tensor  # [n, Q] int64, cache column of each token's K/V
    mask: torch.Tensor  # [n, 1, Q, T] bool, True = query may attend to that cache column
    kv_len: int  # T: cache columns attention reads
    out_rows: torch.Tensor | None  # [R] int64 flat indices into n*Q wanting logits; None = all
    # The same visibility as `mask` for the valid queries, in the shape the attention kernel
    # reads (kernels/attention.cpp): row i's queries see its columns [0, prefix_len[i]);
    # query a sees column prefix_len[i] + j iff tree_mask[i, a, j]; nothing beyond. None
    # where a batch is not laid out that way (the model then keeps SDPA with `mask`).
    prefix_len: torch.Tensor | None = None  # [n] int64
    tree_mask: torch.Tensor | None = None  # [n, Q, W] bool


def tree_batch(slots: slice | torch.Tensor, col_base: torch.Tensor, pos_base: torch.Tensor,
               tokens: torch.Tensor, depth: torch.Tensor, scratch: torch.Tensor,
               ancestors: torch.Tensor, valid: torch.Tensor, trash_col: int,
               out_rows: torch.Tensor | None = None) -> ForwardBatch:
    """Queries that are nodes of per-request token trees laid out after a committed prefix.

    Request i has ``col_base[i]`` committed cache columns, all visible to its queries; its
    tree nodes live in a scratch region starting at that column. Query (i, a) is scratch
    node ``scratch[i, a]`` at RoPE position ``pos_base[i] + depth[i, a]`` and sees the
    scratch nodes b with ``ancestors[i, a, b]`` (itself included). A prefill chunk is the
    chain case: depth = scratch = 0..q-1 with a lower-triangular ancestor matrix.

    col_base, pos_base: [n]; tokens, depth, scratch, valid: [n, Q]; ancestors: [n, Q, S].
    """
    n, q = tokens.shape
    s = ancestors.shape[2]
    write_pos = torch.where(valid, col_base[:, None] + scratch, trash_col)  # [n, Q]
    positions = torch.where(valid, pos_base[:, None] + depth, 0)
    t = int((col_base + s).max()) if n else 0
    cols = torch.arange(t)
    prefix = cols[None, :] < col_base[:, None]  # [n, T]
    rel = cols[None, :] - col_base[:, None]  # [n, T]
    in_tree = (rel >= 0) & (rel < s)
    seen = ancestors.gather(2, rel.clamp(0, max(s - 1, 0))[:, None, :].expand(n, q, t))
    tree = ancestors & valid[:, :, None]  # [n, Q, S]
    mask = prefix[:, None, :] | (seen & in_tree[:, None, :])  # [n, Q, T]
    mask &= valid[:, :, None]
    # A padded query must see something or softmax gives NaN; column 0 is harmless.
    mask[:, :, 0] |= ~valid
    return ForwardBatch(slots, torch.where(valid, tokens, 0), positions, write_pos,
                        mask[:, None], t, out_rows, col_base.to(torch.int64).contiguous(),
                        tree.contiguous())


def chain_ancestors(q: int) -> torch.Tensor:
    """[q, q] lower-triangular: a chunk token sees itself and every earlier chunk token."""
    return torch.ones(q, q, dtype=torch.bool).tril()


def chain_batch(n: int, q: int, ctx: int, trash_col: int,
                tokens: torch.Tensor | None = None) -> ForwardBatch:
    """A forward batch of n requests in slots [0, n), each a chain of q tokens after ctx
    cached ones (random token ids unless given [n, q]): the shape profiles and benchmarks
    time a decode or verify step with."""
    base = torch.full((n,), ctx, dtype=torch.int64)
    idx = torch.arange(q)[None].expand(n, q)
    toks = torch.randint(100, 1000, (n, q)) if tokens is None else tokens
    return tree_batch(slice(0, n), base, base, toks, idx, idx,
                      chain_ancestors(q)[None].expand(n, q, q),
                      torch.ones(n, q, dtype=torch.bool), trash_col)


def chunk_batch(slots: slice | torch.Tensor, starts: torch.Tensor, chunks: list[list[int]],
                trash_col: int, logits: Literal["all", "last", "none"]) -> ForwardBatch:
    """Prefill/catch-up chunks: request i appends ``chunks[i]`` at column ``starts[i]``.

    ``logits``: a row per chunk token, one per request (its last token), or none (prefill
    only fills the cache; the LM head is the costliest matmul of a small model).
    """
    tokens, lens, valid = padded_chunks(chunks)
    n, q = tokens.shape
    idx = torch.arange(q)[None, :].expand(n, q)
    anc = chain_ancestors(q)[None].expand(n, q, q) & valid[:, None, :]
    return tree_batch(slots, starts, starts, tokens, idx, idx, anc, valid, trash_col,
                      logit_rows(logits, lens, q))


def padded_chunks(chunks: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens [n, Q] right-padded with 0, lengths [n], valid [n, Q]."""
    n = len(chunks)
    lens = torch.tensor([len(c) for c in chunks], dtype=torch.int64)
    q = int(lens.max())
    tokens = torch.zeros(n, q, dtype=torch.int64)
    for i, c in enumerate(chunks):
        tokens[i, : len(c)] = torch.as_tensor(c, dtype=torch.int64)
    return tokens, lens, torch.arange(q)[None, :] < lens[:, None]


def logit_rows(logits: Literal["all", "last", "none"], lens: torch.Tensor,
               q: int) -> torch.Tensor | None:
    """ForwardBatch.out_rows of chunks of ``lens`` tokens padded to q."""
    return {"all": None, "last": torch.arange(len(lens)) * q + lens - 1,
            "none": torch.zeros(0, dtype=torch.int64)}[logits]

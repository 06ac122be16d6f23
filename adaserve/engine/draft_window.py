"""The draft's bounded KV: attention sinks plus a recent window (StreamingLLM; MagicDec,
seed 001 §4: "attention sinks (KV of initial tokens) with a sliding window KV").

Per slot the draft keeps ``sinks`` columns for the first tokens and a ring of ``window``
columns for the most recent ones, then the tree scratch and the trash column:

    [0, S)            positions 0 .. S-1, kept for good
    [S, S + W)        the ring: position p >= S lives at column S + (p - S) % W
    [S + W, ...)      scratch of a speculation tree (after ``min(m, S + W)`` columns)

So a draft step reads at most S + W columns whatever the context: its cost is flat. Keys
keep their true RoPE positions (the model rotates K before caching), so nothing in the
model changes: the window is only which columns a query's mask shows and where K/V is
written. A query at position p sees the columns whose current token has a position <= p:
for a chunk that is the sinks, the ring as the chunk leaves it, and the chunk causally (a
chunk token sees the W most recent tokens counted from the chunk's end, so its window is
W - chunk + 1 to W tokens). Chunks longer than W are fed in pieces, so no two tokens of
one forward share a column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from adaserve.engine.batch import ForwardBatch, logit_rows, padded_chunks
from adaserve.engine.kv_cache import KVCache


@dataclass(frozen=True, slots=True)
class DraftWindow:
    sinks: int  # S: first tokens kept for good
    window: int  # W: most recent tokens kept

    @property
    def ring_end(self) -> int:
        """Columns a committed context can occupy: S + W."""
        return self.sinks + self.window

    def slot_len(self, max_tree: int) -> int:
        """Draft columns per slot: the ring, a tree's scratch and the trash column."""
        return self.ring_end + max_tree + 1

    def columns(self, pos):
        """Cache column of each position (torch or numpy integers, any shape)."""
        s, w = self.sinks, self.window
        off = pos - s
        # for p >= S: p - W * floor((p - S) / W) = S + (p - S) % W; below S: p
        return pos - (off >= 0) * (off - off % w)

    def used(self, length: int) -> int:
        """Columns a slot that has seen ``length`` tokens occupies."""
        return min(length, self.ring_end)

    def held(self, length: torch.Tensor, t: int) -> torch.Tensor:
        """[n, t] int64: the position whose K/V each of the first t columns holds after
        ``length`` [n] tokens, -1 for a column not written yet."""
        c = torch.arange(t)[None, :]  # [1, T]
        last = length[:, None] - 1  # [n, 1]
        w = self.window
        # a ring column c holds the latest p <= last with p = c + W * k, k >= 0
        ring = c + w * torch.div(last - c, w, rounding_mode="floor")
        p = torch.where(c < self.sinks, c, ring)
        return torch.where(c <= last, p, -1)

    def chunk_batch(self, slots: slice | torch.Tensor, starts: torch.Tensor,
                    chunks: list[list[int]], trash_col: int,
                    logits: Literal["all", "last", "none"]) -> ForwardBatch:
        """Request i appends ``chunks[i]`` (at most W tokens) at position ``starts[i]``."""
        tokens, lens, valid = padded_chunks(chunks)
        n, q = tokens.shape
        if q > self.window:
            raise ValueError(f"a chunk of {q} tokens does not fit a window of {self.window}")
        pos = starts[:, None] + torch.arange(q)[None, :]  # [n, Q]
        write = torch.where(valid, self.columns(pos), trash_col)
        ends = starts + lens
        t = min(self.ring_end, int(ends.max()))
        held = self.held(ends, t)[:, None, :]  # [n, 1, T]
        mask = (held >= 0) & (held <= pos[:, :, None]) & valid[:, :, None]  # [n, Q, T]
        mask[:, :, 0] |= ~valid  # a padded query must see something (softmax NaN)
        return ForwardBatch(slots, tokens, torch.where(valid, pos, 0), write, mask[:, None], t,
                            logit_rows(logits, lens, q))

    def feed(self, model, kv: KVCache, slots: slice | torch.Tensor, starts: torch.Tensor,
             chunks: list[list[int]], want_logits: bool) -> torch.Tensor | None:
        """Put ``chunks`` into the window (pieces of at most W tokens); the logits [n, V] of
        each chunk's last token when ``want_logits``. Chunks are non-empty."""
        w = self.window
        kind = "last" if want_logits else "none"
        if max(len(c) for c in chunks) <= w:  # the common case: one forward
            res = model(kv, self.chunk_batch(slots, starts, chunks, kv.trash_col, kind))
            return res if want_logits else None
        ids = slots if isinstance(slots, torch.Tensor) else torch.arange(slots.start, slots.stop)
        out: list[torch.Tensor | None] = [None] * len(chunks)
        for off in range(0, max(len(c) for c in chunks), w):
            rows = [i for i, c in enumerate(chunks) if len(c) > off]
            r = torch.tensor(rows)
            res = model(kv, self.chunk_batch(ids[r], starts[r] + off,
                                              [chunks[i][off: off + w] for i in rows],
                                              kv.trash_col, kind))
            for j, i in enumerate(rows):
                if want_logits and len(chunks[i]) <= off + w:  # this piece ends chunk i
                    out[i] = res[j]
        return torch.stack(out) if want_logits else None

    def kept(self, start: int, end: int) -> np.ndarray:
        """Of positions [start, end) just written, those the window still holds."""
        return np.concatenate([np.arange(start, min(end, self.sinks)),
                               np.arange(max(start, self.sinks, end - self.window), end)])

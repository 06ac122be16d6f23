"""The preallocated KV cache: fixed per-request slots, kept compact.

Layout [L, S, Hkv, C, D]: one slot of C columns per running request. Decoding requests
occupy slots [0, n) so a batched forward reads its keys as a *view* of the cache; measured
on the 2-core dev CPU (benchmarks/engine/kv_layout.py) a view is 3-4x faster than gathering slots
or paged blocks into a contiguous tensor, which SDPA needs. Slots are compacted when a
request leaves (the engine moves the last slot into the hole), so the view stays valid.
"""

from __future__ import annotations

import numpy as np
import torch


class KVCache:
    """K and V for n_slots slots of slot_len columns each, allocated once."""

    def __init__(self, layers: int, n_slots: int, kv_heads: int, head_dim: int, slot_len: int,
                 dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        if n_slots < 1 or slot_len < 2:
            raise ValueError("a KV cache needs at least one slot of two columns")
        shape = (layers, n_slots, kv_heads, slot_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.n_slots, self.slot_len = n_slots, slot_len
        # The last column of every slot takes the writes of padded query rows; no mask
        # ever shows it, so it never needs clearing.
        self.trash_col = slot_len - 1

    @staticmethod
    def bytes_per_slot(layers: int, kv_heads: int, head_dim: int, slot_len: int,
                       dtype: torch.dtype = torch.float32) -> int:
        return 2 * layers * kv_heads * slot_len * head_dim * torch.finfo(dtype).bits // 8

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2

    def move_columns(self, slots: list[np.ndarray], src: list[np.ndarray],
                     dst: list[np.ndarray]) -> None:
        """Commit accepted paths: in slot slots[j][i], copy column src[j][i] to dst[j][i] in
        every layer (one piece j per request, concatenated into one indexed copy).

        The right-hand side is gathered before anything is written, so overlapping
        sources and destinations are safe.
        """
        if not slots:
            return
        slots, src, dst = (torch.from_numpy(np.concatenate(a)) for a in (slots, src, dst))
        self.k[:, slots, :, dst] = self.k[:, slots, :, src]
        self.v[:, slots, :, dst] = self.v[:, slots, :, src]

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` columns of slot src into slot dst."""
        if src != dst and length > 0:
            self.k[:, dst, :, :length] = self.k[:, src, :, :length]
            self.v[:, dst, :, :length] = self.v[:, src, :, :length]

    def swap_slots(self, a: int, b: int, length_a: int, length_b: int) -> None:
        if a == b:
            return
        m = max(length_a, length_b)
        for t in (self.k, self.v):
            tmp = t[:, a, :, :m].clone()
            t[:, a, :, :m] = t[:, b, :, :m]
            t[:, b, :, :m] = tmp

    def copy_columns(self, other: KVCache, slots: list[np.ndarray], src: list[np.ndarray],
                     dst: list[np.ndarray]) -> None:
        """In slot slots[j][i], column dst[j][i] of every layer := other's column src[j][i]
        (a cache of the same layers and heads: the target's, for its self-draft)."""
        if not slots:
            return
        slots, src, dst = (torch.from_numpy(np.concatenate(a).astype(np.int64))
                           for a in (slots, src, dst))
        self.k[:, slots, :, dst] = other.k[:, slots, :, src]
        self.v[:, slots, :, dst] = other.v[:, slots, :, src]

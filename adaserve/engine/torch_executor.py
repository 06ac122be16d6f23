"""The real executor: the PyTorch target and draft over preallocated KV caches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from adaserve.engine.batch import chunk_batch
from adaserve.engine.config import EngineConfig
from adaserve.engine.draft import DraftTrees, draft_trees
from adaserve.engine.executor import Drafted, Executor, PrefillChunk, VerifyResult
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import Models
from adaserve.engine.model import Llama
from adaserve.engine.request import Request
from adaserve.engine.verify import verify
from adaserve.scheduler import CandidateBatch, SpecPlan

# requests re-prefilled per draft forward when a new draft is swapped in
_REFILL_ROWS = 8


class TorchExecutor(Executor):
    """Runs the iteration's forwards on ``models``; sizes its KV pools from ``cfg``.

    ``max_tree``: the most nodes one request's candidate tree can have (its scratch columns).
    ``use_draft=False`` leaves the draft idle (no prefill, no KV) for a policy that never
    drafts.
    """

    def __init__(self, cfg: EngineConfig, models: Models, max_tree: int, *,
                 use_draft: bool = True) -> None:
        self.models = models
        tcfg = models.target.cfg
        # A slot holds the context, a verification tree's scratch and the trash column.
        slot_len = cfg.max_context + max_tree + 1
        dt = models.target.dtype
        per_slot = KVCache.bytes_per_slot(tcfg.layers, tcfg.kv_heads, tcfg.head_dim, slot_len, dt)
        d = models.draft if use_draft else None
        if d is not None and d is not models.target:
            per_slot += KVCache.bytes_per_slot(d.n_layers, d.cfg.kv_heads, d.cfg.head_dim,
                                               slot_len, dt)
        elif d is models.target:
            per_slot *= 2
        n_slots = min(cfg.max_batch, cfg.kv_cache_mb * 2**20 // per_slot)
        if n_slots < 1:
            raise ValueError(f"kv_cache_mb={cfg.kv_cache_mb} cannot hold one request of "
                             f"max_context={cfg.max_context} ({per_slot / 2**20:.1f} MiB each)")
        dev = models.device
        self.kv = KVCache(models.target.n_layers, n_slots, tcfg.kv_heads, tcfg.head_dim,
                          slot_len, dt, dev)
        self.draft_kv = None if d is None else KVCache(
            d.n_layers, n_slots, d.cfg.kv_heads, d.cfg.head_dim, slot_len, dt, dev)
        self.draft_len = np.zeros(n_slots, np.int64)  # [slots] tokens each draft slot holds
        self.n_slots = n_slots
        self.vocab = tcfg.vocab
        self.eos_ids = models.eos_ids
        self.tokenizer = models.tokenizer
        # called with (reqs, candidates, mask, result) after every verify: online draft
        # adaptation's buffer (online_draft.py); the result then carries the bonus logits
        self.tap: Callable[..., None] | None = None

    def open_slot(self, slot: int) -> None:
        self.draft_len[slot] = 0

    def prefill(self, chunks: Sequence[PrefillChunk]) -> None:
        slots = torch.tensor([c.slot for c in chunks])
        starts = torch.tensor([c.start for c in chunks])
        # one batch serves both models: the two caches share slot_len and trash column
        fb = chunk_batch(slots, starts, [list(c.tokens) for c in chunks], self.kv.trash_col,
                         "none")
        self.models.target(self.kv, fb)
        if self.draft_kv is not None:
            self.models.draft(self.draft_kv, fb)
            for c in chunks:
                self.draft_len[c.slot] = c.start + len(c.tokens)

    def draft(self, reqs: Sequence[Request], plan: SpecPlan) -> Drafted:
        trees = draft_trees(self.models.draft, self.draft_kv, list(reqs), self.draft_len, plan,
                            self.models.draft_token_ids)
        return Drafted(trees.candidates, trees)

    def verify(self, reqs: Sequence[Request], candidates: CandidateBatch, mask: np.ndarray,
               drafted: Drafted | None) -> VerifyResult:
        res = verify(self.models.target, self.kv, list(reqs), candidates, mask,
                     keep_bonus=self.tap is not None)
        if self.tap is not None:
            self.tap(reqs, candidates, mask, res)
        return res

    def replace_draft(self, draft: Llama, contexts: Sequence[Sequence[int]]) -> None:
        """Speculate with ``draft`` from the next iteration on. Called between iterations:
        one reference changes, so no forward ever mixes the two drafts' weights. Every
        occupied slot's draft K/V is recomputed with the new weights (``contexts[s]``: the
        tokens of the request in slot s; the cache holds their first draft_len[s]), so no
        request keeps speculating over the old draft's keys either."""
        self.models = dataclasses.replace(self.models, draft=draft)
        slots = [s for s, toks in enumerate(contexts) if self.draft_len[s] > 0]
        for i in range(0, len(slots), _REFILL_ROWS):
            group = slots[i: i + _REFILL_ROWS]
            fb = chunk_batch(torch.tensor(group), torch.zeros(len(group), dtype=torch.int64),
                             [list(contexts[s][: int(self.draft_len[s])]) for s in group],
                             self.draft_kv.trash_col, "none")
            draft(self.draft_kv, fb)

    def commit_draft(self, reqs: Sequence[Request], drafted: Drafted,
                     result: VerifyResult) -> None:
        """Keep the draft's K/V of accepted nodes it was fed (seed 000 KV alignment); the
        rest of the accepted path and the bonus token reach the draft next iteration."""
        trees: DraftTrees = drafted.state
        cands = trees.candidates
        slots, src, dst = [], [], []
        for i, nodes in enumerate(result.accepted):
            fed = nodes[cands.depth[i, nodes] < trees.fed_depth]
            if fed.size:
                base = int(trees.scratch_base[i])
                slots.append(np.full(fed.size, i))
                src.append(base + fed - 1)
                dst.append(base + cands.depth[i, fed] - 1)
                self.draft_len[i] += fed.size
        self.draft_kv.move_columns(slots, src, dst)

    def swap_slots(self, a: int, b: int, len_a: int, len_b: int) -> None:
        self.kv.swap_slots(a, b, len_a, len_b)
        if self.draft_kv is not None:
            la, lb = int(self.draft_len[a]), int(self.draft_len[b])
            self.draft_kv.swap_slots(a, b, la, lb)
            self.draft_len[a], self.draft_len[b] = lb, la

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        self.kv.copy_slot(src, dst, length)
        if self.draft_kv is not None:
            self.draft_kv.copy_slot(src, dst, int(self.draft_len[src]))
            self.draft_len[dst] = self.draft_len[src]

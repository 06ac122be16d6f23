"""The real executor: the PyTorch target and draft over preallocated KV caches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from adaserve.engine.batch import chunk_batch
from adaserve.engine.config import EngineConfig
from adaserve.engine.draft import DraftTrees, draft_trees
from adaserve.engine.draft_window import DraftWindow
from adaserve.engine.executor import Drafted, Executor, PrefillChunk, VerifyResult
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.kv_pool import plan_pool
from adaserve.engine.loader import Models
from adaserve.engine.model import Llama
from adaserve.engine.request import Request
from adaserve.engine.verify import verify
from adaserve.scheduler import CandidateBatch, SpecPlan

# requests re-prefilled per draft forward when a new draft is swapped in
_REFILL_ROWS = 8
# A request whose draft lags by more tokens than this catches up in a forward of its own
# before the draft's first step (TorchExecutor._catch_up); a shorter lag rides along with
# the roots. 16: one PROBE_EVERY run of undrafted iterations rides along.
CATCH_UP_INLINE = 16
# Prompts of at most this many tokens are fed to a separate draft at the request's first
# draft, not at prefill. Catching one up costs a decode step ~0.3 ms of draft forward a
# token on the dev CPU (39 tokens: 19 ms, 128: 32 ms), so at most ~80 ms at once; longer
# prompts prefill a whole-context draft chunk by chunk beside the target. A bounded
# (windowed) draft takes every prompt lazily: it catches up on its sinks and its window
# only (TorchExecutor._skip_to_window), never more than S + W tokens at once.
LAZY_DRAFT_PROMPT = 256


class TorchExecutor(Executor):
    """Runs the iteration's forwards on ``models``; sizes its KV pools from ``cfg``
    (kv_pool.py), the draft's whole-context or bounded (draft_window.py).

    ``max_tree``: the most nodes one request's candidate tree can have (its scratch columns).
    ``use_draft=False`` leaves the draft idle (no prefill, no KV) for a policy that never
    drafts.
    """

    def __init__(self, cfg: EngineConfig, models: Models, max_tree: int, *,
                 use_draft: bool = True) -> None:
        self.models = models
        tcfg = models.target.cfg
        d = models.draft if use_draft else None
        self.window = None if d is None or cfg.draft_window is None else \
            DraftWindow(cfg.draft_sinks, cfg.draft_window)
        self.pool = plan_pool(cfg, models, max_tree, self.window, d is not None)
        n_slots, dt, dev = self.pool.n_slots, models.target.dtype, models.device
        self.kv = KVCache(models.target.n_layers, n_slots, tcfg.kv_heads, tcfg.head_dim,
                          self.pool.slot_len, dt, dev)
        self.draft_kv = None if d is None else KVCache(
            d.n_layers, n_slots, d.cfg.kv_heads, d.cfg.head_dim, self.pool.draft_slot_len, dt,
            dev)
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
        toks = [list(c.tokens) for c in chunks]
        fb = chunk_batch(slots, starts, toks, self.kv.trash_col, "none")
        self.models.target(self.kv, fb)
        if self.draft_kv is None:
            return
        if self.window is not None and self.models.draft is self.models.target:
            # self-speculation: the draft's window is the target's own K/V of the prompt,
            # compressed (MagicDec's StreamingLLM draft), not a second forward
            self._copy_from_target(chunks)
            self._fed(chunks)
            return
        # A short prompt reaches a separate draft only when its request is first drafted
        # for (_catch_up): a request the policy never drafts for, as under overload, never
        # pays it. Served, the eager draft prefill made a prefill step ~30 ms longer than
        # incremental's (296 against 266 ms over 437 steps, results/served-overload-seeds).
        # A long one keeps its chunked prefill here, so no decode step stalls on it, except
        # in a bounded draft, which catches up on its S + W tokens alone (_skip_to_window):
        # feeding it a long prompt beside the target cost ~0.4 ms a token for K/V the ring
        # overwrites, whether or not the request is ever drafted for.
        if self.window is not None:
            return
        eager = [j for j, c in enumerate(chunks) if c.prompt_len > LAZY_DRAFT_PROMPT]
        if not eager:
            return
        if len(eager) < len(chunks):
            chunks = [chunks[j] for j in eager]
            slots, starts, toks = slots[eager], starts[eager], [toks[j] for j in eager]
            fb = None
        self._feed_draft(slots, starts, toks, fb)
        self._fed(chunks)

    def _feed_draft(self, slots: torch.Tensor, starts: torch.Tensor, toks: list[list[int]],
                    fb=None) -> None:
        """Write the draft's K/V of ``toks[i]`` at ``starts[i]`` in slot ``slots[i]``, no
        logits; ``fb``: the target's forward batch of exactly these chunks, reused when the
        draft keeps the whole context (the two caches share slot_len and trash column)."""
        if self.window is not None:
            self.window.feed(self.models.draft, self.draft_kv, slots, starts, toks,
                             want_logits=False)
            return
        self.models.draft(self.draft_kv, fb if fb is not None else
                          chunk_batch(slots, starts, toks, self.draft_kv.trash_col, "none"))

    def _fed(self, chunks: Sequence[PrefillChunk]) -> None:
        for c in chunks:
            self.draft_len[c.slot] = c.start + len(c.tokens)

    def _catch_up(self, reqs: Sequence[Request]) -> None:
        """Feed the draft what it has not seen of each request that lags it by more than
        CATCH_UP_INLINE tokens (a prompt never drafted for, or many undrafted iterations),
        all but the last token: draft_trees feeds the rest with the roots, in one forward
        padded to the longest lag, so one long lag there would pad every row to it. The
        long lags go in forwards of their own, grouped by length so a group's padding stays
        under a third of its tokens."""
        if self.window is not None:
            self._skip_to_window(reqs)
        lag = [(len(r.tokens) - 1 - int(self.draft_len[i]), i) for i, r in enumerate(reqs)]
        long = sorted(((k, i) for k, i in lag if k > CATCH_UP_INLINE), reverse=True)
        while long:
            width = long[0][0]
            group = [long.pop(0)]
            while long and (len(group) + 1) * width <= 1.33 * (sum(k for k, _ in group)
                                                                + long[0][0]):
                group.append(long.pop(0))
            rows = [i for _, i in group]
            starts = torch.tensor([int(self.draft_len[i]) for i in rows])
            toks = [reqs[i].tokens[int(self.draft_len[i]): len(reqs[i].tokens) - 1]
                    for i in rows]
            # decoding request i sits in KV slot i
            self._feed_draft(torch.tensor(rows), starts, toks)
            for i in rows:
                self.draft_len[i] = len(reqs[i].tokens) - 1

    def _skip_to_window(self, reqs: Sequence[Request]) -> None:
        """A bounded draft lagging by more than its window W keeps, of what it has not
        seen, only its sinks and the last W tokens (DraftWindow.kept): feed the missing
        sinks now and move its length to W before the end, so _catch_up feeds the W tokens
        the ring will hold and skips the rest, whose K/V the ring would overwrite.

        Not what a feed of every token writes: the window's tokens are computed seeing
        the sinks and each other, not the W tokens before each (with 3 layers, a receptive
        field of up to 3W). The draft only proposes; the target verifies every token, so
        outputs are unchanged (greedy: test_long_context; sampling: the acceptance test
        uses the q the draft proposed with). Every ring column is written by the tail, so
        no column keeps an earlier occupant's K/V."""
        w = self.window
        ends = {i: len(r.tokens) - 1 for i, r in enumerate(reqs)}  # all but the root
        rows = [i for i, end in ends.items()
                if end - int(self.draft_len[i]) > max(w.window, CATCH_UP_INLINE)]
        sinks = [i for i in rows if self.draft_len[i] < w.sinks]
        if sinks:
            starts = torch.tensor([int(self.draft_len[i]) for i in sinks])
            self._feed_draft(torch.tensor(sinks), starts,
                             [reqs[i].tokens[int(self.draft_len[i]): w.sinks] for i in sinks])
        for i in rows:
            self.draft_len[i] = max(w.sinks, ends[i] - w.window)

    def _copy_from_target(self, chunks: Sequence[PrefillChunk]) -> None:
        pos = [self.window.kept(c.start, c.start + len(c.tokens)) for c in chunks]
        slots = [np.full(p.size, c.slot) for c, p in zip(chunks, pos)]
        self.draft_kv.copy_columns(self.kv, slots, pos, [self.window.columns(p) for p in pos])

    def draft(self, reqs: Sequence[Request], plan: SpecPlan) -> Drafted:
        self._catch_up(reqs)
        trees = draft_trees(self.models.draft, self.draft_kv, list(reqs), self.draft_len, plan,
                            self.models.draft_token_ids, self.window)
        return Drafted(trees.candidates, trees)

    def verify(self, reqs: Sequence[Request], candidates: CandidateBatch, mask: np.ndarray,
               drafted: Drafted | None) -> VerifyResult:
        res = verify(self.models.target, self.kv, list(reqs), candidates, mask,
                     keep_bonus=self.tap is not None)
        if self.tap is not None:
            self.tap(reqs, candidates, mask, res)
        return res

    def replace_draft(self, draft: Llama, contexts: Sequence[Sequence[int]],
                      token_ids: torch.Tensor | None = None) -> None:
        """Speculate with ``draft`` from the next iteration on (its head rows standing for
        ``token_ids``, when given). Called between iterations: one reference changes, so
        no forward ever mixes the two drafts' weights or ids. Every
        occupied slot's draft K/V is recomputed with the new weights (``contexts[s]``: the
        tokens of the request in slot s; the cache holds their first draft_len[s]), so no
        request keeps speculating over the old draft's keys either."""
        ids = self.models.draft_token_ids if token_ids is None else token_ids
        self.models = dataclasses.replace(self.models, draft=draft, draft_token_ids=ids)
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
                slots.append(np.full(fed.size, i))
                src.append(int(trees.scratch_base[i]) + fed - 1)
                # the node at depth k has position committed - 1 + k
                dst.append(self._draft_cols(int(trees.committed[i]) - 1 + cands.depth[i, fed]))
                self.draft_len[i] += fed.size
        self.draft_kv.move_columns(slots, src, dst)

    def _draft_cols(self, pos: np.ndarray | int) -> np.ndarray | int:
        return pos if self.window is None else self.window.columns(pos)

    def _draft_used(self, length: int) -> int:
        return length if self.window is None else self.window.used(length)

    def swap_slots(self, a: int, b: int, len_a: int, len_b: int) -> None:
        self.kv.swap_slots(a, b, len_a, len_b)
        if self.draft_kv is not None:
            la, lb = int(self.draft_len[a]), int(self.draft_len[b])
            self.draft_kv.swap_slots(a, b, self._draft_used(la), self._draft_used(lb))
            self.draft_len[a], self.draft_len[b] = lb, la

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        self.kv.copy_slot(src, dst, length)
        if self.draft_kv is not None:
            self.draft_kv.copy_slot(src, dst, self._draft_used(int(self.draft_len[src])))
            self.draft_len[dst] = self.draft_len[src]

"""The simulator's executor: virtual time from a hardware model, acceptance from an
acceptance model. It runs under the same `EngineCore` as the real one (issue 17)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adaserve.engine.executor import Drafted, Executor, PrefillChunk, VerifyResult
from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan
from adaserve.sim.acceptance import AcceptanceModel, SimTrees, walk
from adaserve.sim.clock import VirtualClock
from adaserve.sim.hardware import HardwareModel


class SimExecutor(Executor):
    """Advances ``clock`` by what each phase would cost on ``hardware``.

    Charged per iteration: the prefill forward (padded rows, like the real chunk batch, over
    the chunks' cached prefix), every draft step (its layer's tokens over the batch's
    context), the verify forward (the selected tokens over the batch's context) plus the
    hardware model's host overhead. Not modelled: KV slot moves, the draft's catch-up
    tokens beyond the roots, and the detokenizer (no tokenizer: outputs are token ids).
    """

    def __init__(self, hardware: HardwareModel, acceptance: AcceptanceModel,
                 clock: VirtualClock, n_slots: int, vocab: int = 1 << 31) -> None:
        if n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {n_slots!r}")
        self.hardware, self.acceptance, self.clock = hardware, acceptance, clock
        self.n_slots, self.vocab = n_slots, vocab
        self.eos_ids: frozenset[int] = frozenset()
        self.tokenizer = None

    def open_slot(self, slot: int) -> None:
        pass

    def prefill(self, chunks: Sequence[PrefillChunk]) -> None:
        rows = len(chunks) * max(len(c.tokens) for c in chunks)
        self.clock.advance(self.hardware.prefill_s(sum(c.start for c in chunks), rows))

    def draft(self, reqs: Sequence[Request], plan: SpecPlan) -> Drafted:
        trees = self.acceptance.trees(reqs, plan)
        self.clock.advance(self.hardware.draft_s(_context(reqs),
                                                 plan.draft_step_tokens(len(reqs))))
        return Drafted(trees.candidates, trees)

    def verify(self, reqs: Sequence[Request], candidates: CandidateBatch, mask: np.ndarray,
               drafted: Drafted | None) -> VerifyResult:
        trees: SimTrees = (self.acceptance.trees(reqs, SpecPlan(depth=0, width=0))
                           if drafted is None else drafted.state)
        accepted, new_tokens = walk(candidates, mask, trees.target_token)
        verified = mask.sum(1).astype(np.int64)
        self.clock.advance(self.hardware.verify_s(_context(reqs), int(verified.sum())))
        return VerifyResult(accepted, new_tokens, verified)

    def commit_draft(self, reqs: Sequence[Request], drafted: Drafted,
                     result: VerifyResult) -> None:
        pass

    def swap_slots(self, a: int, b: int, len_a: int, len_b: int) -> None:
        pass

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        pass


def _context(reqs: Sequence[Request]) -> int:
    return sum(r.target_len for r in reqs)

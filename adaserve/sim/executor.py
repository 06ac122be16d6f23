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


_NOTHING = np.zeros(0, np.int64)  # no accepted nodes (read only, shared)
_NOTHING.flags.writeable = False
# The simulated model's EOS: the top id of the executor's vocabulary, which neither
# acceptance model emits (synthetic tokens are child ranks, replayed ones a real tokenizer's)
SIM_EOS = (1 << 31) - 1


class SimExecutor(Executor):
    """Advances ``clock`` by what each phase would cost on ``hardware``.

    Charged per iteration: the prefill forward (the chunks over their cached prefix), the
    draft's first step (each request's tokens the draft has not seen: its root, and the
    accepted and bonus tokens it was not fed last time, kept per slot as the real executor
    does), its later steps (each layer's tokens), the verify forward (the selected tokens),
    each over the batch's context, plus the hardware model's host overhead. Not modelled:
    KV slot moves and the detokenizer (no tokenizer: outputs are token ids).

    The executor plays the model, so it alone knows where an output ends: ``end_at`` tells
    it, and the target then says ``SIM_EOS`` after that many output tokens, which the
    engine handles as any EOS. The scheduler learns the end only when the token comes out.

    With ``hardware.fuses_prefill`` the target's prefill chunk and the verify tokens of the
    same iteration are one forward. The prefill is charged alone when it runs (an iteration
    may end after it: prefill-first, or no request decoding yet), and a verify that follows
    in the same iteration is charged the fused forward less that.
    """

    def __init__(self, hardware: HardwareModel, acceptance: AcceptanceModel,
                 clock: VirtualClock, n_slots: int, with_draft: bool = True,
                 vocab: int = 1 << 31) -> None:
        """``with_draft``: the engine runs a draft model (every policy but incremental),
        which prefills beside the target."""
        if n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {n_slots!r}")
        self.hardware, self.acceptance, self.clock = hardware, acceptance, clock
        self.n_slots, self.vocab, self.with_draft = n_slots, vocab, with_draft
        self.eos_ids: frozenset[int] = frozenset({SIM_EOS})
        self.ends: dict[str, int] = {}  # request id -> output tokens before its EOS
        self.tokenizer = None
        self.draft_len = np.zeros(n_slots, np.int64)  # [slots] tokens the draft has seen
        # this iteration's prefill forward (context, per-chunk tokens), which a fusing
        # verify forward takes in; None: no prefill since the iteration began
        self.prefilled: tuple[int, list[int]] | None = None

    def end_at(self, request_id: str, output_tokens: int) -> None:
        """The model ends ``request_id``'s output after ``output_tokens`` tokens."""
        if output_tokens < 1:
            raise ValueError(f"an output ends after >= 1 token, got {output_tokens!r}")
        self.ends[request_id] = output_tokens

    def begin_iteration(self) -> None:
        self.prefilled = None

    def open_slot(self, slot: int) -> None:
        self.draft_len[slot] = 0

    def prefill(self, chunks: Sequence[PrefillChunk]) -> None:
        ctx, sizes = sum(c.start for c in chunks), [len(c.tokens) for c in chunks]
        self.clock.advance(self.hardware.prefill_s(ctx, sizes, self.with_draft))
        self.prefilled = (ctx, sizes)
        for c in chunks:
            self.draft_len[c.slot] = c.start + len(c.tokens)

    def draft(self, reqs: Sequence[Request], plan: SpecPlan) -> Drafted:
        n = len(reqs)
        trees = self.acceptance.trees(reqs, plan)
        seen = np.array([len(r.tokens) for r in reqs], np.int64)
        catch_up = self.hardware.batch_tokens((seen - self.draft_len[:n]).tolist())
        self.draft_len[:n] = seen
        steps = [catch_up] + [self.hardware.batch_tokens([k // n] * n)
                              for k in plan.draft_step_tokens(n)[1:]]
        self.clock.advance(self.hardware.draft_s(_context(reqs), steps, n))
        return Drafted(trees.candidates, (trees, plan.depth))

    def verify(self, reqs: Sequence[Request], candidates: CandidateBatch, mask: np.ndarray,
               drafted: Drafted | None) -> VerifyResult:
        if drafted is None:  # the roots alone: each emits the target's next token
            accepted = [_NOTHING] * len(reqs)
            new_tokens = [[t] for t in self.acceptance.root_tokens(reqs).tolist()]
        else:
            trees: SimTrees = drafted.state[0]
            accepted, new_tokens = walk(candidates, mask, trees.target_token)
        if self.ends:
            new_tokens = [self._say_eos(r, new) for r, new in zip(reqs, new_tokens)]
        verified = mask.sum(1).astype(np.int64)
        ctx, sizes = _context(reqs), verified.tolist()
        if self.hardware.fuses_prefill and self.prefilled is not None:
            self.clock.advance(self.hardware.fused_verify_s(ctx, sizes, *self.prefilled))
        else:
            self.clock.advance(self.hardware.verify_s(ctx, sizes))
        self.prefilled = None
        return VerifyResult(accepted, new_tokens, verified)

    def _say_eos(self, r: Request, new: list[int]) -> list[int]:
        """``new`` with the target's EOS where the model ends r's output: the draft guessed
        the tokens the walk accepted, the target then says EOS in place of the next one."""
        end = self.ends.get(r.id)
        k = None if end is None else end - (len(r.tokens) - r.n_prompt)
        if k is None or not 0 <= k < len(new):
            return new
        del self.ends[r.id]
        return new[:k] + [SIM_EOS]

    def commit_draft(self, reqs: Sequence[Request], drafted: Drafted,
                     result: VerifyResult) -> None:
        """The draft was fed every node above its last layer: those it keeps. The walk
        accepts one node per depth from 1 down, so a path of a nodes holds min(a, depth - 1)
        of them."""
        depth = drafted.state[1]
        accepted = np.fromiter(map(len, result.accepted), np.int64, len(reqs))
        self.draft_len[:len(reqs)] += np.minimum(accepted, depth - 1)

    def swap_slots(self, a: int, b: int, len_a: int, len_b: int) -> None:
        self.draft_len[[a, b]] = self.draft_len[[b, a]]

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        self.draft_len[dst] = self.draft_len[src]


def _context(reqs: Sequence[Request]) -> int:
    return sum(r.target_len for r in reqs)

"""Online draft adaptation, the engine's side (seed 004 §4.2, Algorithm 1).

While serving, every verification tells us where the draft was wrong: the bonus token's
position, when the request's selected path was cut short there. `DisagreementBuffer`
keeps the target's top-k distribution at those positions (lines 14-15 of Algorithm 1) and
each request's tokens once it finishes (line 18). Every ``interval`` served requests the
buffer goes to a trainer process (adaserve/distill/online.py), which distils the draft on
it with a replay sample and checks the result on a held-back slice of served requests.
`OnlineDraft.poll`, between two engine iterations, swaps an accepted draft in with one
reference change (TorchExecutor.replace_draft); a rejected one is never seen.

Why top-k and not the full distribution: a row is 49,152 floats (192 KB); the top 16
carry most of the mass at the positions the draft misses, cost 96 bytes in fp16, and are
what the offline distillation trained on (top-32 there, adaserve/distill/train.py).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from adaserve.engine.online_config import OnlineDraftConfig
from adaserve.engine.online_records import ServedRecord, UpdateReport
from adaserve.engine.request import Output, Request

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    request: Request  # read when it finishes; the engine only appends to its tokens
    positions: list[int] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    probs: list[np.ndarray] = field(default_factory=list)


class DisagreementBuffer:
    """At most ``buffer_positions`` target distributions, in flight and sealed together.

    When full, the oldest sealed request goes first; with none sealed, new positions are
    dropped. Every ``heldout_every``-th sealed request joins the held-back slice instead
    (its most recent ``heldout_requests``), which is never trained on.
    """

    def __init__(self, cfg: OnlineDraftConfig) -> None:
        self.cfg = cfg
        self.pending: dict[str, _Pending] = {}
        self.sealed: collections.deque[ServedRecord] = collections.deque()
        self.held: collections.deque[ServedRecord] = collections.deque(
            maxlen=cfg.heldout_requests)
        self.positions = 0  # buffered in pending and sealed
        self.served = 0  # requests sealed so far
        self.dropped = 0  # positions lost to a full buffer

    def observe(self, reqs: Sequence[Request], sel_depth: np.ndarray, accepted: np.ndarray,
                bonus_logits: torch.Tensor) -> None:
        """One verification: request i's selected path of depth sel_depth[i] kept
        accepted[i] nodes; where that is fewer, the draft's proposal at the bonus position
        was wrong and the target's distribution there ([n, V] logits) is kept."""
        for r in reqs:  # every request is sealed when it ends, trained on or held back
            if r.id not in self.pending:
                self.pending[r.id] = _Pending(r)
        miss = np.flatnonzero(accepted < sel_depth)
        if miss.size == 0:
            return
        probs = torch.softmax(bonus_logits[torch.from_numpy(miss)].float(), dim=-1)
        top = probs.topk(self.cfg.top_k, dim=-1)  # [m, k]
        ids = top.indices.numpy().astype(np.int32)
        ps = top.values.numpy().astype(np.float16)
        for j, i in enumerate(miss):
            if not self._room():
                self.dropped += len(miss) - j
                return
            r = reqs[i]
            p = self.pending[r.id]
            # the bonus token lands after the committed tokens and the accepted ones
            p.positions.append(len(r.tokens) + int(accepted[i]))
            p.ids.append(ids[j])
            p.probs.append(ps[j])
            self.positions += 1

    def seal(self, request_id: str) -> None:
        """The request finished: its record is complete (a request never verified, say
        one that ended at its first token, has none)."""
        p = self.pending.pop(request_id, None)
        if p is None:
            return
        r = p.request
        self.served += 1
        k = self.cfg.top_k
        toks = np.asarray(r.tokens, np.int32)
        pos = np.asarray(p.positions, np.int64)
        keep = pos < len(toks)  # a bonus token cut off by EOS or max_tokens has no label
        rec = ServedRecord(toks, r.n_prompt, pos[keep],
                           np.asarray(p.ids, np.int32).reshape(-1, k)[keep],
                           np.asarray(p.probs, np.float16).reshape(-1, k)[keep])
        self.positions -= len(pos) - int(keep.sum())
        if self.served % self.cfg.heldout_every == 0:
            self.positions -= len(rec.positions)
            self.held.append(rec)
        elif len(rec.positions):
            self.sealed.append(rec)

    def take(self) -> list[ServedRecord]:
        """The sealed records, handed to training (the buffer keeps the in-flight ones)."""
        out = list(self.sealed)
        self.sealed.clear()
        self.positions -= sum(len(r.positions) for r in out)
        return out

    def _room(self) -> bool:
        while self.positions >= self.cfg.buffer_positions and self.sealed:
            self.positions -= len(self.sealed.popleft().positions)
        return self.positions < self.cfg.buffer_positions

    @property
    def full(self) -> bool:
        return self.positions >= self.cfg.buffer_positions


class OnlineDraft:
    """Buffers, ships and swaps; runs on the engine thread only. ``trainer``: a
    `TrainerClient` (adaserve/distill/online.py) or anything with submit / result / pause /
    close."""

    def __init__(self, cfg: OnlineDraftConfig, executor, trainer) -> None:
        self.cfg, self.executor, self.trainer = cfg, executor, trainer
        self.buffer = DisagreementBuffer(cfg)
        self.reports: list[UpdateReport] = []
        self.busy = False  # a job is with the trainer
        self.since = 0  # requests sealed since the last job
        self.paused = False
        self.version = 0  # swaps done: which draft is serving
        executor.tap = self._tap

    @classmethod
    def start(cls, cfg: OnlineDraftConfig, engine_cfg, models, executor) -> OnlineDraft:
        from adaserve.distill.online import TrainerClient

        return cls(cfg, executor, TrainerClient.start(cfg, engine_cfg, models))

    def _tap(self, reqs, candidates, mask, result) -> None:
        sel = np.where(mask, candidates.depth, 0).max(1)  # [n] selected depth
        acc = np.array([len(a) for a in result.accepted], np.int64)
        self.buffer.observe(reqs, sel, acc, result.bonus_logits)

    def after_step(self, outputs: Sequence[Output], waiting: int,
                   slots: Sequence[Request]) -> None:
        """Between iterations: seal finished requests, throttle the trainer, ship a job
        when one is due, install a finished update."""
        for out in outputs:
            if out.finished:
                self.buffer.seal(out.request_id)
                self.since += 1
        pause = waiting > self.cfg.pause_waiting
        if pause != self.paused and self.busy:
            self.trainer.pause(pause)
            self.paused = pause
        if not self.busy and (self.since >= self.cfg.interval or self.buffer.full):
            fresh = self.buffer.take()
            if fresh and self.buffer.held:
                self.trainer.submit(fresh, list(self.buffer.held))
                self.busy, self.since = True, 0
        if self.busy:
            self.poll(slots, block=self.cfg.sync)

    def poll(self, slots: Sequence[Request], block: bool = False) -> None:
        got = self.trainer.result(block)
        if got is None:
            return
        self.busy = False
        if self.paused:
            self.trainer.pause(False)
            self.paused = False
        report, draft = got
        if draft is not None:
            t0 = time.perf_counter()
            self.executor.replace_draft(draft.model, [r.tokens for r in slots],
                                        draft.token_ids)
            self.version += 1
            report = _with_swap(report, time.perf_counter() - t0)
        self.reports.append(report)
        log.info("online draft update %d: held-back agreement %.3f -> %.3f, %s",
                 len(self.reports), report.agreement_before, report.agreement_after,
                 "swapped in" if report.swapped else "rolled back")

    def state(self) -> dict:
        """What /metrics shows."""
        last = self.reports[-1] if self.reports else None
        return {"updates": sum(r.swapped for r in self.reports),
                "rollbacks": sum(not r.swapped for r in self.reports),
                "agreement_before": None if last is None else last.agreement_before,
                "agreement_after": None if last is None else last.agreement_after,
                "buffer_positions": self.buffer.positions, "held_back": len(self.buffer.held),
                "training": self.busy, "paused": self.paused}

    def close(self) -> None:
        self.trainer.close()


def _with_swap(r: UpdateReport, seconds: float) -> UpdateReport:
    return dataclasses.replace(r, swap_seconds=seconds)

"""Predicted latency of one speculative iteration: draft steps plus one verification."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adaserve.scheduler.latency import LatencyModel


@dataclass(frozen=True, slots=True)
class IterationLatency:
    """Seed 000 Eq. 2: T_batch = T_draft + T_target, each from a profiled latency model.

    ``draft=None`` means drafting is free (or not measured): only verification is charged.
    """

    target: LatencyModel
    draft: LatencyModel | None = None

    def predict(self, context_tokens: int, draft_step_tokens: Sequence[int],
                verify_tokens: int) -> float:
        t = float(self.target.predict(context_tokens, verify_tokens))
        if self.draft is not None:
            t += sum(float(self.draft.predict(context_tokens, k)) for k in draft_step_tokens)
        return t

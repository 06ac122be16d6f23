"""``ADASERVE_ITERATION_LOG=FILE`` (``adaserve sglang serve-cpu --iteration-log FILE``):
one JSON line per decoding iteration of the ADASERVE worker, as measured inside SGLang's
scheduler process -- the SGLang counterpart of ``adaserve serve --iteration-log``.

What the iteration verified (the policy's selection, what the target forward computed, the
uniform layout it would otherwise have computed) and what each phase took: the draft
(SGLang's draft loop with AdaServe's selection; its draft steps alone, each one draft
forward over the n x w beam tokens and their top-k), the target's verify forward alone,
and the draft extend after it. A draft step against the verify forward, in the same
iterations, is the draft's cost against the target's, side by side in one run (at
B = 2n both compute two tokens per request). benchmarks/sglang/cpu.py reads it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

LOG_ENV = "ADASERVE_ITERATION_LOG"


@dataclass(frozen=True, slots=True)
class IterationRecord:
    seconds: float  # the whole decoding iteration: draft, verify, draft extend
    running: int  # requests in the batch
    budget: int  # B
    depth: int  # the shape the draft ran (d, w)
    width: int
    selected_tokens: int  # what the policy selected (roots included)
    verify_tokens: int  # what the target forward computed
    layout_tokens: int  # bs x N: what a uniform verify computes
    ragged: bool
    emitted_tokens: int  # accepted drafts + one bonus token per request
    draft_s: float  # the whole draft phase: SGLang's draft loop, selection, compaction
    draft_steps_s: float  # its draft steps only: d - 1 draft forwards of n x w tokens
    draft_steps: int  # d - 1
    select_s: float  # AdaServe's selection (the organize hook)
    verify_s: float  # the target's verify forward only
    extend_s: float


class IterationLog:
    """Appends records to a file, one line each, line-buffered (a stopped server keeps
    every finished line). ``from_env`` is None unless LOG_ENV names a file."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "a", buffering=1)

    @classmethod
    def from_env(cls) -> IterationLog | None:
        path = os.environ.get(LOG_ENV)
        return cls(path) if path else None

    def write(self, record: IterationRecord) -> None:
        self._f.write(json.dumps({"t": time.time(), **asdict(record)}) + "\n")

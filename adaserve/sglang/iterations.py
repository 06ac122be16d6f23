"""``ADASERVE_ITERATION_LOG=FILE`` (``adaserve sglang serve-cpu --iteration-log FILE``):
one JSON line per decoding iteration of the ADASERVE worker, as measured inside SGLang's
scheduler process -- the SGLang counterpart of ``adaserve serve --iteration-log``.

What the iteration verified (the policy's selection, what the target forward computed, the
uniform layout it would otherwise have computed) and what each phase took: the draft
(SGLang's draft loop with AdaServe's selection), the target's verify forward alone, the
draft extend after it (one draft forward over every request's N positions: the same
tokens a uniform verify forward computes, so ``extend_s / verify_s`` in a uniform run is
the draft's cost against the target's, measured side by side in the same iterations).
benchmarks/sglang_cpu.py reads it.
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
    draft_s: float
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

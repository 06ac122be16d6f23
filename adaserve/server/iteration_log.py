"""`adaserve serve --iteration-log FILE`: one JSON line per decoding iteration.

What the engine ran (prefill, verify and context tokens, depth, width, batch) and what it
took, as measured inside the served process. The simulator's validation compares these
against its hardware model iteration by iteration (benchmarks/sim/validation.py), which
separates a latency model that misses from host time and contention the model lacks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from adaserve.engine.core import IterationStats


def chain_iteration_log(path: Path, then: Callable[[IterationStats], None] | None
                        ) -> Callable[[IterationStats], None]:
    """An on_iteration hook that appends ``s`` to ``path`` (with the wall time it ended,
    seconds since the epoch), then calls ``then``. Line-buffered: a stopped server keeps
    every finished line."""
    f = open(path, "a", buffering=1)

    def on_iteration(s: IterationStats) -> None:
        f.write(json.dumps({"t": time.time(), **asdict(s)}) + "\n")
        if then is not None:
            then(s)
    return on_iteration

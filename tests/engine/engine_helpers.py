"""Shared prompts and workload driver for the engine tests."""

from __future__ import annotations

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.core import EngineCore
from adaserve.engine.loader import load_models

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "List three colors:",
    "The quick brown fox",
    "Water boils at",
    "import numpy as np\n",
    "Dear hiring manager,",
    "The three laws of motion are",
    "Q: What is 12 times 7?\nA:",
    "In 1969, astronauts",
    "A haiku about autumn:",
]



def make_core(policy: str = "incremental", draft: str | None = None, **kw) -> EngineCore:
    cfg = EngineConfig(policy=policy, draft=draft, **kw)
    return EngineCore(cfg, load_models(cfg))


def run_workload(core: EngineCore, schedule: list[tuple[int, str, list[int], SamplingParams]],
                 max_steps: int = 10_000) -> dict[str, list[int]]:
    """Feed requests at their step numbers; step until all finish. Returns output ids."""
    out: dict[str, list[int]] = {}
    pending = sorted(schedule, key=lambda s: s[0])
    step = 0
    while pending or core.has_work:
        while pending and pending[0][0] <= step:
            _, rid, ids, params = pending.pop(0)
            core.add(rid, ids, params)
            out[rid] = []
        for o in core.step():
            out[o.request_id].extend(o.token_ids)
        step += 1
        assert step < max_steps, "workload did not finish"
    return out

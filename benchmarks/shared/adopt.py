"""Kept runs of one policy spec kept again under another name that now runs the same policy.

When a preset changes to what a spec names (issue 38: ``adaserve`` took prefill=yield and
admit=deadline), the spec's kept runs are what the preset would measure, and the preset's
older runs are what the spec naming its old options would. A run qualifies where its
inputs, its name aside, are the target task's now: the same trace, set-up, code, and
policy hash (the classes, the options module and the resolved options:
run_keys.policy_sha). Before any is kept, ``check`` of the cheapest are re-run under the
target's name and must measure exactly what was kept; a sample is a check, not a proof.
Used by the paper's runs (``benchmarks.paper.figures --adopt``) and the fleet's
(``benchmarks.fleet.sim --adopt``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable


def adopt(source: str, target: str, runs: Path, field: str, task_of: Callable[[dict], Any],
          fresh: Callable[[Any], dict], same: Callable[[dict, dict], bool],
          check: int) -> list[str]:
    """Keep the runs of ``source`` under ``runs`` as ``target``'s; ``field`` is the task's
    attribute naming its policy, ``task_of`` a kept run's task, ``fresh`` a task measured
    now (not kept), ``same`` whether two runs measured the same. A line says what was
    done."""
    todo = []
    for path in sorted(runs.rglob(f"{source}-*.json")):
        kept = json.loads(path.read_text())
        task = task_of(kept) if "inputs" in kept else None
        if task is None or getattr(task, field) != source or task.path != path:
            continue  # another spec sharing the prefix, or a run no task asks for
        mine = dataclasses.replace(task, **{field: target})
        now = mine.inputs()
        if {**kept["inputs"], field: target} != now:
            continue  # a stale run, or one of another policy
        if mine.path.is_file() and json.loads(mine.path.read_text())["inputs"] == now:
            continue  # the target has its own
        todo.append((kept, mine, now))
    if not todo:
        return [f"no run of {source} is one {target} lacks"]
    todo.sort(key=lambda r: (r[0]["wall_s"], str(r[1].path)))
    moved = [str(t.path.relative_to(runs)) for kept, t, _ in todo[:check]
             if not same(fresh(t), kept)]
    if moved:
        return [f"{source} as {target}: nothing adopted, re-runs differ: {', '.join(moved)}"]
    for kept, task, now in todo:
        task.path.parent.mkdir(parents=True, exist_ok=True)
        task.path.write_text(json.dumps({**kept, "inputs": now}, indent=1) + "\n")
    return [f"{source} as {target}: {len(todo)} runs adopted "
            f"({min(check, len(todo))} re-run under {target}'s name identical)"]

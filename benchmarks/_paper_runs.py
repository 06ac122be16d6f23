"""Simulated runs of the paper's figures, kept as one small JSON each (issue 19).

A figure is many runs: (set-up, trace, system, seed). Each is kept under
results/sim/runs/<pair>/<trace sha>/<system>-s<seed>.json with what it was run on (the
trace's, hardware model's and acceptance model's hashes, the engine limits) and what it
measured. A run whose inputs are unchanged is not run again, so a figure grows across
sessions and a changed model re-runs only what it touches. The kit ships some traces
twice under two names (e.g. RPS 3.8 = 4.0): keyed on content, they run once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _common import RESULTS
from _paper import PaperSetup
from _run_keys import code_sha, policy_sha

from adaserve.loadgen.records import DEFAULT_TTFT_SLO_MS, Record, summarize
from adaserve.sim.hardware import DATA as HW_DATA
from adaserve.sim.run import SimRun, run
from adaserve.sim.setups import Deployment

RUNS = RESULTS / "sim" / "runs"
ACC_DATA = HW_DATA.parent / "acceptance"
TTFT_SLO_MS = DEFAULT_TTFT_SLO_MS  # the end-to-end reading's TTFT SLO, every class


@dataclass(frozen=True, slots=True)
class Task:
    setup: PaperSetup
    trace: Path  # a paper-format CSV
    system: str
    seed: int
    hardware: str = ""  # "" = the deployment's for this system
    # engine settings that differ from the deployment's for this run (Fig. 14's batch cap)
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def run_seed(self) -> int:
        """The seed draws the acceptance and where each output ends (stop_at_eos), so every
        system, the ones that draft nothing too, differs by seed."""
        return self.seed

    @property
    def hw_name(self) -> str:
        return self.hardware or self.setup.deploy.hardware_of(self.system)

    def inputs(self) -> dict:
        deploy = self.setup.deploy
        return {"trace_sha": _sha(self.trace), "deployment": deploy.name,
                "deployment_sha": system_sha(deploy, self.system),
                "hardware": self.hw_name,
                "hardware_sha": _model_sha(HW_DATA / f"{self.hw_name}.json"),
                "acceptance_sha": _model_sha(ACC_DATA / f"{deploy.acceptance}.json"),
                "system": self.system, "seed": self.run_seed, "eos_seed": self.run_seed,
                "code_sha": code_sha(), "policy_sha": policy_sha(self.system),
                **({"settings": dict(self.settings)} if self.settings else {})}

    @property
    def path(self) -> Path:
        hw = "" if not self.hardware else f"{self.hardware}/"
        extra = "".join(f"-{k}{v}" for k, v in self.settings)
        return (RUNS / self.setup.key / hw / _sha(self.trace)[:12]
                / f"{self.system}{extra}-s{self.run_seed}.json")


def system_sha(deploy: Deployment, system: str) -> str:
    """A hash of what ``system`` runs on in a deployment: the engine settings, its own
    entry, the output lengths. Another system's entry added or changed leaves it alone."""
    spec = {"engine": dict(deploy.engine), "system": dict(deploy.settings_of(system)),
            "eos_hazard": deploy.eos_hazard, "acceptance": deploy.acceptance}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=None)  # within one process the files do not change
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=None)
def _model_sha(path: Path) -> str:
    """A model file's hash over what the simulation reads: its prose (source, notes) may
    be reworded without making every kept run stale."""
    d = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("source", "notes")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def cached(task: Task) -> dict | None:
    """The kept run if its inputs are still the task's."""
    if not task.path.is_file():
        return None
    kept = json.loads(task.path.read_text())
    return kept if kept["inputs"] == task.inputs() else None


def tokens_per_step(records: list[Record]) -> float:
    """Output tokens over verification steps, pooled over request-steps (accepted + the
    bonus token), as the artifact's mean_generated_tokens_per_step is."""
    ok = [r for r in records if r.status == "ok"]
    steps = [r.output_tokens / r.server["accepted_tokens_per_step"] for r in ok
             if r.server.get("accepted_tokens_per_step")]
    return (sum(r.output_tokens for r in ok) / sum(steps)) if steps else 1.0


def measured(res: SimRun) -> dict:
    """What a page reads from a run: tokens per step, each class's summary under the
    readings (TPOT within its SLO; end to end, TTFT within TTFT_SLO_MS too; the authors'
    own test, which the paper's figures use)
    with TPOT and TTFT percentiles, and how long the trace took to drain against how long
    its arrivals lasted (a server that falls behind drains long after the last arrival)."""
    pct = lambda x: None if x is None else 100 * x  # noqa: E731
    sent = [r.sent_s for r in res.records]
    return {
        "tokens_per_step": tokens_per_step(res.records),
        "trace_s": max(sent) - min(sent), "drain_s": res.simulated_s - min(sent),
        "classes": {r.slo_class: {"slo_ms": r.slo_ms, "sent": r.sent,
                                  "attainment": pct(r.attainment),
                                  "attainment_e2e": pct(r.attainment_ttft),
                                  "attainment_paper": pct(r.attainment_paper),
                                  "goodput": r.goodput_tok_s,
                                  "goodput_paper": r.goodput_paper_tok_s,
                                  "throughput": r.throughput_tok_s,
                                  "tpot_p50_ms": r.tpot_ms["p50"], "tpot_p99_ms": r.tpot_ms["p99"],
                                  "ttft_p50_ms": r.ttft_ms["p50"], "ttft_p99_ms": r.ttft_ms["p99"]}
                    for r in summarize(res.records, TTFT_SLO_MS)},
    }


def execute(task: Task) -> dict:
    """Run one task (the real engine loop on the simulated executor) and keep it."""
    requests = task.setup.requests(task.trace, task.run_seed)
    over = {"hardware": task.hardware} if task.hardware else {}
    over.update(task.settings)
    res = run(task.setup.sim_setup(task.system, **over), requests, seed=task.run_seed)
    out = {
        "inputs": task.inputs(), "trace": task.trace.name, "requests": len(requests),
        "iterations": res.iterations, "simulated_s": res.simulated_s, "wall_s": res.wall_s,
        "date": time.strftime("%Y-%m-%d"), **measured(res),
    }
    task.path.parent.mkdir(parents=True, exist_ok=True)
    task.path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def _execute_logged(task: Task) -> tuple[Task, dict]:
    t0 = time.perf_counter()
    out = execute(task)
    print(f"  {task.setup.key} {task.trace.stem} {task.system} s{task.run_seed}: "
          f"{out['classes']['overall']['attainment']:.1f}% "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return task, out


def run_all(tasks: list[Task], jobs: int) -> dict[Task, dict]:
    """Every task's result: kept ones read, the rest run on ``jobs`` processes (the
    simulator is single-threaded). Tasks whose traces are identical run once."""
    results, todo = {}, {}
    for t in tasks:
        kept = cached(t)
        if kept is not None:
            results[t] = kept
        else:
            todo.setdefault(t.path, t)  # the path names trace content, system and seed
    if todo:
        print(f"{len(todo)} runs to do, {len(results)} kept", flush=True)
        if jobs > 1:
            with mp.get_context("fork").Pool(jobs) as pool:
                done = pool.map(_execute_logged, list(todo.values()), chunksize=1)
        else:
            done = [_execute_logged(t) for t in todo.values()]
        by_path = {t.path: out for t, out in done}
        for t in tasks:  # duplicates of a trace that ran under another name included
            results.setdefault(t, by_path.get(t.path))
    return results


def spread(values: list[float]) -> tuple[float, float, float]:
    a = np.asarray(values, float)
    return float(a.mean()), float(a.min()), float(a.max())

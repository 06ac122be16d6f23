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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.shared.adopt import adopt as shared_adopt
from benchmarks.shared.common import RESULTS, map_jobs
from benchmarks.paper.kit import KIT, PaperSetup
from benchmarks.shared.run_keys import code_sha, policy_sha

from adaserve.engine.systems import resolve_system
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
        # refused at the door (a policy with refuse=on); every reading counts them as misses
        "refused": sum(r.status == "rejected" for r in res.records),
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


def simulate(task: Task) -> tuple[SimRun, int]:
    """Run one task (the real engine loop on the simulated executor): the run and the
    number of requests it served."""
    requests = task.setup.requests(task.trace, task.run_seed)
    over = {"hardware": task.hardware} if task.hardware else {}
    over.update(task.settings)
    return run(task.setup.sim_setup(task.system, **over), requests, seed=task.run_seed), len(requests)


def execute(task: Task) -> dict:
    """Run one task and keep it."""
    res, n = simulate(task)
    out = {
        "inputs": task.inputs(), "trace": task.trace.name, "requests": n,
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
        done = map_jobs(_execute_logged, list(todo.values()), jobs)
        by_path = {t.path: out for t, out in done}
        for t in tasks:  # duplicates of a trace that ran under another name included
            results.setdefault(t, by_path.get(t.path))
    return results


def spread(values: list[float]) -> tuple[float, float, float]:
    a = np.asarray(values, float)
    return float(a.mean()), float(a.min()), float(a.max())


# where a kept run's trace may be: the kit's, the test set's, Fig. 14's
TRACE_DIRS = (KIT / "traces", RESULTS / "sim" / "test-set" / "traces", RESULTS / "sim" / "fig14")
MEASURED = ("tokens_per_step", "iterations", "simulated_s", "drain_s", "classes")


def _task_of(kept: dict) -> Task | None:
    """The task a kept run answers, None if its set-up or trace is no longer there."""
    from benchmarks.paper.kit import SEED_SETUPS, SETUPS

    i = kept["inputs"]
    setups = [s for s in {**SETUPS, **SEED_SETUPS}.values() if s.deployment == i.get("deployment")]
    traces = [d / kept["trace"] for d in TRACE_DIRS if (d / kept["trace"]).is_file()]
    traces = [t for t in traces if _sha(t) == i["trace_sha"]]
    if not setups or not traces:
        return None
    try:  # a run of a policy no longer shipped (a name issue 38 retired) answers no task
        resolve_system(i["system"])
    except ValueError:
        return None
    settings = tuple(i.get("settings", {}).items())
    return Task(setups[0], traces[0], i["system"], i["seed"], settings=settings)


def rekey(check: int = 2, jobs: int = 1) -> list[str]:
    """Give kept runs of an older code version the current keys where re-runs show the
    change did not move them; a line per version says what was done.

    A run qualifies when its inputs differ from its task's in the code hash, its policy's
    hash, or both (a change to its trace, set-up, hardware or acceptance model never
    qualifies). A version is the code and policy hashes a run was kept under and its
    policy's hash now; each version's ``check`` cheapest runs and ``check`` costliest are
    re-run (``jobs`` at a time) and compared with what was kept, every measured field
    exactly: a change that moves one policy shows in that policy's sample and leaves that
    version stale, the others re-keyed. The costliest are the most loaded, where a change
    that acts only under load (a door that shuts when most requests miss) acts first. A
    sample is a check, not a proof."""
    keys = ("code_sha", "policy_sha")
    groups: dict[tuple[str, ...], list[tuple[Path, dict, Task]]] = {}
    for path in sorted(RUNS.rglob("*.json")):
        kept = json.loads(path.read_text())
        if "inputs" not in kept or "trace_sha" not in kept["inputs"]:
            continue
        task = _task_of(kept)
        if task is None or task.path != path:
            continue
        now = task.inputs()
        if kept["inputs"] == now:
            continue
        if kept["inputs"] == {**now, **{k: kept["inputs"].get(k) for k in keys}}:
            # one version: the code and policy it ran, and the policy it would run now (a
            # spec whose preset changed meaning is its own version, and cannot hold back
            # the runs of a policy that did not change)
            version = (kept["inputs"].get("code_sha", ""), kept["inputs"].get("policy_sha", ""),
                       now["policy_sha"])
            groups.setdefault(version, []).append((path, kept, task))
    picked = {}
    for version, runs in groups.items():
        by_cost = sorted(runs, key=lambda r: (r[1]["wall_s"], str(r[0])))
        picked[version] = list({r[0]: r for r in by_cost[:check] + by_cost[::-1][:check]}
                               .values())
    fresh_of = iter(map_jobs(execute_fresh, [r[2] for ps in picked.values() for r in ps], jobs))
    lines = []
    for (old_code, old_policy, new_policy), runs in groups.items():
        picks = picked[(old_code, old_policy, new_policy)]
        moved = [str(r[0].relative_to(RUNS)) for r in picks if not _same(next(fresh_of), r[1])]
        name = (f"code {old_code[:12] or '(none)'}, policy {old_policy[:12] or '(none)'} "
                f"as {new_policy[:12]}")
        if moved:
            lines.append(f"{name}: {len(runs)} runs left stale, re-runs differ: {', '.join(moved)}")
            continue
        for path, kept, task in runs:
            kept["inputs"] = task.inputs()
            path.write_text(json.dumps(kept, indent=1) + "\n")
        lines.append(f"{name}: {len(runs)} runs re-keyed to code {code_sha()[:12]} "
                     f"({len(picks)} re-run identical)")
    return lines or ["no kept run differs from its task in the code or policy hash alone"]


def adopt(source: str, target: str, check: int = 2) -> list[str]:
    """Keep the runs of ``source`` as ``target``'s where they ran the policy ``target`` runs
    now, ``check`` of them re-run first (benchmarks/shared/adopt.py)."""
    return shared_adopt(source, target, RUNS, "system", _task_of, execute_fresh, _same, check)


def _same(a: dict, b: dict) -> bool:
    """Whether two runs measured exactly the same (through JSON, as kept)."""
    return all(json.loads(json.dumps(a[k])) == json.loads(json.dumps(b[k])) for k in MEASURED)


def execute_fresh(task: Task) -> dict:
    """A run of the task measured now, not kept (rekey compares it with the kept one)."""
    res, _ = simulate(task)
    return {"iterations": res.iterations, "simulated_s": res.simulated_s, **measured(res)}

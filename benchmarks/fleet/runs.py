"""Simulated fleet runs (issue 28), kept as one small JSON each.

A run is (set-up, trace, rate scale = replicas, router, policy, seed, speed). It is kept under
results/sim/fleet-runs/<pair>/<trace sha>/<policy>-<router>-x<N>[-f<speed>]-s<seed>.json with what
it was run on and what it measured, and reused while those inputs are unchanged. The
inputs include a hash of the scheduling code (scheduler/, adaserve/engine/*.py,
adaserve/sim/*.py) taken over its syntax trees without docstrings, so a comment, a docstring
or the layout may change and the runs stay; a change to a policy or to the loop runs
everything again, so the page can simply be re-run after one.

Of the set-up file, the inputs hold what the run's policy runs on (``system_sha``: the
engine settings and its own entry), so an entry added for another policy keeps the runs.
A change that cannot alter what a kept run measured (a new policy or router class beside
the ones the runs use, an edit of the set-up's other entries) still changes a hash. `rekey`
then checks instead of re-running everything: it re-runs a few runs of each older code or
set-up version and gives that version's runs the current keys only if every re-run
measures exactly what was kept (`python -m benchmarks.fleet.sim --rekey`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.shared.adopt import adopt as shared_adopt
from benchmarks.shared.common import RESULTS, map_jobs
from benchmarks.paper.kit import KIT, SETUPS, PaperSetup
from benchmarks.paper.runs import ACC_DATA, TTFT_SLO_MS, _model_sha, _sha, system_sha
from benchmarks.shared.run_keys import code_sha, policy_sha, router_sha

from adaserve.loadgen.records import Record, summarize
from adaserve.sim.fleet import simulate_fleet
from adaserve.sim.hardware import DATA as HW_DATA
from adaserve.sim.scale import scale_rate

RUNS = RESULTS / "sim" / "fleet-runs"


@dataclass(frozen=True, slots=True)
class FleetTask:
    setup: PaperSetup
    trace: Path
    replicas: int  # also the rate scale
    router: str  # a router spec (adaserve.sim.routers.make_router)
    policy: str
    seed: int
    # every arrival time divided by this after the N x scaling: the trace's rate times
    # ``speed`` per replica, to run past the rate where one replica saturates (the Fig. 8
    # traces stop at 4.6 req/s, where today's AdaServe still holds about 90%)
    speed: float = 1.0

    def inputs(self) -> dict:
        hw = self.setup.deploy.hardware_of(self.policy)
        return {"trace_sha": _sha(self.trace), "deployment": self.setup.deployment,
                "deployment_sha": system_sha(self.setup.deploy, self.policy),
                "hardware": hw, "hardware_sha": _model_sha(HW_DATA / f"{hw}.json"),
                "acceptance": self.setup.acceptance,
                "acceptance_sha": _model_sha(ACC_DATA / f"{self.setup.acceptance}.json"),
                "policy": self.policy, "router": self.router, "replicas": self.replicas,
                "seed": self.seed, "speed": self.speed, "code_sha": code_sha(),
                "policy_sha": policy_sha(self.policy), "router_sha": router_sha(self.router)}

    @property
    def path(self) -> Path:
        fast = "" if self.speed == 1.0 else f"-f{self.speed:g}"
        name = (f"{self.policy}-{self.router.replace(':', '_')}-x{self.replicas}{fast}"
                f"-s{self.seed}")
        return RUNS / self.setup.key / _sha(self.trace)[:12] / f"{name}.json"


def _pct100(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _classes(records: list[Record]) -> dict:
    """Per class and overall: both attainment readings (TPOT within its SLO, the paper's;
    end to end, TTFT within TTFT_SLO_MS too), goodput, TTFT p50 / p99 in ms."""
    return {r.slo_class: {"sent": r.sent, "attainment": _pct100(r.attainment),
                          "attainment_e2e": _pct100(r.attainment_ttft),
                          "goodput": r.goodput_tok_s, "ttft_p50_ms": r.ttft_ms["p50"],
                          "ttft_p99_ms": r.ttft_ms["p99"]}
            for r in summarize(records, TTFT_SLO_MS)}


MEASURED = ("requests", "iterations", "simulated_s", "classes", "replicas")  # what a run found


def measure(task: FleetTask) -> dict:
    """Run one task (N copies of the engine loop behind the router)."""
    reqs = [dataclasses.replace(r, t=r.t / task.speed)
            for r in scale_rate(task.setup.requests(task.trace), task.replicas)]
    res = simulate_fleet(task.setup.sim_setup(task.policy), reqs, task.replicas,
                         task.router, task.seed)
    return {"inputs": task.inputs(), "trace": task.trace.name, "requests": len(reqs),
            "trace_s": max(r.t for r in reqs),
            "iterations": res.iterations, "simulated_s": res.simulated_s,
            "wall_s": res.wall_s, "date": time.strftime("%Y-%m-%d"),
            "classes": _classes(res.records),
            "replicas": [_classes(res.of_replica(k))["overall"] for k in range(task.replicas)]}


def execute(task: FleetTask) -> dict:
    """Run one task and keep it."""
    out = measure(task)
    task.path.parent.mkdir(parents=True, exist_ok=True)
    task.path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def cached(task: FleetTask) -> dict | None:
    """The kept run if its inputs are still the task's."""
    if task.path.is_file():
        kept = json.loads(task.path.read_text())
        if kept["inputs"] == task.inputs():
            return kept
    return None


def _execute_logged(task: FleetTask) -> dict:
    t0 = time.perf_counter()
    out = execute(task)
    print(f"  {task.trace.stem} x{task.replicas} {task.router}"
          f"{'' if task.speed == 1.0 else f' at {task.speed:g}x'}: "
          f"{out['classes']['overall']['attainment']:.1f}% "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def result(task: FleetTask) -> dict:
    """The kept run if its inputs are still the task's, else a new one (logged)."""
    kept = cached(task)
    return kept if kept is not None else _execute_logged(task)


def results(tasks: list[FleetTask], jobs: int = 1) -> dict[FleetTask, dict]:
    """Every task's result: kept ones read, the rest run on ``jobs`` processes (a fleet
    simulation is single-threaded), the fewest replicas first: each run is kept as it
    ends, so a sweep cut short leaves the small fleets whole."""
    out = {t: cached(t) for t in dict.fromkeys(tasks)}
    todo = sorted((t for t, r in out.items() if r is None), key=lambda t: t.replicas)
    if todo:
        print(f"{len(todo)} fleet runs to do, {len(out) - len(todo)} kept", flush=True)
        done = map_jobs(_execute_logged, todo, jobs)
        out.update(zip(todo, done))
    return out


# ---- re-keying kept runs after a change that cannot move them ------------------------------

def _task_of(kept: dict) -> FleetTask | None:
    """The task a kept run answers, None if its set-up is no longer shipped."""
    i = kept["inputs"]
    setups = [s for s in SETUPS.values() if s.deployment == i.get("deployment")]
    trace = KIT / "traces" / kept["trace"]
    if not setups or not trace.is_file():
        return None
    return FleetTask(setups[0], trace, i["replicas"], i["router"], i["policy"], i["seed"],
                     i.get("speed", 1.0))


def _same(a: dict, b: dict) -> bool:
    """Whether two runs measured exactly the same (through JSON, as kept)."""
    return all(json.loads(json.dumps(a[k])) == json.loads(json.dumps(b[k])) for k in MEASURED)


def rekey(check: int = 2, jobs: int = 1) -> list[str]:
    """Give kept runs of an older code version, or made before an edit of their set-up
    file, the current keys where a re-run shows the change did not move them; a line per
    version says what was done.

    A run qualifies when its inputs differ from its task's in the code hash, the set-up's
    hash for its policy, its policy's hash, or several of them. Its version's `check` samples are the cheapest run at the
    fewest replicas and at the most (then the next cheapest runs): a change that moves one
    N, or one router, shows there first; and its `check` costliest, the most loaded, where
    a change that acts only under load acts first. They run ``jobs`` at a time. A sample
    is a check, not a proof; the page's runs are what `--rekey` leaves."""
    keys = ("code_sha", "deployment_sha", "policy_sha")
    groups: dict[tuple[str, ...], list[tuple[Path, dict, FleetTask]]] = {}
    for path in sorted(RUNS.rglob("*.json")):
        kept = json.loads(path.read_text())
        task = _task_of(kept)
        if task is None:
            continue
        now = task.inputs()
        if kept["inputs"] == now:
            continue
        if (kept["inputs"] == {**now, **{k: kept["inputs"].get(k) for k in keys}}
                and task.path == path):
            # the policy it would run now too: a spec whose preset changed meaning is its
            # own version, and cannot hold back the runs of one that did not change
            groups.setdefault((*(kept["inputs"].get(k) or "" for k in keys), now["policy_sha"]),
                              []).append((path, kept, task))
    picked = {}
    for version, runs in groups.items():
        by_cost = sorted(runs, key=lambda r: (r[1]["wall_s"], str(r[0])))
        ends = {min(r[2].replicas for r in runs), max(r[2].replicas for r in runs)}
        picks = [next(r for r in by_cost if r[2].replicas == n) for n in sorted(ends)]
        picks += [r for r in by_cost if r not in picks][:max(check - len(picks), 0)]
        picks = picks[:check]
        picked[version] = picks + [r for r in by_cost[::-1][:check] if r not in picks]
    fresh = iter(map_jobs(measure, [r[2] for ps in picked.values() for r in ps], jobs))
    lines = []
    for version, runs in groups.items():
        old_code, old_setup, old_policy, new_policy = version
        name = (f"code {old_code[:12]}, set-up {old_setup[:12]}, policy {old_policy[:12]} "
                f"as {new_policy[:12]}")
        picks = picked[version]
        moved = [r[0].name for r in picks if not _same(next(fresh), r[1])]
        if moved:
            lines.append(f"{name}: {len(runs)} runs left stale, re-runs differ: "
                         f"{', '.join(moved)}")
            continue
        for path, kept, task in runs:
            kept["inputs"] = task.inputs()
            path.write_text(json.dumps(kept, indent=1) + "\n")
        lines.append(f"{name}: {len(runs)} runs re-keyed to code {code_sha()[:12]} "
                     f"({len(picks)} re-run identical: {', '.join(r[0].name for r in picks)})")
    return lines or ["no kept run differs from its task in the code, set-up or policy hash "
                     "alone"]


def adopt(source: str, target: str, check: int = 2) -> list[str]:
    """Keep the runs of policy ``source`` as policy ``target``'s where they ran the policy
    ``target`` runs now, ``check`` of them re-run first (benchmarks/shared/adopt.py)."""
    return shared_adopt(source, target, RUNS, "policy", _task_of, measure, _same, check)

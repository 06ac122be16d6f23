"""Simulated fleet runs (issue 28), kept as one small JSON each.

A run is (set-up, trace, rate scale = replicas, router, policy, seed). It is kept under
results/sim/fleet-runs/<pair>/<trace sha>/<policy>-<router>-x<N>-s<seed>.json with what
it was run on and what it measured, and reused while those inputs are unchanged. The
inputs include a hash of the scheduling code (scheduler/, adaserve/engine/*.py,
adaserve/sim/*.py): a change to a policy or to the loop runs everything again, so the page
can simply be re-run after one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from _common import RESULTS
from _paper import PaperSetup
from _paper_runs import ACC_DATA, TTFT_SLO_MS, _model_sha, _sha

from adaserve.loadgen.records import Record, summarize
from adaserve.sim.fleet import simulate_fleet
from adaserve.sim.hardware import DATA as HW_DATA
from adaserve.sim.scale import scale_rate
from adaserve.sim.setups import DATA as SETUP_DATA

RUNS = RESULTS / "sim" / "fleet-runs"
ROOT = Path(__file__).resolve().parent.parent
CODE = ("scheduler/*.py", "adaserve/engine/*.py", "adaserve/sim/*.py")


@functools.lru_cache(maxsize=1)
def code_sha() -> str:
    """One hash over the scheduling code's source files."""
    h = hashlib.sha256()
    for pattern in CODE:
        for p in sorted(ROOT.glob(pattern)):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class FleetTask:
    setup: PaperSetup
    trace: Path
    replicas: int  # also the rate scale
    router: str  # a router spec (adaserve.sim.routers.make_router)
    policy: str
    seed: int

    def inputs(self) -> dict:
        hw = self.setup.deploy.hardware_of(self.policy)
        return {"trace_sha": _sha(self.trace), "deployment": self.setup.deployment,
                "deployment_sha": _model_sha(SETUP_DATA / f"{self.setup.deployment}.json"),
                "hardware": hw, "hardware_sha": _model_sha(HW_DATA / f"{hw}.json"),
                "acceptance": self.setup.acceptance,
                "acceptance_sha": _model_sha(ACC_DATA / f"{self.setup.acceptance}.json"),
                "policy": self.policy, "router": self.router, "replicas": self.replicas,
                "seed": self.seed, "code_sha": code_sha()}

    @property
    def path(self) -> Path:
        name = f"{self.policy}-{self.router.replace(':', '_')}-x{self.replicas}-s{self.seed}"
        return RUNS / self.setup.key / _sha(self.trace)[:12] / f"{name}.json"


def _classes(records: list[Record]) -> dict:
    return {r.slo_class: {"sent": r.sent, "attainment": None if r.attainment is None
                          else 100 * r.attainment, "goodput": r.goodput_tok_s}
            for r in summarize(records, TTFT_SLO_MS)}


def execute(task: FleetTask) -> dict:
    """Run one task (N copies of the engine loop behind the router) and keep it."""
    reqs = scale_rate(task.setup.requests(task.trace), task.replicas)
    res = simulate_fleet(task.setup.sim_setup(task.policy), reqs, task.replicas,
                         task.router, task.seed)
    out = {"inputs": task.inputs(), "trace": task.trace.name, "requests": len(reqs),
           "iterations": res.iterations, "simulated_s": res.simulated_s,
           "wall_s": res.wall_s, "date": time.strftime("%Y-%m-%d"),
           "classes": _classes(res.records),
           "replicas": [_classes(res.of_replica(k))["overall"] for k in range(task.replicas)]}
    task.path.parent.mkdir(parents=True, exist_ok=True)
    task.path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def result(task: FleetTask) -> dict:
    """The kept run if its inputs are still the task's, else a new one (logged)."""
    if task.path.is_file():
        kept = json.loads(task.path.read_text())
        if kept["inputs"] == task.inputs():
            return kept
    t0 = time.perf_counter()
    out = execute(task)
    print(f"  {task.trace.stem} x{task.replicas} {task.router}: "
          f"{out['classes']['overall']['attainment']:.1f}% "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return out

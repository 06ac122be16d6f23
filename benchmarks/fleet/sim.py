"""Simulated fleets on the authors' traces (issue 28): results/sim/fleet.md.

N replicas of the simulated Llama-3.1-70B server (the deployment paper-llama3.1-70b: the
authors' AdaServe as the figure pages run it, outputs ending at EOS), each the engine's
own scheduling loop, behind a router, on the Fig. 8 traces with their rate
scaled by N (adaserve/sim/scale.py). For every router and N it reports attainment and
goodput per rate, the fleet's rate at 90% attainment against N times one replica's, and
the SLO-aware routers against round robin at Fig. 8's two highest rates.

slo-spill's cap (a replica's capacity in SLO demand, at N = 2) and class-affinity's slack
(requests in flight, at N = 4) are tuned first on a trace the page does not report (Fig.
10's RPS 4.0 trace with 60% urgent requests), and the best values are what the sweep
runs.

    python -m benchmarks.fleet.sim [--replicas 1,2,4,8] [--rates 3.0,...] [--routers ...]
        [--top-routers ...] [--policy SPEC] [--seeds 0] [--jobs 1] [--adopt SPEC]

Runs are kept under results/sim/fleet-runs/ and reused while their inputs (the scheduling
code included, docstrings and comments left out) are unchanged (runs.py). After a
change that cannot move them (a new policy or router beside theirs), `--rekey` re-runs a
few runs of each older code (or set-up) version and re-keys that version's runs if every
re-run comes out identical, instead of running all of them again."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import numpy as np

from benchmarks.shared.common import RESULTS
from benchmarks.fleet.runs import FleetTask, adopt, rekey, results
from benchmarks.fleet.sim_page import TRACE, TUNE_TRACE, TUNED, render
from benchmarks.paper.kit import KIT, LLAMA

OUT = RESULTS / "sim"
# The kit ships these Fig. 8 traces twice under two names, byte for byte (fig8.md):
# a rate's runs are its twin's
TWINS = {"2.6": "2.4", "3.4": "3.2", "4.0": "3.8", "4.8": "4.6"}


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def trace(x: str):
    return KIT / "traces" / TRACE.format(x=TWINS.get(x, x))


def tune_tasks(router: str, values, n: int, policy: str, seed: int) -> list[FleetTask]:
    return [FleetTask(LLAMA, KIT / "traces" / TUNE_TRACE, n, f"{router}:{v:g}", policy, seed)
            for v in values]


def tune(router: str, values, n: int, policy: str, seed: int, got: dict
         ) -> tuple[float, list[tuple[float, float]]]:
    """The parameter of ``router`` with the best overall attainment at N = ``n`` on
    TUNE_TRACE (ties to the smaller value), from the runs in ``got``."""
    rows = [(v, got[t]["classes"]["overall"]["attainment"])
            for v, t in zip(values, tune_tasks(router, values, n, policy, seed))]
    return max(rows, key=lambda cr: (cr[1], -cr[0]))[0], rows


@dataclass(frozen=True, slots=True)
class Point:
    """A per-replica rate on the page: Fig. 8's trace ``x`` at ``speed`` times its rate."""
    x: str
    speed: float = 1.0

    @property
    def label(self) -> str:
        return self.x if self.speed == 1.0 else f"{float(self.x) * self.speed:.2f}"

    @property
    def rate(self) -> float:
        return float(self.x) * self.speed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", default="1,2,4,8")
    ap.add_argument("--rates", default="3.0,3.2,3.6,3.8,4.2,4.4,4.6",
                    help="Fig. 8 rates run for every router (per replica; x N for the fleet)")
    ap.add_argument("--overloads", default="1.2,1.5",
                    help="the highest rate's trace again at these multiples of its rate, "
                         "past where one replica saturates")
    ap.add_argument("--routers", default="round-robin,least-load,slo-aware,slo-spill,picker")
    ap.add_argument("--top-routers", default="random,power-of-two,class-split,class-affinity",
                    help="routers run only at the two highest rates run")
    # the replicas run today's preset; the page of 2026-11-27 ran the one before
    # prefill=yield and admit=deadline joined it (benchmarks.paper.kit.BEFORE, docs/fleet.md)
    ap.add_argument("--policy", default="adaserve")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs not kept yet run on this many processes")
    ap.add_argument("--rekey", action="store_true",
                    help="only re-key kept runs of older code, set-up or policy whose re-runs come "
                         "out identical (runs.rekey), then stop")
    ap.add_argument("--rekey-check", type=int, default=2,
                    help="the cheapest runs, and as many costliest, re-run per older code, "
                         "set-up or policy version with --rekey (--jobs at a time)")
    ap.add_argument("--adopt", metavar="SPEC",
                    help="keep the runs of policy SPEC as --policy's where they ran the policy "
                         "it runs now (runs.adopt; --rekey-check of them re-run first), then stop")
    args = ap.parse_args()
    if args.adopt:
        print("\n".join(adopt(args.adopt, args.policy, max(args.rekey_check, 1))))
        return 0
    if args.rekey:
        if args.rekey_check < 1:
            ap.error("--rekey-check must be >= 1")
        print("\n".join(rekey(args.rekey_check, args.jobs)))
        return 0
    t0 = time.perf_counter()
    ns = [int(n) for n in _list(args.replicas)]
    rates = sorted(_list(args.rates), key=float)
    points = [Point(x) for x in rates] + [Point(rates[-1], float(f))
                                          for f in _list(args.overloads)]
    seeds = [int(s) for s in _list(args.seeds)]
    tuned, tunings = {}, {}
    got = results([t for router, values, n in TUNED
                   for t in tune_tasks(router, values, n, args.policy, seeds[0])], args.jobs)
    for router, values, n in TUNED:
        best, rows = tune(router, values, n, args.policy, seeds[0], got)
        tuned[router], tunings[router] = f"{router}:{best:g}", (best, rows)
    routers = [tuned.get(r, r) for r in _list(args.routers)]
    top_routers = [tuned.get(r, r) for r in _list(args.top_routers)]
    top = points[-2:]

    def tasks(n: int, router: str, pt: Point) -> list[FleetTask]:
        return [FleetTask(LLAMA, trace(pt.x), n, "round-robin" if n == 1 else router,
                          args.policy, s, pt.speed) for s in seeds]

    cells = [(n, router, pt) for n in ns
             for router in (["round-robin"] if n == 1 else routers + top_routers)
             for pt in (points if router in routers or n == 1 else top)]
    got = results([t for cell in cells for t in tasks(*cell)], args.jobs)

    def run(n: int, router: str, pt: Point) -> dict:
        """Mean over seeds of the measured numbers (overall, per class, per replica)."""
        rs = [got[t] for t in tasks(n, router, pt)]
        classes = {c: {k: float(np.mean([r["classes"][c][k] or 0 for r in rs]))
                       for k in rs[0]["classes"][c] if k != "sent"}
                   for c in rs[0]["classes"]}
        per = [float(np.mean([r["replicas"][k]["attainment"] for r in rs])) for k in range(n)]
        return {"classes": classes, "replicas": per, "wall_s": sum(r["wall_s"] for r in rs),
                "drain": float(np.mean([r["simulated_s"] / r["trace_s"] for r in rs]))}

    grid = {(n, router, pt.label): run(n, router, pt) for n, router, pt in cells}
    page, data = render(args, ns, [p.label for p in points], routers, top_routers,
                        [p.label for p in top], grid, tunings, time.perf_counter() - t0)
    (OUT / "fleet.md").write_text(page)
    (OUT / "fleet.json").write_text(json.dumps(data, indent=1) + "\n")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())

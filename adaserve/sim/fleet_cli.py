"""`adaserve simulate --replicas N --router R`: the workload through a simulated fleet
(adaserve.sim.fleet), once per policy, router and seed; the summary table of the whole
fleet and each replica's attainment, and with --out the same files as one server's run."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import shlex
import sys
import time
from collections.abc import Callable, Sequence

from adaserve.sim.routers import ROUTERS, make_router


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fleet")
    g.add_argument("--replicas", type=int, default=1,
                   help="simulated servers, each the same scheduling loop (default 1)")
    g.add_argument("--router", default=None,
                   help=f"comma separated routers in front of them: {', '.join(ROUTERS)} "
                        "(slo-spill:<cap> sets its cap; default: round-robin)")
    g.add_argument("--rate-scale", type=int, default=1,
                   help="play the workload this many times back to back, each that many "
                        "times faster: its rate x K over the same span (a fleet of K "
                        "replicas at one replica's load)")


def main(args: argparse.Namespace, setup_for: Callable, policies: Sequence[str],
         seeds: Sequence[int],
         workload: Callable, describe: str, hardware: str, baseline_ms: float) -> int:
    from adaserve.loadgen.records import summarize, summary_table
    from adaserve.sim.driver import engine_meta, write_run
    from adaserve.sim.fleet import simulate_fleet
    from adaserve.sim.run import shows_progress

    if args.replicas < 1 or args.rate_scale < 1:
        raise ValueError("--replicas and --rate-scale must be >= 1")
    routers = [x.strip() for x in (args.router or "round-robin").split(",") if x.strip()]
    for r in routers:  # a misspelt name fails before the first run
        make_router(r, args.replicas)
    command = "adaserve simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    t0 = time.perf_counter()
    for seed in seeds:
        reqs = workload(seed)
        for policy in policies:
            for router in routers:
                res = simulate_fleet(setup_for(policy), reqs,
                                     args.replicas, router, seed,
                                     progress=shows_progress(args.quiet))
                print(f"\n## {res.headline()}\n")
                print(summary_table(summarize(res.records, args.ttft_slo_ms), args.ttft_slo_ms))
                per = [summarize(res.of_replica(k), args.ttft_slo_ms)[-1]
                       for k in range(args.replicas)]
                print("\nper replica: " + ", ".join(
                    f"{k}: {row.sent} requests, "
                    + ("-" if row.attainment is None else f"{100 * row.attainment:.1f}%")
                    for k, row in enumerate(per)))
                if args.out is not None:
                    out = args.out / policy / router
                    out = out / f"s{seed}" if len(seeds) > 1 else out
                    write_run(out, res.records, args.ttft_slo_ms, {
                        "command": command,
                        "date": dt.datetime.now().isoformat(timespec="seconds"),
                        "backend": "sim-fleet", "policy": policy, "router": router,
                        "replicas": args.replicas, "rate_scale": args.rate_scale,
                        "seed": seed, "workload": describe,
                        "baseline_latency_ms": baseline_ms,
                        **engine_meta(args.setup, args.acceptance, setup_for(policy)),
                        "requests": len(reqs), "iterations": res.iterations,
                        "replica_of": {str(k): v for k, v in res.replica_of.items()},
                        "simulated_s": res.simulated_s, "wall_s": res.wall_s})
    n = len(policies) * len(seeds) * len(routers)
    print(f"\n{n} fleet runs in {time.perf_counter() - t0:.1f} s wall"
          + (f"; written to {args.out}" if args.out is not None else ""))
    return 0

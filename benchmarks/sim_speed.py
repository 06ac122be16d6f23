"""How fast the simulator runs (issue 17, "Speed"): one 6-minute paper trace of 1,700
requests at batch up to 64, with the real policy code, per policy. Goal: <= 30 s wall each.

Wall seconds per run, the median of --repeats runs taken in rounds (every policy once per
round, so a slow spell of the machine lands on all alike), with iterations per second and
simulated seconds. Prints a table and writes results/sim/speed.{md,json}.

    python benchmarks/sim_speed.py [--repeats 3] [--policies adaserve,incremental]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from _common import RESULTS, commit, machine

from adaserve.sim import (HardwareModel, SimSetup, build, load_acceptance, read_paper_trace,
                          simulate)

TRACE = Path(__file__).resolve().parents[2] / "shared/paper-scale/traces/fig8_9_rps4.8_ol256.csv"
GOAL_S = 30.0


def one_run(policy: str, hw: HardwareModel, reqs, acceptance: str) -> dict:
    setup = SimSetup(hw, load_acceptance(acceptance), policy=policy, max_batch=64,
                     prefill_chunk=512)
    longest = max(r.prompt_tokens + r.output_tokens for r in reqs)
    core, clock = build(setup, max_context=longest + 1, max_waiting=len(reqs))
    t0 = time.perf_counter()
    simulate(core, clock, reqs)
    return {"wall_s": time.perf_counter() - t0, "iterations": len(core.stats),
            "simulated_s": clock.now()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--hardware", default="llama3.1-70b-a100-tp4")
    p.add_argument("--acceptance", default="synthetic-cpu-pair")
    p.add_argument("--policies", default="adaserve,global-greedy,equal-greedy,specinfer,"
                                         "turbospec,incremental")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="the trace's first N requests")
    args = p.parse_args()
    torch.set_num_threads(1)  # the simulator's tensors are small: one thread, no spinning
    hw = HardwareModel.load(args.hardware)
    reqs = read_paper_trace(args.trace, hw.baseline_latency_ms, args.limit)
    policies = [x.strip() for x in args.policies.split(",") if x.strip()]
    runs: dict[str, list[dict]] = {pol: [] for pol in policies}
    for _ in range(args.repeats):
        for pol in policies:
            runs[pol].append(one_run(pol, hw, reqs, args.acceptance))
    lines = ["# Simulator speed", "",
             f"- command: `python benchmarks/sim_speed.py {' '.join(sys.argv[1:])}`",
             f"- machine: {machine()}, torch {torch.__version__}, 1 thread",
             f"- date: {dt.date.today()}, commit {commit()}",
             f"- trace `{Path(args.trace).name}` ({len(reqs)} requests), hardware "
             f"`{hw.name}`, acceptance `{args.acceptance}`, batch up to 64, prefill chunk 512",
             "",
             f"| policy | wall s (median of {args.repeats}) | iterations | iterations/s | "
             f"simulated s | goal <= {GOAL_S:g} s |", "|---|---|---|---|---|---|"]
    for pol, rs in runs.items():
        wall = float(np.median([r["wall_s"] for r in rs]))
        it = rs[0]["iterations"]
        lines.append(f"| {pol} | {wall:.1f} | {it} | {it / wall:.0f} | "
                     f"{rs[0]['simulated_s']:.0f} | {'met' if wall <= GOAL_S else 'NOT met'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = RESULTS / "sim"
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.md").write_text(text)
    (out / "speed.json").write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

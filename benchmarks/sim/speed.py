"""How fast the simulator runs (issue 17, "Speed"): one 6-minute paper trace of 1,700
requests at batch up to 64, with the real policy code, per policy. Goals: <= 30 s wall
each, and a whole figure (Fig. 8/9: 13 rates x 9 systems) in <= 15 minutes.

Wall and CPU seconds per run, the median of --repeats runs taken in rounds (every policy
once per round, so a slow spell of the machine lands on all alike), with the iterations
the engine took, milliseconds per iteration and simulated seconds. With --figure, every
`fig8_9_*` trace beside --trace is then run once per system and the walls are summed: the
figure itself, one run after another on one core. Prints tables and writes
results/sim/speed.{md,json}; --render rewrites the page from the kept JSON, measuring
nothing.

    python -m benchmarks.sim.speed [--repeats 3] [--policies adaserve,incremental] [--figure]
                                   [--render]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.shared.common import KIT, RESULTS
from benchmarks.shared.page import Made, kept, render_flags, write_page

from adaserve.sim import (HardwareModel, SimSetup, build, load_acceptance, read_paper_trace,
                          simulate)
from adaserve.scheduler import split_specs

NAME = "speed"  # results/sim/speed.{md,json}
TRACE = KIT / "traces" / "fig8_9_rps4.8_ol256.csv"
GOAL_S = 30.0
FIGURE_GOAL_MIN = 15.0
# Fig. 8/9's six systems (the paper's) and seed 002's three other tree policies
FIGURE_SYSTEMS = ("adaserve-authors,vllm,sarathi,vllm-spec-4,vllm-spec-6,vllm-spec-8,specinfer,"
                  "global-greedy,equal-greedy")


def one_run(policy: str, hw: HardwareModel, reqs, acceptance: str) -> dict:
    setup = SimSetup(hw, load_acceptance(acceptance), policy=policy, max_batch=64,
                     prefill_chunk=512)
    longest = max(r.prompt_tokens + r.output_tokens for r in reqs)
    core, clock = build(setup, max_context=longest + 1, max_waiting=len(reqs))
    steps = 0

    def count(_done: int) -> None:
        nonlocal steps
        steps += 1

    c0, t0 = time.process_time(), time.perf_counter()
    simulate(core, clock, reqs, on_step=count)
    # core.stats keeps only the last 4,096 iterations: count them here
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "iterations": steps, "simulated_s": clock.now()}


def policy_runs(args, hw: HardwareModel, reqs) -> dict[str, list[dict]]:
    policies = split_specs(args.policies)
    runs: dict[str, list[dict]] = {pol: [] for pol in policies}
    for _ in range(args.repeats):
        for pol in policies:
            runs[pol].append(one_run(pol, hw, reqs, args.acceptance))
    return runs


def policy_table(res: dict) -> list[str]:
    lines = [f"| policy | wall s (median of {res['repeats']}) | CPU s | iterations | "
             f"ms / iteration | simulated s | goal <= {GOAL_S:g} s |",
             "|---|---|---|---|---|---|---|"]
    for pol, rs in res["policies"].items():
        wall = float(np.median([r["wall_s"] for r in rs]))
        cpu = float(np.median([r["cpu_s"] for r in rs]))
        it = rs[0]["iterations"]
        lines.append(f"| {pol} | {wall:.1f} | {cpu:.1f} | {it} | {1e3 * wall / it:.2f} | "
                     f"{rs[0]['simulated_s']:.0f} | {'met' if wall <= GOAL_S else 'NOT met'} |")
    return lines


def figure_runs(args, hw: HardwareModel) -> dict:
    traces = sorted(Path(args.trace).parent.glob("fig8_9_*.csv"))
    systems = split_specs(args.figure_systems)
    runs: dict[str, dict[str, dict]] = {s: {} for s in systems}
    for trace in traces:
        reqs = read_paper_trace(trace, hw.baseline_latency_ms)
        for system in systems:
            runs[system][trace.stem] = {"requests": len(reqs),
                                        **one_run(system, hw, reqs, args.acceptance)}
    total = sum(r["wall_s"] for per in runs.values() for r in per.values())
    return {"traces": [t.name for t in traces], "runs": runs, "total_s": total}


def figure_table(fig: dict) -> list[str]:
    traces, runs, total = len(fig["traces"]), fig["runs"], fig["total_s"]
    lines = [f"| system | wall s, {traces} rates | slowest rate s | iterations |",
             "|---|---|---|---|"]
    for system, per in runs.items():
        walls = [r["wall_s"] for r in per.values()]
        its = sum(r["iterations"] for r in per.values())
        lines.append(f"| {system} | {sum(walls):.0f} | {max(walls):.1f} | {its} |")
    verdict = "met" if total / 60 <= FIGURE_GOAL_MIN else "NOT met"
    lines += ["", f"**Whole figure: {total / 60:.1f} minutes** ({traces} traces x "
              f"{len(runs)} systems, one run each, in sequence; goal <= "
              f"{FIGURE_GOAL_MIN:g} min: {verdict})"]
    return lines


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(1)  # the simulator's tensors are small: one thread, no spinning
    load = os.getloadavg()[0]  # anything else running shows here, before our own runs
    # the code this run imports (others may commit while it runs)
    made = Made.now("benchmarks.sim.speed").to_dict()
    hw = HardwareModel.load(args.hardware)
    reqs = read_paper_trace(args.trace, hw.baseline_latency_ms, args.limit)
    res = {**made, "torch": torch.__version__, "load_average": load,
           "trace": Path(args.trace).name, "trace_dir": Path(args.trace).parent.name,
           "requests": len(reqs), "hardware": hw.name, "acceptance": args.acceptance,
           "repeats": args.repeats, "policies": policy_runs(args, hw, reqs)}
    if args.figure:
        res["figure"] = figure_runs(args, hw)
    return res


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = ["# Simulator speed", "",
             f"- command: `{res['command']}`",
             f"- machine: {res['machine']}, torch {res['torch']}, 1 thread; load average "
             f"{res['load_average']:.2f} at the start",
             f"- date: {res['date']}, commit {res['commit']}",
             f"- trace `{res['trace']}` ({res['requests']} requests), hardware "
             f"`{res['hardware']}`, acceptance `{res['acceptance']}`, batch up to 64, prefill "
             "chunk 512", "", *policy_table(res)]
    if "figure" in res:
        lines += ["", "## A whole figure", "",
                  f"Every `fig8_9_*` trace in `{res['trace_dir']}/`, each system once.", "",
                  *figure_table(res["figure"])]
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--hardware", default="llama3.1-70b-a100-tp4")
    # the paper's Llama-3.2-1B -> 70B pair: the trace and the hardware are its set-up too
    p.add_argument("--acceptance", default="synthetic-llama3.1-70b-1b")
    p.add_argument("--policies", default="adaserve,global-greedy,equal-greedy,specinfer,"
                                         "turbospec,incremental")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="the trace's first N requests")
    p.add_argument("--figure", action="store_true",
                   help="also run every fig8_9_* trace beside --trace once per system")
    p.add_argument("--figure-systems", default=FIGURE_SYSTEMS)
    render_flags(p, NAME, RESULTS / "sim")
    args = p.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

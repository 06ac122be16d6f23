"""Routing in the CPU fleet (issue 39): the SLO-aware picker against round robin and
least-load, one mixed-SLO Locust run each, same trace and seed: results/fleet_routing.md.

For each routing, `adaserve sglang fleet-cpu --replicas 2 --policy <routing>` (ADASERVE
replicas at the test tier's lean settings, the default classes over ``--baseline-ms``),
then `adaserve loadgen` against the fleet's front: Poisson arrivals at ``--rate``,
``--requests`` short prompts, the default class mix, ``--seed``; then the fleet is
stopped. Least-load is sglang-router's ``power_of_two``: with two replicas it compares
both. The routings run one after the other in one session (``--rounds`` times, in turn),
so a slow spell of the machine can land on one of them: run it alone.

    .venv-sglang/bin/python -m benchmarks.fleet.routing [--rate 0.3] [--requests 40]
        [--rounds 1] [--tokens 24]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.shared.common import ROOT, commit, machine, write_results

from adaserve.sglang.cpu.fleet import FleetProcess
from adaserve.sglang.cpu.process import free_port

ROUTINGS = {"round robin": "round_robin", "least-load": "power_of_two", "picker": "picker"}
REPLICA_ARGS = ["--max-running-requests", "8", "--max-total-tokens", "4096",
                "--steps", "3", "--topk", "2", "--draft-tokens", "4", "--budget", "6"]


def one(policy: str, args: argparse.Namespace, work: Path) -> list[dict]:
    fleet = FleetProcess(["--replicas", "2", "--policy", policy, "--port", str(free_port()),
                          "--replica-port", "0", "--router-metrics-port", "0",
                          "--log-dir", str(work / f"{policy}-logs"), "--", *REPLICA_ARGS,
                          "--baseline-ms", str(args.baseline_ms)],
                         work / f"{policy}.out", cwd=ROOT)
    try:
        out = work / f"{policy}-load"
        subprocess.run([sys.executable, "-m", "adaserve.cli", "loadgen", "--host", fleet.url,
                        "--rate", str(args.rate), "--requests", str(args.requests),
                        "--seed", str(args.seed), "--prompts", "short",
                        "--max-tokens", str(args.tokens), "--out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        return json.loads((out / "summary.json").read_text())["rows"]
    finally:
        fleet.stop()


def pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=0.3)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--baseline-ms", type=float, default=80.0)
    p.add_argument("--out", default="fleet_routing")
    args = p.parse_args()
    command = "python -m benchmarks.fleet.routing " + shlex.join(sys.argv[1:])
    work = Path(tempfile.mkdtemp(prefix="fleet-routing-"))
    runs: dict[str, list[list[dict]]] = {name: [] for name in ROUTINGS}
    for _ in range(args.rounds):
        for name, policy in ROUTINGS.items():
            runs[name].append(one(policy, args, work))
            print(name, [(r["slo_class"], pct(r["attainment"])) for r in runs[name][-1]],
                  flush=True)
    classes = [r["slo_class"] for r in runs["round robin"][0]]
    lines = [
        "# Routing in the CPU fleet: the SLO-aware picker, round robin, least-load", "",
        f"- command: `{command}`",
        f"- machine: {machine()}, run alone (/work/cpu-excl)",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}",
        f"- fleet: `adaserve sglang fleet-cpu --replicas 2 --policy <routing> -- "
        f"{' '.join(REPLICA_ARGS)} --baseline-ms {args.baseline_ms:g}` (default classes: "
        "urgent x1, moderate x2.4, relaxed x8, best-effort); least-load is sglang-router's "
        "power_of_two (with two replicas it compares both)",
        f"- load: `adaserve loadgen --rate {args.rate:g} --requests {args.requests} --seed "
        f"{args.seed} --prompts short --max-tokens {args.tokens}` (Poisson, the default "
        "class mix), the same for every routing, routings in turn, "
        f"{args.rounds} round(s)", "",
        "## Attainment (%) per class, each round", "",
        "| routing | " + " | ".join(classes) + " | goodput tok/s |",
        "|---|" + "---|" * (len(classes) + 1)]
    for name, rounds in runs.items():
        for rows in rounds:
            by = {r["slo_class"]: r for r in rows}
            lines.append(f"| {name} | " + " | ".join(pct(by[c]["attainment"]) if c in by
                                                     else "-" for c in classes)
                         + f" | {by['overall']['goodput_tok_s']:.2f} |")
    write_results(args.out, "\n".join(lines) + "\n", {"command": command, "runs": runs})
    print("\n".join(lines))


if __name__ == "__main__":
    main()

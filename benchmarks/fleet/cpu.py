"""Memory and time of the CPU fleet (issue 28): results/fleet_cpu.md.

Starts `adaserve sglang fleet-cpu --replicas N` (ADASERVE replicas with serve-cpu's real
draft, the test tier's lean settings), then:

- start-up: seconds until the fleet is ready (every replica answers, then router, front);
- memory: proportional set size (PSS, MiB: resident memory, shared pages split among
  the processes sharing them) of each part with all its child processes, idle and the
  peak while serving, sampled every 0.5 s;
- time: ``--requests`` requests of ``--tokens`` tokens, ``--concurrency`` at a time,
  through the fleet, then the same requests straight to replica 0 alone (one replica at
  the same load), rounds alternating so a slow spell of the machine lands on both;
  wall time, output tokens/s and median request latency of each;
- with ``--reference``, after the fleet stops: one replica started alone with every core
  (a fleet of one), sent ``--requests`` / N requests, ``--concurrency`` / N at a time, for
  the same rounds: the fleet's batch should take no longer than 1.5x that (issue 39: N
  replicas sharing the cores without oversubscribing them);
- a replica killed: ``--concurrency`` requests in flight through the fleet, replica N-1's
  process group SIGKILLed once it holds some; requests that failed and those that
  finished, then requests after the router's health checks took it out.

Timings need a quiet machine: the numbers depend on everything else running on the
cores.

    python -m benchmarks.fleet.cpu [--replicas 2] [--requests 16] [--concurrency 4]
        [--tokens 32] [--rounds 2] [--reference] [--out results/fleet_cpu.md] [--render]

Run it with SGLang's venv (.venv-sglang/bin/python): it starts SGLang. The page's data is
kept beside it (results/fleet_cpu.json); --render rewrites the page from it, measuring
nothing and needing no SGLang.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil

from benchmarks.shared.common import RESULTS, ROOT
from benchmarks.shared.page import Made, kept

if TYPE_CHECKING:  # measuring imports it; --render needs nothing of SGLang's fleet
    from adaserve.sglang.cpu.fleet import FleetProcess

PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three prime numbers:",
           "Once upon a time", "Water boils at", "The best way to learn is"]
LEAN_ARGS = ["--max-running-requests", "8", "--max-total-tokens", "4096",
             "--steps", "3", "--topk", "2", "--draft-tokens", "4"]
CLASS_ARGS = ["--slo-classes", "urgent=1,relaxed=100000,best-effort",
              "--default-class", "relaxed"]
REPLICA_ARGS = LEAN_ARGS + CLASS_ARGS  # the test tier's lean replicas
HEALTH_CHECK_S = 2


def pss_mib(pid: int) -> float:
    """A process and all its descendants, proportional set size in MiB (0 once it is
    gone): resident memory with each shared page split among the processes sharing it, so
    a part's processes (SGLang's server, scheduler, detokenizer share their libraries) and
    the parts add up without counting a page twice."""
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for q in procs:
        try:
            total += q.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


class Sampler:
    """Peak PSS per part while running, every 0.5 s in a thread."""

    def __init__(self, parts: dict[str, int]) -> None:
        self.parts, self.peak = parts, {k: 0.0 for k in parts}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(0.5):
            for k, pid in self.parts.items():
                self.peak[k] = max(self.peak[k], pss_mib(pid))

    def stop(self) -> dict[str, float]:
        self.stopped.set()
        self.thread.join()
        return self.peak


def generate(url: str, prompt: str, tokens: int) -> tuple[int, int, float]:
    """(status, output tokens, seconds) of one greedy request."""
    t0 = time.perf_counter()
    try:
        r = httpx.post(url + "/generate", timeout=1200, json={
            "text": prompt, "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                "max_new_tokens": tokens}})
    except httpx.HTTPError:
        return 0, 0, time.perf_counter() - t0
    n = r.json()["meta_info"]["completion_tokens"] if r.status_code == 200 else 0
    return r.status_code, n, time.perf_counter() - t0


def load(url: str, n: int, concurrency: int, tokens: int) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        rs = list(pool.map(lambda i: generate(url, PROMPTS[i % len(PROMPTS)], tokens),
                           range(n)))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "ok": sum(s == 200 for s, _, _ in rs),
            "tokens": sum(k for _, k, _ in rs), "latencies": [t for _, _, t in rs]}


def running(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=60).text
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
               if ln.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")))


def kill_one(fleet: FleetProcess, concurrency: int, tokens: int) -> dict:
    victim = fleet.replicas[max(fleet.replicas)]
    results: list = []
    with ThreadPoolExecutor(concurrency) as pool:
        futs = []
        for i in range(concurrency):
            futs.append(pool.submit(generate, fleet.url, PROMPTS[i % len(PROMPTS)], tokens))
            time.sleep(0.3)
        t0 = time.monotonic()
        while running(victim["url"]) < 1 and time.monotonic() - t0 < 300:
            time.sleep(0.2)
        on_victim = running(victim["url"])
        os.killpg(victim["pid"], signal.SIGKILL)
        results = [f.result() for f in futs]
    time.sleep(4 * HEALTH_CHECK_S)
    after = [generate(fleet.url, p, 4) for p in PROMPTS[:4]]
    return {"on_victim": on_victim, "ok": sum(s == 200 and k == tokens for s, k, _ in results),
            "failed": sum(s != 200 for s, _, _ in results),
            "statuses": sorted({s for s, _, _ in results}),
            "after_ok": sum(s == 200 for s, _, _ in after), "after": len(after)}


def measure(args: argparse.Namespace) -> dict:
    """The fleet measured: what the page shows, and the rounds it was read from."""
    made = dataclasses.replace(Made.now("benchmarks.fleet.cpu"), command=shlex.join(
        [".venv-sglang/bin/python", "-m", "benchmarks.fleet.cpu", *sys.argv[1:]]))
    logdir = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    fleet = _fleet(args, args.replicas, logdir / "fleet")
    try:
        parts = {f"{ln['fleet']} {ln['index']}": ln["pid"] for ln in fleet.parts}
        time.sleep(5)
        idle = {k: pss_mib(pid) for k, pid in parts.items()}
        sampler = Sampler(parts)
        one = fleet.replicas[0]["url"]
        runs = {"fleet": [], "one replica": []}
        for _ in range(args.rounds):
            runs["fleet"].append(load(fleet.url, args.requests, args.concurrency, args.tokens))
            runs["one replica"].append(load(one, args.requests, args.concurrency, args.tokens))
        peak = sampler.stop()
        killed = None if args.no_kill else kill_one(fleet, args.concurrency, args.tokens)
    finally:
        fleet.stop()
    reference = _reference(args, logdir / "reference") if args.reference else None
    return {**made.to_dict(), "defaults": args.defaults, "replicas": args.replicas,
            "replica_args": args.replica_args, "requests": args.requests,
            "tokens": args.tokens, "concurrency": args.concurrency, "rounds": args.rounds,
            "ready_s": fleet.ready_s,
            "memory": [{"part": k, "idle_mib": idle[k], "peak_mib": peak[k]} for k in idle],
            "whole_fleet": {"idle_mib": sum(idle.values()), "peak_mib": sum(peak.values())},
            "time": [{"target": name, "wall_s": statistics.median(r["wall_s"] for r in rs),
                      "tokens_per_s": statistics.median(r["tokens"] / r["wall_s"] for r in rs),
                      "latency_p50_s": statistics.median(t for r in rs for t in r["latencies"]),
                      "ok": sum(r["ok"] for r in rs), "sent": args.requests * len(rs)}
                     for name, rs in runs.items()],
            "killed": killed, "runs": runs, "reference": reference}


def _fleet(args: argparse.Namespace, replicas: int, logdir: Path) -> FleetProcess:
    from adaserve.sglang.cpu.fleet import FleetProcess

    logdir.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADASERVE_")
           or k == "ADASERVE_CACHE_DIR"}
    return FleetProcess(["--replicas", str(replicas), "--port", "0", "--replica-port", "0",
                         "--router-metrics-port", "0", "--health-check-interval",
                         str(HEALTH_CHECK_S), "--log-dir", str(logdir), "--",
                         *args.replica_args], logdir / "fleet.out", env=env, cwd=ROOT)


def _reference(args: argparse.Namespace, logdir: Path) -> dict:
    """One replica alone with every core (a fleet of one), straight to it, the fleet's
    batch divided by N: what each of N replicas would take if it had the machine alone."""
    fleet = _fleet(args, 1, logdir)
    n, c = max(1, args.requests // args.replicas), max(1, args.concurrency // args.replicas)
    try:
        rs = [load(fleet.replicas[0]["url"], n, c, args.tokens) for _ in range(args.rounds)]
    finally:
        fleet.stop()
    return {"requests": n, "concurrency": c, "cores": os.cpu_count(),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "ok": sum(r["ok"] for r in rs), "sent": n * len(rs), "runs": rs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-kill", action="store_true", help="skip the killed-replica run")
    ap.add_argument("--reference", action="store_true",
                    help="then one replica alone with every core, sent the batch / N")
    ap.add_argument("--defaults", action="store_true",
                    help="replicas at serve-cpu's own defaults (memory as a user who passes "
                         "no flag meets it), not the test tier's lean flags")
    ap.add_argument("--out", type=Path, default=None,
                    help="default results/fleet_cpu.md (lean) or fleet_cpu_defaults.md; its "
                         "data goes beside it (.json)")
    ap.add_argument("--render", action="store_true",
                    help="measure nothing: rewrite the page from the JSON beside it")
    args = ap.parse_args(argv)
    args.replica_args = CLASS_ARGS if args.defaults else REPLICA_ARGS
    if args.out is None:
        args.out = RESULTS / ("fleet_cpu_defaults.md" if args.defaults else "fleet_cpu.md")
    if args.render:
        data = kept(args.out.stem, args.out.parent)
    else:
        data = measure(args)
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    text = page(data)
    args.out.write_text(text)
    print(text)
    return 0


def page(data: dict) -> str:
    """The page from a measurement's data (measured now, or kept: --render)."""
    # a run from before --defaults (none kept) says nothing of which flags its replicas had
    flags = {True: "; serve-cpu's own defaults for everything else",
             False: "; the test tier's lean flags", None: ""}[data.get("defaults")]
    lines = [
        *Made.of(data).header("The CPU fleet: memory and time")[:-1],
        f"- fleet: `adaserve sglang fleet-cpu --replicas {data['replicas']} -- "
        f"{' '.join(data['replica_args'])}` (ADASERVE, serve-cpu's default draft: our "
        f"distilled draft with a full-vocabulary head{flags}), router round_robin, the SLO "
        "front",
        f"- load: {data['requests']} greedy requests of {data['tokens']} tokens, "
        f"{data['concurrency']} at a time, {data['rounds']} rounds alternating the fleet and "
        "replica 0 alone",
        "",
        f"Ready in {data['ready_s']:.0f} s (replica 0 alone, then the others together, the "
        "router, the front).",
        "",
        "## Memory (PSS with child processes, MiB)",
        "",
        "| part | idle | peak while serving |",
        "|---|---|---|",
    ]
    whole = data["whole_fleet"]
    lines += [f"| {m['part']} | {m['idle_mib']:,.0f} | {m['peak_mib']:,.0f} |"
              for m in data["memory"]]
    lines += [f"| whole fleet | {whole['idle_mib']:,.0f} | {whole['peak_mib']:,.0f} |", "",
              "## Time", "",
              "| target | wall s (median of rounds) | output tok/s | request latency p50 s "
              "| ok |", "|---|---|---|---|---|"]
    lines += [f"| {t['target']} | {t['wall_s']:.1f} | {t['tokens_per_s']:.2f} | "
              f"{t['latency_p50_s']:.1f} | {t['ok']}/{t['sent']} |" for t in data["time"]]
    if (ref := data.get("reference")) is not None:
        fleet_s = next(t["wall_s"] for t in data["time"] if t["target"] == "fleet")
        ratio = fleet_s / ref["wall_s"]
        lines += ["", "## Against one replica with the machine to itself", "",
                  f"One replica started alone with all {ref['cores']} cores (a fleet of one), "
                  f"sent the fleet's batch / {data['replicas']}: {ref['requests']} requests, "
                  f"{ref['concurrency']} at a time, median of {data['rounds']} rounds: "
                  f"**{ref['wall_s']:.1f} s** ({ref['ok']}/{ref['sent']} ok). The fleet's "
                  f"batch took {fleet_s:.1f} s, **{ratio:.2f}x** that (goal <= 1.5x, N "
                  "replicas sharing the cores without oversubscribing them: "
                  f"{'met' if ratio <= 1.5 else 'not met'})."]
    if (killed := data["killed"]) is not None:
        lines += ["", "## A replica killed", "",
                  f"{data['concurrency']} requests in flight; replica {data['replicas'] - 1} "
                  f"held {killed['on_victim']:g} (running and queued) when its process group "
                  f"was killed: {killed['ok']} finished whole, {killed['failed']} failed "
                  f"(statuses {killed['statuses']}; 0 is a dropped connection). After two "
                  f"health checks: {killed['after_ok']} of {killed['after']} new requests "
                  "served."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

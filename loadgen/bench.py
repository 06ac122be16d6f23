"""`adaserve bench`: policy sweeps (seed 002 §6). For each policy: start `adaserve serve`,
warm it, run every load point with `adaserve loadgen`, stop it; or, with --backend sim,
run every point on the simulator (adaserve/sim/bench.py). Every policy gets the same
prompts and the same arrival seeds. Writes results/<experiment>/: summary.md (tables and
the goals evaluated from the data), summary.json, PNGs, raw/ (per-run records and
summaries), with the exact command, machine and date.

Experiments:
- rate: attainment and goodput against request rate (--rates), class mix --mix;
- urgent: attainment against the urgent proportion (--urgent) at --rate;
- slo-scale: attainment against the urgent SLO as a multiple of the baseline latency
  (--scales, seed 002 Fig. 10) at --rate;
- context-grid: no server, no load: speculative vs incremental tok/s on a batch x context
  grid, in-process (context_grid.py, context_grid_page.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from adaserve.loadgen.arms import parse_arms
from adaserve.loadgen.extend import done, load_prior, ordered, settings
from adaserve.loadgen.options import add_mix_draw_args
from adaserve.loadgen.paper_trace import trace_serve_args
from adaserve.loadgen.points import Point, points, slo_classes  # noqa: F401 (bench.Point)
from adaserve.loadgen.run import commit, machine
from adaserve.loadgen.serve_process import ServeProcess
from adaserve.loadgen.settle import (SETTLE_S, WARMUP_REQUESTS, WARMUP_SEED_OFFSET, settle_first,
                                     warm, warm_up_run)
from adaserve.loadgen.workload import DEFAULT_MIX, PROMPT_SETS, PROMPT_SETS_HELP
from adaserve.scheduler import split_specs
from adaserve.server.options import at_least, seconds, share, weight

POLICIES = "adaserve,global-greedy,equal-greedy,specinfer,turbospec,incremental"
EXPERIMENTS = ("rate", "urgent", "slo-scale", "domain-shift", "context-grid")

DESCRIPTION = """\
Compare scheduling policies under the same load: for each policy, start `adaserve serve`,
warm it, run every load point of the experiment with `adaserve loadgen` (every policy gets
the same prompts, arrival times and SLO classes), stop it. Writes results/<experiment>/
(or --out): summary.md (tables, plots, the goals evaluated from the data), summary.json
and raw/ (each run's records), with the command, machine and date.

experiments:
  rate       attainment and goodput against the request rate (--rates)
  urgent     attainment against the urgent share (--urgent) at --rate
  slo-scale  attainment against the urgent SLO as a multiple of the baseline latency
             (--scales) at --rate
  domain-shift  accepted tokens per step with online draft adaptation on vs off, over
             the domain-shift stream (--requests of it, in --batch batches, no server;
             resumable: it stops after --piece-minutes, the same command continues)
  context-grid
             speculative vs incremental tokens/s on a batch x context grid (--batches,
             --contexts, --forms: draft forms with whole or bounded draft KV), in-process
             on the embedded engine, no server (loadgen/context_grid.py)

With --trace FILE (a paper trace), the requests are its first --requests rows, their
prompt and output lengths and SLOs, the gaps scaled to each --rates rate; the servers get a
--max-context that fits them.

With --backend sim, no server starts: every run goes through the simulator (the engine's
scheduling loop on a hardware latency model and an acceptance model; docs/sim.md) and the
result pages are the same.

example:
  adaserve bench --experiment rate --rates 0.5,1.0,1.5 --requests 30 --repeats 2
  adaserve bench --backend sim --experiment rate --rates 0.5,1.0,1.5 --out results/sim-rate
  adaserve bench --experiment context-grid --batches 1,8 --contexts 512,4096 --repeats 2"""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", choices=EXPERIMENTS, default="rate",
                   help="what varies between the load points")
    p.add_argument("--policies", default=POLICIES, help="comma separated")
    p.add_argument("--rates", default="0.25,0.5,0.75,1.0", help="requests/s (rate experiment)")
    p.add_argument("--rate", type=float, default=0.25,
                   help="requests/s of the urgent and slo-scale experiments")
    p.add_argument("--urgent", default="0.2,0.4,0.6,0.8",
                   help="urgent proportions (urgent experiment)")
    p.add_argument("--scales", default="1.0,0.9,0.8,0.7,0.6",
                   help="urgent SLO / baseline latency (slo-scale experiment)")
    p.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson",
                   help="arrival process at each point's rate")
    p.add_argument("--cv", type=float, default=2.0,
                   help="coefficient of variation of gamma gaps (> 1: bursty)")
    p.add_argument("--trace", type=Path, default=None,
                   help="a paper trace (emission_time_ms,input_length,output_length,slo_ratio) "
                        "instead of generated arrivals: its first --requests rows, classes and "
                        "lengths, the gaps scaled to each --rates rate (rate experiment; "
                        "default: none)")
    p.add_argument("--mix", default=DEFAULT_MIX, help="SLO class weights, name=weight,...")
    add_mix_draw_args(p.add_mutually_exclusive_group(), None, notes={
        "exact": " (the default; with --extend, the default is the sweep's own)"})
    p.add_argument("--requests", type=int, default=40, help="requests per load point")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per point, with seeds --seed, --seed + 1, ...")
    p.add_argument("--prompts", choices=list(PROMPT_SETS), default="mixed",
                   help=PROMPT_SETS_HELP)
    p.add_argument("--max-tokens", type=int, default=0,
                   help="output tokens per request (0: the prompt set's)")
    p.add_argument("--seed", type=int, default=0,
                   help="the first run's seed (arrival times, prompts, class assignment)")
    p.add_argument("--ttft-slo-ms", type=float, default=5000.0,
                   help="TTFT SLO of the TTFT+TPOT attainment variant")
    p.add_argument("--out", type=Path, default=None,
                   help="the sweep's directory (default: results/<experiment>)")
    p.add_argument("--rewrite-page", action="store_true",
                   help="run nothing: rewrite --out's summary.md (tables, plots, goals) from "
                        "its summary.json and raw/, as today's report code writes it")
    p.add_argument("--interleave", action="store_true",
                   help="run seed by seed, every policy within a seed (its own server each "
                        "time), the policies' order reversed every other seed, so a drift in "
                        "the machine's speed during the sweep falls on every policy alike "
                        "(a shared VM's speed can move 40%% within an hour); default: policy "
                        "by policy")
    p.add_argument("--settle-s", type=seconds, default=SETTLE_S,
                   help="seconds of a fixed matmul on every thread before the first server, "
                        "its rate on the page (loadgen/settle.py); 0: none")
    p.add_argument("--warmup-requests", type=at_least(0), default=WARMUP_REQUESTS,
                   help="requests of the first point served by an `incremental` server and "
                        f"discarded before the first measured server (loadgen/settle.py; "
                        f"default {WARMUP_REQUESTS}); 0: none")
    p.add_argument("--extend", action="store_true",
                   help="add to the sweep already in --out: runs (policy, point, seed) it has "
                        "are kept, not re-run; the experiment's settings must be the same, and "
                        "the classes are assigned as the sweep's were (a sweep that records no "
                        "assignment predates --mix-exact: i.i.d.)")
    p.add_argument("--serve-args", default="",
                   help="extra flags for every `adaserve serve`, e.g. '--budget 4'")
    p.add_argument("--arm", action="append", default=[], metavar="LABEL=POLICY [FLAGS]",
                   help="one more entry beside --policies: POLICY served with `adaserve "
                        "serve` flags of its own, shown as LABEL (repeatable), e.g. --arm "
                        "'adaserve-table=adaserve --context-table' (loadgen/arms.py)")
    p.add_argument("--baseline-ms", type=float, default=None,
                   help="baseline latency for every server (default: the first server's, "
                        "from its profile or measured, then passed to all the others, so "
                        "every policy is held to the same SLOs; with --backend sim: the "
                        "hardware model's)")
    p.add_argument("--backend", choices=["serve", "sim"], default="serve",
                   help="serve: an `adaserve serve` per policy, loaded by `adaserve loadgen`; "
                        "sim: the simulator, no server (it follows --serve-args' engine flags)")
    shift = p.add_argument_group("--experiment domain-shift")
    shift.add_argument("--batch", type=int, default=16, help="requests served together")
    shift.add_argument("--interval", type=at_least(1), default=32,
                       help="served requests between online draft updates")
    shift.add_argument("--head-rows", type=at_least(0), default=0,
                       help="draft head rows that may pass per update to served tokens "
                            "outside the head (default 0: the head stays as distilled)")
    shift.add_argument("--replay-share", type=share, default=None,
                       help="fraction of each update's training sequences drawn from the "
                            "replay reservoir (default: OnlineDraftConfig's)")
    shift.add_argument("--anchor-weight", type=weight, default=None,
                       help="weight of the served token at output positions the draft got "
                            "right (default: OnlineDraftConfig's, 0.25)")
    shift.add_argument("--steps", type=at_least(0), default=None,
                       help="optimizer steps per update (default: OnlineDraftConfig's, 16)")
    shift.add_argument("--piece-minutes", type=float, default=10.0,
                       help="stop (resumably) after this many minutes")
    shift.add_argument("--own-sample", type=int, default=64,
                       help="own-domain requests the forgetting check replays")
    shift.add_argument("--parity-sample", type=int, default=16,
                       help="requests served by adapted drafts generated again incrementally")
    from adaserve.loadgen.context_grid_page import add_args as _grid_args

    _grid_args(p)
    sim = p.add_argument_group("--backend sim")
    sim.add_argument("--hardware", default="cpu-smollm2-135m",
                     help="hardware model: a shipped one or a JSON file (docs/sim-models.md)")
    sim.add_argument("--acceptance", default="synthetic-cpu-pair",
                     help="acceptance model: a shipped one, a JSON file, or a replay "
                          "recording (.npz)")
    sim.add_argument("--prompt-tokens", choices=["tokenizer", "estimate"], default="tokenizer",
                     help="how prompts are counted without a server: the default model's "
                          "tokenizer (as the server counts), or 30 + 1.2 per word")


def start_server(policy: str, urgent_scale: float, extra: str, log: Path,
                 baseline_ms: float | None) -> ServeProcess:
    flags = ["--policy", policy, "--slo-classes", slo_classes(urgent_scale), "--log-level",
             "warning", *shlex.split(extra)]
    if baseline_ms is not None:
        flags += ["--baseline-ms", repr(baseline_ms)]
    return ServeProcess(flags, log)


def run_point(args, server: ServeProcess, point: Point, seed: int, out: Path,
              requests: int | None = None) -> dict:
    # a paper trace: its rows at the point's mean rate, relative SLOs on the server's baseline
    arrival = (["--arrival", "paper", "--trace", str(args.trace), "--baseline-ms",
                repr(server.info["baseline_latency_ms"])] if args.trace is not None
               else ["--arrival", args.arrival])
    cmd = [sys.executable, "-m", "adaserve.cli", "loadgen", "--host", server.url,
           "--rate", str(point.rate), *arrival, "--cv", str(args.cv),
           "--requests", str(args.requests if requests is None else requests), "--mix", args.mix,
           "--urgent", str(point.urgent), "--prompts", args.prompts, "--max-tokens",
           str(args.max_tokens), "--seed", str(seed), "--ttft-slo-ms", str(args.ttft_slo_ms),
           f"--mix-{args.mix_draw}", "--out", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return json.loads((out / "summary.json").read_text())


def online_delta(before: dict[str, float], server: ServeProcess) -> dict[str, float]:
    """What a server's online draft adaptation did during one run: updates swapped in and
    rolled back since ``before``, and whether one was training at the end."""
    after = server.online_draft()
    return {"updates": after["updates"] - before["updates"],
            "rollbacks": after["rollbacks"] - before["rollbacks"],
            "training_at_end": after["training"]}


def _fresh(path: Path) -> Path:
    """`path`, or path~2, ~3 ... where an earlier sweep (extended now) left its server log."""
    fresh, n = path, 2
    while fresh.exists():
        fresh, n = path.with_name(f"{path.stem}~{n}.log"), n + 1
    return fresh


def main(args: argparse.Namespace) -> int:
    from adaserve.loadgen.report import write_report

    if args.experiment == "domain-shift":  # no server, no sweep: its own runner
        from adaserve.loadgen import domain_shift

        args.max_tokens = args.max_tokens or 32
        return domain_shift.main(args)
    if args.experiment == "context-grid":
        from adaserve.loadgen.context_grid_page import main as grid_main

        return grid_main(args)
    out = args.out or Path("results") / args.experiment
    if args.rewrite_page:
        try:
            meta = json.loads((out / "summary.json").read_text())
        except (OSError, ValueError) as e:
            print(f"adaserve bench: error: {out}: no sweep to rewrite ({e})", file=sys.stderr)
            return 2
        write_report(out, meta, meta.pop("runs"))
        print(f"[bench] rewrote {out / 'summary.md'}")
        return 0
    pts = points(args)
    try:
        policies = split_specs(args.policies)
        arms = parse_arms(args.arm, policies)
        policies += list(arms)
        if arms and args.backend == "sim":
            raise ValueError("--arm gives servers flags of their own; --backend sim starts "
                             "no server")
        sim = _sim_backend(args, policies)
        serve_args = (args.serve_args if sim is not None else
                      trace_serve_args(args.serve_args or "", args.trace, args.requests))
    except (ValueError, OSError) as e:
        print(f"adaserve bench: error: {e}", file=sys.stderr)
        return 2
    if sim is not None and args.baseline_ms is None:
        args.baseline_ms = sim.baseline_ms  # so an extension checks it like a measured one
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    prior, runs = load_prior(out, args) if args.extend else ({}, [])
    # unset: an extension keeps the sweep's assignment (load_prior fills it in), else exact
    args.mix_draw = args.mix_draw or prior.get("mix_draw", "exact")
    have = done(runs)
    todo = lambda policy, point: [args.seed + rep for rep in range(args.repeats)  # noqa: E731
                                  if (policy, point.label, args.seed + rep) not in have]
    baseline = args.baseline_ms
    t_start = time.time()
    runs_left = any(todo(p, pt) for p in policies for pt in pts)
    settled = settle_first(0 if sim is not None else args.settle_s, runs_left)
    warmed = None
    if sim is None and runs_left and args.warmup_requests:
        first, seed = pts[0], args.seed + WARMUP_SEED_OFFSET
        log = _fresh(raw / "warmup.log")
        warmed = warm_up_run(
            lambda: start_server("incremental", first.urgent_scale, serve_args, log, baseline),
            lambda server: run_point(args, server, first, seed, raw / "warmup",
                                     args.warmup_requests),
            f"`incremental` at {first.label}, seed {seed}, {args.warmup_requests} requests")

    def save() -> dict:
        """summary.json after every run, so a stopped sweep resumes with --extend."""
        nonlocal runs
        this = {"command": "adaserve bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
                "machine": machine(), "date": dt.datetime.now().isoformat(timespec="seconds"),
                "commit": commit(), "wall_minutes": (time.time() - t_start) / 60}
        meta = {**this, **settings(args), "repeats": args.repeats, "mix_draw": args.mix_draw}
        if args.extend:
            # the first sweep's command, machine and date head the page; extensions are listed
            meta = {**meta, **{k: prior[k] for k in this},
                    "repeats": max(args.repeats, prior.get("repeats", 1)),
                    "extensions": [*prior.get("extensions", []), this]}
        meta["notes"] = [*prior.get("notes", []), *([settled.note()] if settled else []),
                         *([warmed] if warmed else [])]
        runs = ordered(runs, policies, [p.label for p in pts])
        (out / "summary.json").write_text(json.dumps({**meta, "runs": runs}, indent=2))
        return meta

    for policy, seeds in schedule(policies, [args.seed + r for r in range(args.repeats)],
                                  args.interleave):
        # one server per policy, unless the urgent SLO itself changes between points
        groups = [[p] for p in pts] if args.experiment == "slo-scale" else [pts]
        for group in groups:
            if not any(set(todo(policy, point)) & seeds for point in group):
                continue
            if sim is not None:
                server = sim.start(policy, group[0].urgent_scale)
            else:
                log = _fresh(raw / f"serve-{policy}-{group[0].label}.log")
                # what each iteration ran and took, beside the server log (the simulator's
                # validation reads it)
                arm = arms.get(policy)
                flags = " ".join(f for f in (serve_args, arm.flags if arm else "") if f)
                server = start_server(arm.policy if arm else policy, group[0].urgent_scale,
                                      f"{flags} --iteration-log "
                                      f"{shlex.quote(str(log.with_suffix('.iterations.jsonl')))}",
                                      log, baseline)
            baseline = server.info["baseline_latency_ms"]
            online = bool(server.info.get("online_draft"))
            try:
                if sim is None:
                    warm(server)
                for point in group:
                    for seed in [x for x in todo(policy, point) if x in seeds]:
                        name = f"{policy}-{point.label}-s{seed}"
                        t0 = time.time()
                        before = server.online_draft() if online else None
                        s = (server.run(point, seed, raw / name) if sim is not None
                             else run_point(args, server, point, seed, raw / name))
                        o = s["rows"][-1]
                        print(f"[bench] {name}: attainment {o['attainment']}, goodput "
                              f"{o['goodput_tok_s']:.2f} tok/s ({time.time() - t0:.0f} s)",
                              flush=True)
                        runs.append({"policy": policy, "point": point.label, "seed": seed,
                                     "rate": point.rate, "urgent": point.urgent,
                                     "urgent_scale": point.urgent_scale, "dir": name,
                                     "server": server.info, "summary": s,
                                     **({"online_draft": online_delta(before, server)}
                                        if online else {})})
                        save()
            finally:
                server.stop()
    meta = save()
    write_report(out, meta, runs)
    print((out / "summary.md").read_text())
    return 0


def schedule(policies: list[str], seeds: list[int],
             interleave: bool) -> list[tuple[str, set[int]]]:
    """(policy, the seeds its server runs) in the order the servers start: each policy once
    with every seed, or, interleaved, seed by seed with the policies' order reversed every
    other seed (A B C, C B A, A B C), so a slow spell of the machine is shared."""
    if not interleave:
        return [(p, set(seeds)) for p in policies]
    return [(p, {seed}) for i, seed in enumerate(seeds)
            for p in (policies if i % 2 == 0 else policies[::-1])]


def _sim_backend(args: argparse.Namespace, policies: list[str]):
    """The simulator's backend with --backend sim, else None; ValueError for a command
    neither backend can run."""
    if args.trace is not None:
        if args.experiment != "rate":
            raise ValueError("--trace fixes the classes and their SLOs: only --experiment rate "
                             "(the trace at each rate) can vary it")
        if args.arrival != "poisson":
            raise ValueError("--trace gives the arrival times: drop --arrival")
    if args.backend != "sim":
        return None
    from adaserve.sim.bench import SimBackend

    return SimBackend.from_args(args, policies)

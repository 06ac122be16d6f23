"""`adaserve simulate`: a workload through the engine's own scheduling loop on a simulated
executor, once per policy (and seed); the load generator's tables, and its files with
--out. docs/sim.md ("How to run")."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import shlex
import sys
import time
from pathlib import Path

from adaserve.loadgen.options import add_mix_draw_args
from adaserve.loadgen.workload import DEFAULT_MIX, MIX_DRAWS
from adaserve.scheduler import split_specs
from adaserve.server.slo_classes import DEFAULT_CLASSES
from adaserve.sim.hardware import available

DESCRIPTION = """\
Run a workload through the engine's own scheduling loop on a simulated executor: virtual
time from a hardware latency model, accepted tokens from an acceptance model. No model is
loaded and no GPU is needed. For each policy (and seed), prints the load generator's
summary table and the wall time. With --out, it writes <out>/<policy>/records.jsonl and
summary.json (<out>/<policy>/s<seed>/ with several seeds), in `adaserve loadgen`'s format.

workloads (one of):
  --trace FILE   a paper trace: emission_time_ms,input_length,output_length,slo_ratio;
                 slo_ratio > 0 is x the baseline latency, < 0 a TPOT SLO in ms
  --rate R       --requests arrivals, Poisson or --arrival gamma --cv X; classes from
                 --mix and --slo-classes; every prompt --input-tokens long, and every
                 output --output-tokens long

set-ups: --setup NAME (a shipped one or a JSON file) gives the hardware, acceptance,
outputs ending at EOS and every system's engine settings of a named deployment, such as
the AdaServe paper's (paper-llama3.1-70b, paper-qwen2.5-32b): the figure pages' runs. A
flag given beside it overrides its value for every system.

examples:
  adaserve simulate --setup paper-llama3.1-70b --trace fig8_9_rps4.0_ol256.csv \
      --policies adaserve,adaserve-text,vllm,sarathi,vllm-spec-4
  adaserve simulate --trace fig8_9_rps3.0_ol256.csv --policies adaserve,incremental --out sim
  adaserve simulate --rate 3 --requests 500 --arrival gamma --cv 2 --seeds 0,1,2
  adaserve simulate --trace fig8_9_rps3.0_ol256.csv --replicas 4 --rate-scale 4 \
      --router round-robin,slo-aware   # a fleet: 4 servers behind a router"""


def add_args(p: argparse.ArgumentParser) -> None:
    from adaserve.sim.setups import available as setups

    p.add_argument("--setup", default=None,
                   help=f"a named deployment ({', '.join(setups())}) or its JSON file: "
                        "hardware, acceptance, outputs and each system's engine (default: "
                        "none; the flags below)")
    p.add_argument("--hardware", default=None,
                   help=f"hardware model: a shipped one ({', '.join(available())}) or a JSON "
                        "file (default: the set-up's, else llama3.1-70b-a100-tp4)")
    p.add_argument("--acceptance", default=None,
                   help="acceptance model: a shipped one or a synthetic model's JSON file (a "
                        "replay recording, .npz, needs real prompts: `adaserve bench "
                        "--backend sim` has them; default: the set-up's, else "
                        "synthetic-cpu-pair)")
    p.add_argument("--policies", default="adaserve,incremental",
                   help="comma separated; `adaserve policies` lists them")
    p.add_argument("--budget", type=int, default=None,
                   help="token budget B per iteration (default: the hardware model's)")
    for flag, typ, default, text in ENGINE_FLAGS:
        p.add_argument(flag, type=typ, default=None, help=f"{text} (default: the set-up's, "
                                                          f"else {default})")
    p.add_argument("--eq8-depth", action="store_true",
                   help="Eq. 8's depth as published (default: cut where the priced draft "
                        "lowers predicted goodput, as `adaserve serve` does; a set-up says)")
    p.add_argument("--eos-hazard", type=float, default=None,
                   help="outputs end at EOS with this chance per token (default: the "
                        "set-up's, else 0: every output runs to its length)")
    p.add_argument("--seeds", default="0",
                   help="comma separated; each seeds the requests' drafts and target (and, "
                        "with --rate, the arrivals and classes)")
    wl = p.add_argument_group("workload")
    wl.add_argument("--trace", type=Path, default=None,
                    help="a paper-trace CSV (default: none; give it or --rate)")
    wl.add_argument("--limit", type=int, default=None,
                    help="the trace's first N requests (default: all)")
    wl.add_argument("--rate", type=float, default=None,
                    help="requests per second of generated arrivals (default: none; give it "
                         "or --trace)")
    wl.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson",
                    help="generated arrivals' process")
    wl.add_argument("--cv", type=float, default=2.0,
                    help="coefficient of variation of gamma gaps (> 1: bursty)")
    wl.add_argument("--requests", type=int, default=200, help="generated requests")
    wl.add_argument("--mix", default=DEFAULT_MIX, help="SLO class weights, name=weight,...")
    wl.add_argument("--urgent", type=float, default=-1.0,
                    help="urgent proportion in [0, 1] (overrides the mix's; -1: keep it)")
    add_mix_draw_args(wl.add_mutually_exclusive_group(), "exact",
                      notes={"exact": " (the default)"})
    wl.add_argument("--slo-classes", default=DEFAULT_CLASSES,
                    help="the classes' TPOT SLOs, as `adaserve serve` takes them: "
                         "name=x<multiple of the baseline> | name=<ms> | name (best effort)")
    wl.add_argument("--baseline-ms", type=float, default=None,
                    help="the SLOs' unit (default: the hardware model's baseline latency)")
    wl.add_argument("--input-tokens", type=int, default=256,
                    help="every generated request's prompt tokens")
    wl.add_argument("--output-tokens", type=int, default=256,
                    help="every generated request's output tokens (each runs to its max)")
    p.add_argument("--ttft-slo-ms", type=float, default=5000.0,
                   help="TTFT SLO of the TTFT+TPOT attainment variant")
    p.add_argument("--out", type=Path, default=None,
                   help="write <out>/<policy>/{records.jsonl,summary.json} (default: print "
                        "only)")
    from adaserve.sim.fleet_cli import add_args as add_fleet_args
    add_fleet_args(p)
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")


# (flag, type, default without a set-up, help): the SimSetup field is the flag's name
ENGINE_FLAGS = (
    ("--max-batch", int, 64, "running requests at most"),
    ("--prefill-chunk", int, 512, "prompt tokens prefilled per iteration, across requests"),
    ("--max-depth", int, 8, "D_max of Eq. 8"),
    ("--max-width", int, 16, "W_max of Eq. 9"),
    ("--min-depth", int, 1, "D_min of Eq. 8"),
    ("--draft-budget", int, "B", "B2 of Eq. 9: draft tokens one draft step may decode"),
    ("--planning-draft-ms", float, "the profile's draft costs",
     "the draft phase's price the policy plans with, one constant in ms"),
)


def main(args: argparse.Namespace) -> int:
    try:
        return _main(args)
    except (ValueError, OSError) as e:
        print(f"adaserve simulate: error: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    from adaserve.loadgen.records import summarize, summary_table
    from adaserve.sim.driver import engine_meta, write_run
    from adaserve.sim.run import check_policies, run, shows_progress

    policies = split_specs(args.policies)
    seeds = [int(s) for s in _names(args.seeds)]
    if not policies or not seeds:
        raise ValueError("--policies and --seeds need at least one value each")
    setup_for, hw, eos = _setups(args)
    baseline = args.baseline_ms if args.baseline_ms is not None else hw.baseline_latency_ms
    for policy in policies:  # a misspelt name fails before the first run
        check_policies(setup_for(policy), [policy])
    workload, describe = _workload_of(args, baseline)
    if eos:
        from adaserve.sim.workload import eos_mean, stop_at_eos

        ended = workload

        def workload(seed: int):  # one draw for every seed and system: the same outputs
            return stop_at_eos(ended(seed), eos, 0)

        describe += (f"; outputs end at EOS (hazard {eos:g} per token: a mean of "
                     f"{eos_mean(eos, 256):.0f} of 256)")
    if args.rate_scale != 1:
        from adaserve.sim.scale import scale_rate

        unscaled, k = workload, args.rate_scale

        def workload(seed: int):
            return scale_rate(unscaled(seed), k)

        describe += f"; rate x{k} (played {k} times back to back, each {k}x faster)"
    if args.replicas != 1 or args.router is not None:
        from adaserve.sim.fleet_cli import main as fleet_main

        return fleet_main(args, setup_for, policies, seeds, workload, describe, hw.name,
                          baseline)
    command = "adaserve simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    t0 = time.perf_counter()
    for seed in seeds:
        reqs = workload(seed)
        for policy in policies:
            res = run(setup_for(policy), reqs, seed,
                      progress=shows_progress(args.quiet), label=f"{policy} s{seed}")
            print(f"\n## {res.headline()}\n")
            print(summary_table(summarize(res.records, args.ttft_slo_ms), args.ttft_slo_ms))
            if args.out is not None:
                out = args.out / policy
                out = out / f"s{seed}" if len(seeds) > 1 else out
                write_run(out, res.records, args.ttft_slo_ms, {
                    "command": command, "date": dt.datetime.now().isoformat(timespec="seconds"),
                    "backend": "sim", "policy": policy, "seed": seed, "workload": describe,
                    "baseline_latency_ms": baseline, "budget": res.budget,
                    **engine_meta(args.setup, args.acceptance, setup_for(policy)),
                    "requests": len(reqs), "iterations": res.iterations,
                    "simulated_s": res.simulated_s, "wall_s": res.wall_s})
    print(f"\n{len(policies) * len(seeds)} runs in {time.perf_counter() - t0:.1f} s wall"
          + (f"; written to {args.out}" if args.out is not None else ""))
    return 0


def _setups(args: argparse.Namespace):
    """(policy -> its SimSetup, the hardware the SLOs are measured on, the EOS hazard):
    the set-up's per system, every flag given overriding it; without one, the flags."""
    from adaserve.sim import HardwareModel, ReplayAcceptance, SimSetup, load_acceptance
    from adaserve.sim.setups import Deployment

    given = {f.lstrip("-").replace("-", "_"): getattr(args, f.lstrip("-").replace("-", "_"))
             for f, *_ in ENGINE_FLAGS}
    given = {k: v for k, v in given.items() if v is not None}
    if args.budget is not None:
        given["budget"] = args.budget
    if args.eq8_depth:
        given["cost_aware_depth"] = False
    acceptance = None if args.acceptance is None else load_acceptance(args.acceptance)
    if isinstance(acceptance, ReplayAcceptance):
        raise ValueError("a replay recording is keyed on the prompts' token ids, and a trace "
                         "or --rate gives only lengths: run it with `adaserve bench --backend "
                         "sim`, whose prompts are the load generator's")
    if acceptance is not None:
        given["acceptance"] = acceptance
    if args.hardware is not None:
        given["hardware"] = HardwareModel.load(args.hardware)
    if args.setup is not None:
        deploy = Deployment.load(args.setup)
        hw = given.get("hardware") or HardwareModel.load(deploy.hardware)
        eos = deploy.eos_hazard if args.eos_hazard is None else args.eos_hazard
        return (lambda policy: deploy.setup(policy, **given)), hw, eos
    defaults = {flag.lstrip("-").replace("-", "_"): d for flag, _, d, _ in ENGINE_FLAGS
                if not isinstance(d, str)}
    hw = given.pop("hardware", None) or HardwareModel.load("llama3.1-70b-a100-tp4")
    acc = given.pop("acceptance", None) or load_acceptance("synthetic-cpu-pair")
    base = SimSetup(hw, acc, **{**defaults, **given})
    return (lambda policy: dataclasses.replace(base, policy=policy)), hw, args.eos_hazard or 0.0


def _workload_of(args: argparse.Namespace, baseline_ms: float):
    """seed -> the run's requests, and the workload in one line for the summaries."""
    from adaserve.loadgen.arrivals import gamma_times
    from adaserve.loadgen.workload import ClassMix
    from adaserve.server.slo_classes import parse_classes
    from adaserve.sim.workload import fixed_lengths, read_paper_trace

    if (args.trace is None) == (args.rate is None):
        raise ValueError("give one workload: --trace FILE or --rate R")
    if args.trace is not None:
        reqs = read_paper_trace(args.trace, baseline_ms, args.limit)
        if not reqs:
            raise ValueError(f"{args.trace} has no requests")
        return (lambda seed: reqs), f"paper trace {args.trace}, {len(reqs)} requests"
    if args.requests < 1 or args.input_tokens < 1 or args.output_tokens < 1:
        raise ValueError("--requests, --input-tokens and --output-tokens must be >= 1")
    mix = ClassMix.parse(args.mix)
    if args.urgent >= 0:
        mix = mix.with_urgent(args.urgent)
    slo_ms = {c.name: c.tpot_ms for c in parse_classes(args.slo_classes, baseline_ms).values()}
    cv = 1.0 if args.arrival == "poisson" else args.cv

    def workload(seed: int):
        return fixed_lengths(gamma_times(args.rate, cv, args.requests, seed), mix, slo_ms,
                             args.input_tokens, args.output_tokens, seed, args.mix_draw)

    process = "Poisson" if args.arrival == "poisson" else f"gamma (CV {cv:g})"
    return workload, (f"{args.requests} requests, {process} at {args.rate:g}/s, class mix "
                      f"{mix.spec()} ({MIX_DRAWS[args.mix_draw]}), classes {args.slo_classes}, "
                      f"{args.input_tokens} prompt + {args.output_tokens} output tokens each")


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]

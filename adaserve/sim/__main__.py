"""`python -m adaserve.sim`: one paper trace through the real scheduling loop, per policy,
on a simulated executor. A stopgap until `adaserve simulate` (issue 17); see docs/sim.md."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from adaserve.loadgen.records import summarize, summary_table
from adaserve.sim import (HardwareModel, SimSetup, available, build, load_acceptance,
                          read_paper_trace, simulate, write_run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m adaserve.sim", description=__doc__)
    p.add_argument("--hardware", default="llama3.1-70b-a100-tp4",
                   help=f"a shipped model ({', '.join(available())}) or a JSON file")
    p.add_argument("--acceptance", default="synthetic-cpu-pair",
                   help="a shipped acceptance model or a JSON file")
    p.add_argument("--trace", type=Path, required=True,
                   help="paper-trace CSV: emission_time_ms,input_length,output_length,slo_ratio")
    p.add_argument("--limit", type=int, default=None, help="the trace's first N requests")
    p.add_argument("--policies", default="adaserve,incremental", help="comma separated")
    p.add_argument("--budget", type=int, default=None, help="B (default: the hardware's)")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--prefill-chunk", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ttft-slo-ms", type=float, default=5000.0)
    p.add_argument("--out", type=Path, default=None,
                   help="write <out>/<policy>/records.jsonl and summary.json")
    args = p.parse_args(argv)
    hw = HardwareModel.load(args.hardware)
    reqs = read_paper_trace(args.trace, hw.baseline_latency_ms, args.limit)
    longest = max(r.prompt_tokens + r.output_tokens for r in reqs)
    for policy in (x.strip() for x in args.policies.split(",") if x.strip()):
        setup = SimSetup(hw, load_acceptance(args.acceptance), policy=policy,
                         budget=args.budget, max_batch=args.max_batch,
                         prefill_chunk=args.prefill_chunk)
        core, clock = build(setup, max_context=longest + 1, max_waiting=len(reqs))
        t0 = time.perf_counter()
        records = simulate(core, clock, reqs, seed=args.seed)
        wall = time.perf_counter() - t0
        print(f"\n## {policy}: {len(reqs)} requests, {len(core.stats)} iterations, "
              f"{clock.now():.1f} s simulated in {wall:.1f} s wall\n")
        print(summary_table(summarize(records, args.ttft_slo_ms), args.ttft_slo_ms))
        if args.out is not None:
            write_run(args.out / policy, records, args.ttft_slo_ms,
                      {"policy": policy, "hardware": hw.name, "acceptance": args.acceptance,
                       "trace": str(args.trace), "seed": args.seed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

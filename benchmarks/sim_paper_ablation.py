"""Where the simulated figures and the paper's part: one knob at a time (issue 19).

The figure pages (sim_paper_figures.py) run one configuration: the drafts priced to Fig.
15, B = 156, a 512-token prefill chunk fused with verification, batches of 64, the
acceptance model fitted to Fig. 12. Where a system's curve and the paper's differ by more
than 10 points, this measures which of those choices moves it, on the same traces, each
variant changing one thing:

- draft: free (issue 17's hardware model) instead of priced;
- budget: B = 256 and 512 instead of 156 (the paper's EuroSys version does not state B;
  the artifact's spec batch is 512 tokens);
- prefill: a 128-token chunk per iteration instead of 512;
- batch: up to 256 running requests (vLLM's default max-num-seqs) instead of 64;
- acceptance: the "prefix count" reading of Fig. 12 (acceptance-fit-llama70b.md: the
  paper's chain numbers read as committed tokens; alignment 0.983, no request spread).

    python benchmarks/sim_paper_ablation.py [--rates 3.0,4.0,4.8] [--systems ...]

Writes results/sim/ablation.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import multiprocessing as mp
import sys
import time

from _common import RESULTS, commit, machine
from _paper import KIT, KIT_REF, LLAMA
from _paper_runs import measured

from adaserve.sim import load_acceptance
from adaserve.sim.hardware import HardwareModel
from adaserve.sim.synthetic import SyntheticAcceptance
from adaserve.sim.workload import read_paper_trace
from adaserve.sim.run import run

VARIANTS = {  # name: (what it changes, SimSetup overrides)
    "as on the pages": ("", {}),
    "draft free": ("hardware llama3.1-70b-a100-tp4 (no draft cost)",
                   {"hardware": "llama3.1-70b-a100-tp4"}),
    "B 256": ("budget 256", {"budget": 256}),
    "B 512": ("budget 512", {"budget": 512}),
    "prefill chunk 128": ("128 prompt tokens per iteration", {"prefill_chunk": 128}),
    "batch 256": ("max running requests 256", {"max_batch": 256}),
    "acceptance: prefix reading": ("alignment 0.983, request_spread 0",
                                   {"acceptance": {"alignment": 0.983, "request_spread": 0.0}}),
}


def _acceptance(override):
    base = load_acceptance(LLAMA.acceptance)
    if override is None:
        return base
    return SyntheticAcceptance(dataclasses.replace(base.params, **override), "prefix-reading")


def one(job: tuple[str, str, str]) -> tuple[tuple[str, str, str], dict]:
    variant, rate, system = job
    o = dict(VARIANTS[variant][1])
    hw = HardwareModel.load(o.pop("hardware", LLAMA.hardware))
    acc = _acceptance(o.pop("acceptance", None))
    reqs = read_paper_trace(KIT / "traces" / f"fig8_9_rps{rate}_ol256.csv",
                            hw.baseline_latency_ms)
    res = run(LLAMA.sim_setup(hw, system, acc, **o), reqs, seed=0)
    m = measured(res)
    classes = m["classes"]
    out = {"attainment": classes["overall"]["attainment"],
           "goodput": classes["overall"]["goodput"],
           "per_class": {k: v["attainment"] for k, v in classes.items()
                         if v["attainment"] is not None and k != "overall"},
           "tokens_per_step": m["tokens_per_step"],
           "ms_per_iteration": 1e3 * res.simulated_s / res.iterations}
    print(f"  {variant} {rate} {system}: {out['attainment']:.1f}%", flush=True)
    return job, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="3.0,4.0,4.8")
    p.add_argument("--systems", default="adaserve,vllm-spec-6,vllm")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    t0 = time.perf_counter()
    rates, systems = args.rates.split(","), args.systems.split(",")
    jobs = [(v, r, s) for v in VARIANTS for r in rates for s in systems]
    with mp.get_context("fork").Pool(args.jobs) as pool:
        got = dict(pool.map(one, jobs, chunksize=1))
    head = "| variant | system | " + " | ".join(
        f"RPS {r}: attainment % / goodput / tokens per step / ms per iteration" for r in rates)
    rows = [head + " |", "|---|---|" + "---|" * len(rates)]
    for v in VARIANTS:
        for s in systems:
            cells = []
            for r in rates:
                g = got[(v, r, s)]
                cells.append(f"{g['attainment']:.1f} / {g['goodput']:.0f} / "
                             f"{g['tokens_per_step']:.2f} / {g['ms_per_iteration']:.0f}")
            rows.append(f"| {v} | {s} | " + " | ".join(cells) + " |")
    text = "\n".join([
        "# Fig. 8 simulated, one knob at a time (Llama-3.1-70B)", "",
        f"- command: `python benchmarks/sim_paper_ablation.py {' '.join(sys.argv[1:])}`, "
        f"{time.perf_counter() - t0:.0f} s wall", f"- machine: {machine()}",
        f"- date: {dt.date.today()}, commit {commit()}",
        f"- traces: `{KIT_REF}/traces/fig8_9_rps<rate>_ol256.csv`; acceptance seed 0; every "
        f"other setting as on [fig8.md](fig8.md) (`{LLAMA.hardware}`, `{LLAMA.acceptance}`, "
        f"B 156, prefill chunk 512, batch <= {LLAMA.max_batch}, depth <= {LLAMA.max_depth}, "
        f"width <= {LLAMA.max_width})",
        "- variants: " + "; ".join(f"**{v}**: {d}" for v, (d, _) in VARIANTS.items() if d), "",
        *rows, ""])
    print(text)
    (RESULTS / "sim" / "ablation.md").write_text(text)
    (RESULTS / "sim" / "ablation.json").write_text(json.dumps(
        {"date": str(dt.date.today()), "runs": {" | ".join(k): v for k, v in got.items()}},
        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What each modelling choice of the paper's set-ups moves, one at a time (issue 26).

Every row of docs/sim.md's choice table is a variant here: the deployment as the figure
pages run it, with that one choice switched to its alternative (seed 002's text reading,
the other candidate the evidence weighed, or the model before issue 26), on Fig. 8's
traces at three rates per model, acceptance seed 0. The page gives the attainment,
goodput and tokens per step of each variant beside the deployment's own.

    python -m benchmarks.paper.ablation [--pairs llama,qwen] [--jobs 2]

Writes results/sim/ablation.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.shared.common import RESULTS, commit, machine, map_jobs
from benchmarks.paper.kit import EOS_SEED, KIT, KIT_REF, SETUPS, PaperSetup
from benchmarks.paper.runs import measured

from adaserve.scheduler import AdaServeRules
from adaserve.sim import load_acceptance
from adaserve.sim.hardware import HardwareModel, TableCost
from adaserve.sim.run import run
from adaserve.sim.synthetic import SyntheticAcceptance
from adaserve.sim.workload import read_paper_trace

RATES = {"llama": ("3.0", "4.0", "4.8"), "qwen": ("2.8", "3.6", "4.2")}
AUTHORS = AdaServeRules(absolute_in_slo_phase=False)  # the paper deployments' rules


@dataclass(frozen=True)
class Variant:
    name: str  # the choice table's row
    system: str
    changes: dict[str, Any] = field(default_factory=dict)  # SimSetup overrides
    eos: bool = True  # outputs end at EOS (False: every output runs to 256)
    # special overrides needing the set-up: "free draft", "acceptance 0.83", "vllm s 1"
    special: str = ""


def _rules(**kw) -> AdaServeRules:
    return dataclasses.replace(AUTHORS, **kw)


VARIANTS = (
    Variant("adaserve as deployed", "adaserve-authors"),
    Variant("need: iteration x 1.0 (no 1.05 correction)", "adaserve-authors",
            {"rules": _rules(correction=1.0)}),
    Variant("need: o without the prefill's token", "adaserve-authors",
            {"rules": _rules(count_prefill_token=False)}),
    Variant("SLO phase most behind first (the text)", "adaserve-authors",
            {"rules": _rules(ascending=False)}),
    Variant("n_max 2B/n (not 1.2B/n)", "adaserve-authors", {"rules": _rules(n_max_factor=2.0)}),
    Variant("ms-stated SLOs in the SLO phase", "adaserve-authors",
            {"rules": _rules(absolute_in_slo_phase=True)}),
    Variant("D_min 1 (not the artifact's)", "adaserve-authors", {"min_depth": 1}),
    Variant("width from B (no draft budget B2)", "adaserve-authors", {"draft_budget": None}),
    Variant("B 156 (seed 002's A100 budget)", "adaserve-authors", {"budget": 156}),
    Variant("B 512 (the artifact's spec batch)", "adaserve-authors", {"budget": 512}),
    Variant("B 1024 (the artifact's --max-tokens-per-batch)", "adaserve-authors", {"budget": 1024}),
    Variant("planning: the profile's draft costs, calibrated", "adaserve-authors",
            {"planning_draft_ms": None}),
    Variant("prefill chunk 512", "adaserve-authors", {"prefill_chunk": 512}),
    Variant("prefill first (FlexFlow Jan. 2025)", "adaserve-authors", {"prefill_mode": "first"}),
    Variant("batch cap 96 (before the artifact's last commit)", "adaserve-authors", {"max_batch": 96}),
    Variant("early termination on (slack 6)", "adaserve-authors", {"slo_drop_slack": 6}),
    Variant("outputs run to 256 (no EOS)", "adaserve-authors", eos=False),
    Variant("draft free", "adaserve-authors", special="free draft"),
    Variant("acceptance: miscalibration 0.83 (issue 19)", "adaserve-authors",
            special="acceptance 0.83"),
    Variant("sarathi as deployed", "sarathi"),
    Variant("sarathi: vLLM's forward = the table (s 1)", "sarathi", special="vllm s 1"),
    Variant("sarathi: batch cap 64", "sarathi", {"max_batch": 64}),
    Variant("sarathi: outputs run to 256", "sarathi", eos=False),
    Variant("vllm as deployed", "vllm"),
    Variant("vllm: batch cap 64", "vllm", {"max_batch": 64}),
    Variant("vllm-spec-6 as deployed", "vllm-spec-6"),
    Variant("vllm-spec-6: no eager penalty", "vllm-spec-6", special="no eager"),
    Variant("vllm-spec-6: no batch expansion", "vllm-spec-6", special="no expansion"),
)


def _setup_for(setup: PaperSetup, v: Variant):
    changes = dict(v.changes)
    if v.special == "free draft":
        base = HardwareModel.load(setup.free_draft_hardware)
        changes["hardware"] = base
    elif v.special == "acceptance 0.83":
        # the fit's first probe: gamma 0.83 (the CPU pair's, as issue 19 had it), alignment
        # refitted to the same chains
        first = json.loads((RESULTS / "sim" / f"acceptance-fit-{_page(setup)}.json"
                            ).read_text())["miscalibration_fit"][0]
        fitted = load_acceptance(setup.acceptance)
        changes["acceptance"] = SyntheticAcceptance(dataclasses.replace(
            fitted.params, miscalibration=first["miscalibration"],
            alignment=first["alignment"]), "gamma-0.83")
    elif v.special in ("vllm s 1", "no eager", "no expansion"):
        hw = HardwareModel.load(setup.deploy.hardware_of(v.system))
        if v.special == "vllm s 1":
            own = HardwareModel.load(setup.hardware).target
            hw = dataclasses.replace(hw, target=TableCost(own.tokens, own.ms,
                                                          own.attention_ms_per_1k_context))
        elif v.special == "no eager":
            hw = dataclasses.replace(hw, eager_ms=0.0)
        else:
            hw = dataclasses.replace(hw, expands_batch=False)
        changes["hardware"] = hw
    return setup.sim_setup(v.system, **changes)


def _page(setup: PaperSetup) -> str:
    return {"llama": "llama70b", "qwen": "qwen32b"}[setup.key]


def one(job: tuple[str, int, str]) -> tuple[tuple[str, int, str], dict]:
    key, i, rate = job
    setup, v = SETUPS[key], VARIANTS[i]
    trace = KIT / "traces" / f"fig8_9_rps{rate}_ol256.csv"
    reqs = setup.requests(trace) if v.eos else read_paper_trace(
        trace, HardwareModel.load(setup.hardware).baseline_latency_ms)
    res = run(_setup_for(setup, v), reqs, seed=0)
    m = measured(res)
    out = {"attainment": m["classes"]["overall"]["attainment"],
           "goodput": m["classes"]["overall"]["goodput"],
           "tokens_per_step": m["tokens_per_step"],
           "ms_per_iteration": 1e3 * res.simulated_s / res.iterations}
    print(f"  {key} {v.name} {rate}: {out['attainment']:.1f}%", flush=True)
    return job, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="llama,qwen")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    t0 = time.perf_counter()
    pairs = args.pairs.split(",")
    jobs = [(k, i, r) for k in pairs for i in range(len(VARIANTS)) for r in RATES[k]]
    got = dict(map_jobs(one, jobs, args.jobs))
    lines = [
        "# The paper's set-ups, one modelling choice at a time", "",
        f"- command: `python -m benchmarks.paper.ablation {' '.join(sys.argv[1:])}` "
        f"({time.perf_counter() - t0:.0f} s wall)",
        f"- machine: {machine()}", f"- date: {dt.date.today()}, commit {commit()}",
        f"- traces: `{KIT_REF}/traces/fig8_9_rps<rate>_ol256.csv`, acceptance seed 0, outputs "
        f"ending at EOS (draw {EOS_SEED}) unless the row says otherwise; every other setting "
        "the deployment's (adaserve/sim/data/setups/paper-*.json), as the figure pages run",
        "- each cell: attainment % / goodput tok/s / tokens per step; the difference to the "
        "system as deployed is in docs/sim.md's choice table", ""]
    for key in pairs:
        setup = SETUPS[key]
        rates = RATES[key]
        lines += [f"## {setup.title}", "",
                  "| variant | system | " + " | ".join(f"RPS {r}" for r in rates) + " |",
                  "|---|---|" + "---|" * len(rates)]
        for i, v in enumerate(VARIANTS):
            cells = []
            for r in rates:
                g = got[(key, i, r)]
                cells.append(f"{g['attainment']:.1f} / {g['goodput']:.0f} / "
                             f"{g['tokens_per_step']:.2f}")
            lines.append(f"| {v.name} | {v.system} | " + " | ".join(cells) + " |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    (RESULTS / "sim" / "ablation.md").write_text(text)
    (RESULTS / "sim" / "ablation.json").write_text(json.dumps(
        {"date": str(dt.date.today()), "commit": commit(), "rates": RATES,
         "runs": {f"{k} | {VARIANTS[i].name} | {r}": v for (k, i, r), v in got.items()}},
        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Options of ``adaserve`` on the development set: Fig. 8's traces (the authors'), both set-
ups, seeds 0-2, beside the preset and the authors' scheduler, on the paper's reading and
end to end. Where an option is chosen before the test set (test_set.py) measures it.

    python -m benchmarks.paper.options_dev --specs adaserve:prefill=yield,admit=deadline,...
        [--out results/sim/dev-options.md] [--jobs 2]

Specs are read as the CLI reads them (``split_specs``). Runs are kept and reused as every
page's are (runs.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

import numpy as np

from adaserve.scheduler import split_specs

from benchmarks.shared.common import RESULTS, commit, machine
from benchmarks.paper.figures import FIGURES, curves, tasks_of
from benchmarks.paper.kit import SETUPS
from benchmarks.paper.runs import TTFT_SLO_MS, run_all

BASE = ("adaserve-authors", "adaserve")
SEEDS = (0, 1, 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", required=True, help="comma-separated adaserve specs")
    p.add_argument("--out", default=str(RESULTS / "sim" / "dev-options.md"))
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    systems = BASE + tuple(split_specs(args.specs))
    fig = FIGURES["fig8"]
    lines = ["# Options of `adaserve` on the development set", "",
             f"- command: `python -m benchmarks.paper.options_dev {' '.join(sys.argv[1:])}`",
             f"- machine: {machine()}", f"- date: {dt.date.today()}, commit {commit()}",
             "- set: **development** (the authors' Fig. 8 traces, seeds 0-2; some of the "
             "figure's rates share one trace, so their columns repeat)",
             f"- each cell: the paper's reading / end to end (TTFT within "
             f"{TTFT_SLO_MS / 1000:g} s too), mean over seeds, %", ""]
    for key in ("llama", "qwen"):
        setup = SETUPS[key]
        results = run_all(tasks_of(fig, setup, systems, SEEDS), args.jobs)
        c = curves(fig, setup, systems, SEEDS, results)  # "attainment": the paper's reading
        xs = fig.xs[setup.key]
        lines += [f"## {setup.title}", "", "| system | " + " | ".join(str(x) for x in xs) + " |",
                  "|---|" + "---|" * len(xs)]
        for s in systems:
            cells = [f"{np.mean(c['attainment'][s][float(x)]):.1f} / "
                     f"{np.mean(c['attainment_e2e'][s][float(x)]):.1f}" for x in xs]
            lines.append(f"| `{s}` | " + " | ".join(cells) + " |")
        lines.append("")
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How much the start-up profile's budget B moves from start to start (issue 41).

`adaserve serve` without a saved profile measures B at every start: the largest token count
whose forward costs <= 1.15x a one-token forward (scheduler.latency.budget_by_ratio), from
the round-robin knee curve (engine.profiler._knee_curve). This repeats exactly that
measurement N times in one process (the models loaded once, as each start loads them), at
the start-up's repeats and at three times as many, and tabulates the B each gave and the
ratio of each token count's forward to the one-token one. Writes
results/startup_budget.{md,json}. Run it alone: a co-tenant is what it measures against.
--render rewrites the page from the kept JSON, measuring nothing.

    python -m benchmarks.engine.startup_budget [--curves 10] [--render]
"""

from __future__ import annotations

import argparse
import collections
import sys

import numpy as np

from benchmarks.shared.common import write_results
from benchmarks.shared.page import Made, kept
from benchmarks.shared.page import table as page_table
from adaserve.engine.config import EngineConfig
from adaserve.engine.loader import load_models
from adaserve.engine.profiler import STARTUP_REPEATS, _knee_curve
from adaserve.scheduler.latency import BUDGET_MAX_RATIO, budget_by_ratio


def measure(model, curves: int, repeats: int) -> list[dict]:
    out = []
    for _ in range(curves):
        c = _knee_curve(model, repeats, stop_ratio=2.0)  # what a start runs
        b = budget_by_ratio(c["tokens"], c["seconds"])
        out.append({"tokens": c["tokens"], "seconds": c["seconds"], "budget": b.tokens})
    return out


def table(runs: dict[str, list[dict]]) -> list[str]:
    counts = sorted({k for rs in runs.values() for r in rs for k in r["tokens"]})[1:5]
    rows = []
    for repeats, rs in runs.items():
        seen = collections.Counter(r["budget"] for r in rs)
        cells = []
        for k in counts:
            ratios = [r["seconds"][r["tokens"].index(k)] / r["seconds"][0]
                      for r in rs if k in r["tokens"]]
            cells.append(f"{min(ratios):.2f}-{np.median(ratios):.2f}-{max(ratios):.2f}")
        rows.append([repeats, ", ".join(f"B = {b}: {n}" for b, n in sorted(seen.items())),
                     *cells])
    return page_table(["repeats per count", "B over the curves (count)",
                       *(f"forward of {k} / of 1 (min-median-max)" for k in counts)], rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--curves", type=int, default=10, help="knee curves per repeat count")
    p.add_argument("--render", action="store_true",
                   help="measure nothing: rewrite the page from results/startup_budget.json")
    args = p.parse_args()
    if args.render:
        res = kept("startup_budget")
    else:
        models = load_models(EngineConfig())
        runs = {r: measure(models.target, args.curves, r)
                for r in (STARTUP_REPEATS, 3 * STARTUP_REPEATS)}
        res = {**Made.now("benchmarks.engine.startup_budget").to_dict(),
               "max_ratio": BUDGET_MAX_RATIO, "runs": {str(k): v for k, v in runs.items()}}
    write_results("startup_budget", "\n".join(page(res)), res)
    return 0


def page(res: dict) -> list[str]:
    curves = len(next(iter(res["runs"].values())))
    lines = Made.of(res).header("The start-up profile's budget B, start to start", "; run alone")
    lines += [f"Each row: {curves} knee curves measured as `adaserve serve` measures one at "
              f"a start without a saved profile (round robin over the token counts, the median "
              f"of the repeats, stopping past 2x the one-token forward), and the B that the "
              f"budget rule (<= {res['max_ratio']}x) reads from each.", ""]
    lines += table(res["runs"])
    lines += ["", "Where the forward's ratio to a one-token forward sits near the rule's "
              "1.15 at two neighbouring counts, noise of a few percent moves B between them "
              "from start to start; more repeats narrow the noise of each median, not the "
              "machine's drift between the counts. A saved profile (`adaserve profile`) or "
              "`--budget` fixes B (docs/server.md).", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main())

"""Fit the synthetic acceptance model to the measured CPU pair (results/draft.md).

1. miscalibration: P(a node is accepted | its path probability f) ~ f ** gamma, fitted by
   count-weighted least squares to the reliability table of results/draft.md ("Calibration
   of draft path probabilities").
2. alignment: with that gamma, the alignment whose simulated tokens per iteration match
   results/draft.md's "In the engine, batch 1" figure: `adaserve` with B = 16, greedy, 24
   prompts one at a time, up to 64 new tokens each, 2.83 tokens per iteration. The same
   set-up runs in the simulator (CPU hardware model, the file's spreads kept) over a grid
   of alignments, and the target is interpolated.
Writes nothing: the numbers go into adaserve/sim/data/acceptance/*.json by hand, with this
command as their source.

    python -m benchmarks.sim.fit_synthetic [--target 2.83]
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import numpy as np
import torch

from benchmarks.shared.common import RESULTS

from adaserve.sim import (HardwareModel, SimRequest, SimSetup, SyntheticAcceptance, build,
                          load_acceptance, simulate)


def reliability_table() -> np.ndarray:
    """[bins, 3] nodes, mean f, accepted share: results/draft.md's calibration rows."""
    text = (RESULTS / "draft.md").read_text()
    start = text.index("### Calibration of draft path probabilities")
    section = text[start:text.index("Per request and iteration", start)]  # the node table
    rows = re.findall(r"^\| \[[\d.]+, [\d.]+\) \| (\d+) \| ([\d.]+) \| ([\d.]+) \|$", section,
                      flags=re.M)
    return np.array(rows, dtype=float)


def fit_gamma(table: np.ndarray) -> float:
    """Count-weighted least squares of accepted share against f ** gamma (grid, 0.001)."""
    count, f, acc = table.T
    grid = np.arange(0.3, 1.5, 0.001)
    sse = [(count * (f ** g - acc) ** 2).sum() for g in grid]
    return float(grid[int(np.argmin(sse))])


def tokens_per_iteration(params, hw: HardwareModel, prompt_tokens: int, new: int,
                         n: int) -> float:
    model = SyntheticAcceptance(params)
    setup = SimSetup(hw, model, policy="adaserve", budget=16, max_batch=1)
    core, clock = build(setup, max_context=prompt_tokens + new + 1, max_waiting=n)
    # one at a time: each arrives long after the previous one is done
    reqs = [SimRequest(i, 1000.0 * i, "relaxed", None, prompt_tokens, new) for i in range(n)]
    simulate(core, clock, reqs)
    decode = [s for s in core.stats if s.running]
    return sum(s.emitted_tokens for s in decode) / len(decode)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", type=float, default=2.83)
    p.add_argument("--acceptance", default="synthetic-cpu-pair")
    p.add_argument("--prompt-tokens", type=int, default=40)
    args = p.parse_args()
    torch.set_num_threads(1)
    hw = HardwareModel.load("cpu-smollm2-135m")
    base = load_acceptance(args.acceptance)
    table = reliability_table()
    gamma = fit_gamma(table)
    print(f"miscalibration: gamma = {gamma:.3f} from {len(table)} bins, "
          f"{int(table[:, 0].sum())} nodes\n")
    grid = np.round(np.arange(0.30, 0.951, 0.05), 2)
    got = [tokens_per_iteration(dataclasses.replace(base.params, alignment=a,
                                                    miscalibration=round(gamma, 2)),
                                hw, args.prompt_tokens, 64, 24) for a in grid]
    print("| alignment | tokens per iteration |\n|---|---|")
    for a, t in zip(grid, got):
        print(f"| {a:.2f} | {t:.2f} |")
    if not got[0] <= args.target <= got[-1]:
        print(f"target {args.target} is outside the grid's range")
        return 1
    print(f"\nalignment for {args.target} tokens per iteration: "
          f"{np.interp(args.target, got, grid):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

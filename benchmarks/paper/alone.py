"""Each test trace's requests served one at a time (issue 38): how much of the test set a
policy can attain at all, beside what it attains in the trace, so a goal of "+5 points
over the authors' scheduler" can be read against the most there is to gain.

A trace's alone twin keeps every request (its prompt, cap, SLO class and index, so the
same output length and the same drafts and target: both are keyed on the run's seed and
the request's index, adaserve/sim/driver.py and workload.stop_at_eos) and spaces the
arrivals ``SPACING_S`` apart, far past the longest request, so each runs by itself with
the whole budget. What a request misses alone it misses for the policy, not for the load;
a scheduler in the trace can only lose more (a different tree could in principle serve a
request better than the policy's own, so this bounds the policy, not every policy).

    python -m benchmarks.paper.alone [--pairs llama,qwen] [--kinds poisson] [--seeds 0,1,2]
        [--jobs 2]

Writes results/sim/test-set-alone.md (and .json); runs are kept with the others
(benchmarks/paper/runs.py) under results/sim/runs/.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from benchmarks.shared.page import Made, kept, render_flags, table, write_page
from benchmarks.paper.kit import SETUPS
from benchmarks.paper.runs import Task, run_all
from benchmarks.paper.test_set import AUTHORS, BETTER_BY, OURS, OUT, READINGS
from benchmarks.paper.test_set_traces import GOAL_RATES, make_trace

ALONE = OUT / "test-set" / "alone"  # the alone twins of results/sim/test-set/traces/
SPACING_S = 1000.0  # between arrivals: a 256-token output at 1 s a token still ends first
NAME = "test-set-alone"
SYSTEMS = (AUTHORS, OURS)


def alone_trace(trace: Path) -> Path:
    """The trace with its arrivals SPACING_S apart, in order: results/sim/test-set/alone/."""
    out = ALONE / trace.name
    with trace.open() as f:
        rows = list(csv.DictReader(f))
    lines = ["emission_time_ms,input_length,output_length,slo_ratio"]
    lines += [f"{1000 * SPACING_S * i:.3f},{r['input_length']},{r['output_length']},"
              f"{r['slo_ratio']}" for i, r in enumerate(rows)]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file() or out.read_text() != text:
        out.write_text(text)
    return out


def measure(args: argparse.Namespace) -> dict:
    """Both policies in each trace and alone: overall and per-class attainment under each
    reading (the paper's, TPOT, end to end), mean over seeds, by pair, kind and rate."""
    keyed = {}
    for pair in args.pairs:
        setup = SETUPS[pair]
        for kind in args.kinds:
            for rate in GOAL_RATES[pair]:
                for seed in args.seeds:
                    trace = make_trace(setup, kind, rate, seed)
                    for where, path in (("trace", trace), ("alone", alone_trace(trace))):
                        for s in SYSTEMS:
                            keyed[pair, kind, rate, seed, where, s] = Task(setup, path, s, seed)
    got = run_all(list(keyed.values()), args.jobs)
    runs: dict[str, list[dict]] = {}
    for (pair, kind, rate, seed, where, s), t in keyed.items():
        runs.setdefault(f"{pair}/{kind}/{rate:g}/{where}/{s}", []).append(got[t]["classes"])
    return {"pairs": args.pairs, "kinds": args.kinds, "seeds": args.seeds,
            "cells": {label: {k: {c: float(np.mean([r[c][key] for r in v])) for c in v[0]}
                              for k, v in runs.items()}
                      for key, label in READINGS}}


def page(data: dict) -> list[str]:
    made = Made.of(data)
    lines = [*made.header("The test set served one request at a time: the most a policy "
                          "attains", "; simulated, so not timed"),
             f"- set: **test** (benchmarks/paper/test_set_traces.py), kinds "
             f"{', '.join(data['kinds'])}, Fig. 8's three highest rates, seeds "
             f"{', '.join(map(str, data['seeds']))}; each trace beside its alone twin, every "
             f"request kept with arrivals {SPACING_S:g} s apart (this module's docstring)",
             "- readings: the paper's (docs/sim-validation.md), TPOT within its SLO, and end "
             "to end (TTFT within 5 s too); each the mean over seeds, in %",
             f"- the ceiling: the better of the two policies alone; the most `{OURS}` could "
             f"gain over `{AUTHORS}` in the trace is the ceiling less the authors' "
             f"attainment there, against the goal of +{BETTER_BY:g}", ""]
    for pair in data["pairs"]:
        for kind in data["kinds"]:
            lines += [f"## {SETUPS[pair].title}: {kind}", ""]
            for label, c in data["cells"].items():
                lines += _reading(label, c, pair, kind)
    return lines


def _reading(label: str, c: dict, pair: str, kind: str) -> list[str]:
    """One reading's tables: overall with the ceiling, then per class."""
    rows, classes = [], None
    for rate in GOAL_RATES[pair]:
        def at(where: str, s: str, cls: str = "overall") -> float:
            return c[f"{pair}/{kind}/{rate:g}/{where}/{s}"][cls]
        a, o = at("trace", AUTHORS), at("trace", OURS)
        room = max(at("alone", AUTHORS), at("alone", OURS)) - a
        rows.append([f"{rate:g}", f"{a:.1f}", f"{o:.1f} ({o - a:+.1f})",
                     f"{at('alone', AUTHORS):.1f}", f"{at('alone', OURS):.1f}",
                     f"{room:+.1f}", "yes" if room >= BETTER_BY else "no"])
        classes = [k for k in c[f"{pair}/{kind}/{rate:g}/alone/{OURS}"] if k != "overall"]
    return [f"Attainment, {label} reading:", "",
            *table(["rate", f"{AUTHORS} in the trace", f"{OURS} in the trace",
                    f"{AUTHORS} alone", f"{OURS} alone", "ceiling less the authors'",
                    f"+{BETTER_BY:g} reachable"], rows),
            "", f"Per class, {label} reading, alone (authors / ours) and in the trace (ours):",
            "", *table(["rate", *classes],
                       [[f"{r:g}", *(f"{c[f'{pair}/{kind}/{r:g}/alone/{AUTHORS}'][k]:.1f}"
                                     f" / {c[f'{pair}/{kind}/{r:g}/alone/{OURS}'][k]:.1f}"
                                     f" ({c[f'{pair}/{kind}/{r:g}/trace/{OURS}'][k]:.1f})"
                                     for k in classes)] for r in GOAL_RATES[pair]]), ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="llama,qwen")
    p.add_argument("--kinds", default="poisson")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--jobs", type=int, default=2)
    render_flags(p, NAME, OUT)
    args = p.parse_args(argv)
    args.pairs, args.kinds = args.pairs.split(","), args.kinds.split(",")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    if args.render:
        write_page(NAME, page(kept(NAME, args.out)), args.out)
    else:
        data = {**Made.now("benchmarks.paper.alone").to_dict(), **measure(args)}
        write_page(NAME, page(data), args.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

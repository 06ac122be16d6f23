"""Where a speculative iteration's time goes on the embedded engine: draft forwards, the
rest of drafting (beam steps, tree building), selection, verification, committing, against
`incremental`'s plain step, in one run.

`adaserve` with the distilled draft at batch 1 and the given budgets, the benchmark's chat
prompts one at a time, 64 new tokens each; the phases are timed by wrapping the executor's
and the policy's methods (the wrappers add two clock reads a call). Writes
results/spec_phases.{md,json}; --render rewrites the page from the kept JSON, measuring
nothing.

    python -m benchmarks.engine.spec_phases [--budgets 4 6 8] [--render]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
import time

from benchmarks.shared.page import Made, kept, render_flags, write_page
from benchmarks.engine.engine import PROMPTS, chat_ids, run_engine

from adaserve.engine import EngineConfig
from adaserve.engine.core import EngineCore
from adaserve.engine.engine import load_profile
from adaserve.engine.loader import load_models

NAME = "spec_phases"

@contextlib.contextmanager
def timed(targets: list[tuple[object, str, str, str | None]], acc: dict, active: set):
    """Wraps each (object, method, key, within) to add its seconds and calls to acc, counted
    only while ``within`` is in ``active`` when one is named (the draft model's forwards
    inside drafting, not its prefill); a wrapped target is in ``active`` while it runs.
    Restores the methods on exit (the draft model is shared between runs)."""
    saved = []
    for obj, name, key, within in targets:
        f = getattr(obj, name)

        def g(*a, f=f, key=key, within=within, **k):
            if within is not None and within not in active:
                return f(*a, **k)
            active.add(key)
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                active.discard(key)
                acc[key] += time.perf_counter() - t
                acc[key + " calls"] += 1

        saved.append((obj, name, obj.__dict__.get(name)))
        setattr(obj, name, g)
    try:
        yield
    finally:
        for obj, name, before in saved:
            if before is None:
                delattr(obj, name)
            else:
                setattr(obj, name, before)


def run(core: EngineCore, new: int) -> tuple[dict, list]:
    acc: dict = collections.defaultdict(float)
    # phases are counted in decode iterations only, as the iteration times are: "decode" is
    # active from an iteration that prefilled nothing to the next iteration's prefill
    active: set = set()
    prefill = core._prefill

    def gate() -> int:
        n = prefill()
        (active.discard if n else active.add)("decode")
        return n

    core._prefill = gate
    targets = [(core.executor, n, n, "decode") for n in ("draft", "verify", "commit_draft")]
    targets += [(core.policy, n, n, "decode") for n in ("plan", "select")]
    if core.models.draft is not None:
        targets.append((core.models.draft, "forward", "draft forward", "draft"))
    tok = core.models.tokenizer
    stats = []
    with timed(targets, acc, active):
        for i in range(len(PROMPTS)):
            stats += [s for s in run_engine(core, [chat_ids(tok, i)], new)[1]
                      if s.prefill_tokens == 0]
    return acc, stats


def measure(budgets: list[int], new: int) -> dict:
    made = Made.now("benchmarks.engine.spec_phases").to_dict()
    rows = []
    models = load_models(EngineConfig(policy="adaserve"))  # incremental leaves the draft idle
    for b in [None] + budgets:
        cfg = EngineConfig(policy="incremental" if b is None else "adaserve", budget=b,
                           max_batch=1)
        core = EngineCore(cfg, models, load_profile(cfg))
        run(core, 4)  # warm-up
        core = EngineCore(cfg, models, load_profile(cfg))
        acc, st = run(core, new)
        n = len(st)
        per = {k: acc[k] / n * 1e3 for k in ("draft", "draft forward", "select", "verify",
                                              "commit_draft", "plan")}
        rows.append({"policy": "incremental" if b is None else f"adaserve B={b}",
                     "iteration_ms": statistics.fmean(s.seconds for s in st) * 1e3,
                     "tokens_per_step": sum(s.emitted_tokens for s in st) / n,
                     "mean_depth": statistics.fmean(s.depth for s in st),
                     "draft_forwards_per_iter": acc["draft forward calls"] / n, **per})
    for r in rows:
        r["ms_per_token"] = r["iteration_ms"] / r["tokens_per_step"]
        r["speedup"] = rows[0]["ms_per_token"] / r["ms_per_token"]
    return {**made, "prompts": len(PROMPTS), "new_tokens": new, "rows": rows}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = ["# A speculative iteration's time, by phase (batch 1)", "",
             f"- command: `{res['command']}`"
             + (f" (run from {res['ran_from']})" if "ran_from" in res else ""),
             f"- machine: {res['machine']}",
             f"- date: {res['date']}, commit {res['commit']}; the engine benchmark's "
             f"{res['prompts']} chat prompts one at a time, {res['new_tokens']} new tokens, "
             "greedy, decode iterations only; ms per iteration (means)", "",
             "| policy | iteration | tokens/step | ms/token | speedup | draft (all) | of it: "
             "draft forwards | forwards/iter | depth | select | verify | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['policy']} | {r['iteration_ms']:.1f} | {r['tokens_per_step']:.2f} | "
                     f"{r['ms_per_token']:.1f} | {r['speedup']:.2f}x | {r['draft']:.1f} | "
                     f"{r['draft forward']:.1f} | {r['draft_forwards_per_iter']:.2f} | "
                     f"{r['mean_depth']:.2f} | {r['select']:.2f} | {r['verify']:.1f} | "
                     f"{r['commit_draft']:.2f} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", type=int, nargs="+", default=[4, 6, 8])
    ap.add_argument("--new-tokens", type=int, default=64)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args.budgets, args.new_tokens)
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

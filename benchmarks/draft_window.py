"""How big the bounded draft KV should be: acceptance (tokens per request-step) and the
draft step's cost against the window W (sinks S fixed), for the distilled draft and the
self-draft, at one long context, beside the whole-KV distilled draft. The grid
(`adaserve bench --experiment context-grid`) then runs the chosen W.

    python benchmarks/draft_window.py [--context 4096] [--batch 4] [--windows 64,256,1024]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys

from _common import commit, machine, write_results

from adaserve.engine import EngineConfig
from adaserve.engine.draft_window import DraftWindow
from adaserve.engine.loader import load_models
from adaserve.engine.weights import DEFAULT_DRAFT
from adaserve.loadgen.context_grid import (DISTINCT_PROMPTS, GridSettings, make_donor,
                                           run_cell, window_donor)
from adaserve.loadgen.long_prompts import long_prompts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--windows", default="64,256,1024")
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--chain", default="chain-4")
    args = ap.parse_args()
    models = load_models(EngineConfig(policy=args.chain, draft=DEFAULT_DRAFT))
    prompts = long_prompts(models.tokenizer, args.context - args.new_tokens, DISTINCT_PROMPTS)
    batch = [prompts[i % len(prompts)] for i in range(args.batch)]
    rows = []
    windows = [int(w) for w in args.windows.split(",")]
    first = {tuple(p[:-1]): make_donor(models, p, DraftWindow(args.sinks, windows[0]))
             for p in prompts}
    for w in windows:
        donors = {k: dataclasses.replace(d, ring=window_donor(models, list(k),
                                                              DraftWindow(args.sinks, w)))
                  for k, d in first.items()}
        s = GridSettings(args.chain, args.new_tokens, w, args.sinks)
        forms = ["incremental", "distilled-window", "self-window"]
        if w == windows[0]:
            forms.append("distilled-full")
        res = run_cell(models, forms, batch, args.context, donors, s)
        ref = res["incremental"]["tokens"]
        for f in forms[1:]:
            label = "whole KV" if f == "distilled-full" else str(w)
            rows.append((f, label, res[f]["accepted_per_step"], res[f]["draft_step_ms"],
                         res[f]["tokens"] == ref))
    cmd = "python " + " ".join(sys.argv)
    lines = ["# The bounded draft KV's window: acceptance against W", "",
             f"- command: `{cmd}`", f"- machine: {machine()}",
             f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}",
             "- run on the shared machine (`/work/cpu-shared`): the tokens per request-step are "
             "exact, the draft step times are indicative only", "",
             f"Batch {args.batch}, context {args.context} (prompts: installed packages' "
             f"descriptions, `adaserve.loadgen.long_prompts`), {args.new_tokens} new tokens, "
             f"greedy, `{args.chain}`, {args.sinks} sinks. Tokens per request-step: output "
             "tokens / (requests x iterations), 1.0 = nothing accepted.", "",
             "| draft | W | tokens per request-step | draft step ms | same as incremental |",
             "|---|---|---|---|---|"]
    for f, w, acc, ms, same in rows:
        lines.append(f"| {f} | {w} | {acc:.2f} | {ms:.1f} | {'yes' if same else 'NO'} |")
    write_results("draft_window", "\n".join(lines) + "\n",
                  {"command": cmd, "rows": [dict(zip(("form", "window", "tokens_per_step",
                                                      "draft_step_ms", "same"), r))
                                            for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())

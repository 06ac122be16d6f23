"""The context-grid experiment's command line and results page (context_grid.py runs it)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from pathlib import Path

from adaserve.loadgen.run import commit, machine

SPEC_FORMS = ("distilled-full", "distilled-window", "self-window")


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--experiment context-grid")
    g.add_argument("--batches", default="1,4,8,16", help="batch sizes")
    g.add_argument("--contexts", default="512,2048,4096,8192",
                   help="tokens per request at the end of decoding (prompt + --new-tokens)")
    g.add_argument("--forms", default="incremental," + ",".join(SPEC_FORMS),
                   help="incremental first, then draft forms: distilled-full (the distilled "
                        "draft, whole-context KV), distilled-window (its KV bounded), "
                        "self-window (the target drafting with a bounded KV)")
    g.add_argument("--new-tokens", type=int, default=32, help="output tokens per request")
    g.add_argument("--chain", default="chain-4",
                   help="the speculative forms' policy (default chain-4: 4 draft tokens per "
                        "request every iteration, MagicDec's fixed gamma)")
    g.add_argument("--draft-window", type=int, default=256, help="W of the bounded forms")
    g.add_argument("--draft-sinks", type=int, default=4, help="S of the bounded forms")


def main(args: argparse.Namespace) -> int:
    from adaserve.loadgen.context_grid import (DISTINCT_PROMPTS, FORMS, GridSettings, merge,
                                               run_grid)

    out = args.out or Path("results") / "context-grid"
    if args.rewrite_page:
        write_page(out, json.loads((out / "summary.json").read_text()))
        return 0
    forms = args.forms.split(",")
    if forms[0] != "incremental" or any(f not in FORMS for f in forms):
        print(f"adaserve bench: error: --forms must start with incremental and name "
              f"{', '.join(FORMS)}", file=sys.stderr)
        return 2
    s = GridSettings(args.chain, args.new_tokens, args.draft_window, args.draft_sinks)
    t0 = dt.datetime.now(dt.timezone.utc)
    meta = {"command": "adaserve bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
            "machine": machine(), "date": t0.isoformat(timespec="seconds"),
            "commit": commit(), "torch_threads": _threads(), "repeats": args.repeats,
            "settings": {"policy": s.policy, "new_tokens": s.new, "draft_window": s.window,
                         "draft_sinks": s.sinks, "seed": args.seed,
                         "distinct_prompts": DISTINCT_PROMPTS}}

    def save(cells: list[dict]) -> None:
        minutes = (dt.datetime.now(dt.timezone.utc) - t0).total_seconds() / 60
        write_page(out, merge(out / "summary.json", {**meta, "minutes": minutes}, cells))

    run_grid([int(b) for b in args.batches.split(",")], [int(c) for c in args.contexts.split(",")],
             forms, args.repeats, args.seed, s, on_cell=save)
    return 0


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _speedup(cell: dict, form: str, key: str = "tok_s") -> float | None:
    """The form's rate over incremental's: over every decode iteration (tok_s), or over
    those where the whole batch decoded (tok_s_full, MagicDec's fixed batch; None in cells
    measured before it was kept)."""
    f = cell["forms"]
    if form not in f or f[form].get(key) is None or f["incremental"].get(key) is None:
        return None
    return f[form][key] / f["incremental"][key]


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def goals(cells: list[dict]) -> list[str]:
    """The issue's goals, read off the kept cells (only where they were measured)."""
    at = {(c["batch"], c["context"]): c for c in cells}
    lines = []
    long = [c for (b, c) in at if b == 8 and c >= 4096]
    for form, what in (("distilled-window", "bounded-KV distilled draft"),
                       ("self-window", "bounded-KV self-draft")):
        for c in sorted(long):
            s, full = _speedup(at[(8, c)], form), _speedup(at[(8, c)], form, "tok_s_full")
            met = [name for name, x in (("whole run", s), ("full batch", full))
                   if x is not None and x >= 1.5]
            both = (f"{_fmt(s)}x over the whole run, {_fmt(full)}x while the whole batch "
                    "decodes" if full is not None else f"{_fmt(s)}x")
            lines.append(f"- {what} >= 1.5x at batch 8, context {c}: {both}: "
                         + (f"met ({', '.join(met)})" if met else "NOT met"))
    def trend(label: str, against: str, cells: list[tuple[int, int]], form: str) -> None:
        speedups = [x for x in (_speedup(at[k], form) for k in sorted(cells)) if x is not None]
        if len(speedups) > 1:
            rising = all(y >= x for x, y in zip(speedups, speedups[1:]))
            lines.append(f"- {form}, {label}: speedup against {against} "
                         f"{' -> '.join(_fmt(x) for x in speedups)}: "
                         f"{'rises' if rising else 'does not rise throughout'}")

    for form in SPEC_FORMS:
        for b in sorted({b for b, _ in at}):
            trend(f"batch {b}", "context", [k for k in at if k[0] == b], form)
        for c in sorted({c for _, c in at if c >= 4096}):
            trend(f"context {c}", "batch", [k for k in at if k[1] == c], form)
    # the draft step at 8k against 2k (the longest context measured, until 8k is)
    longest = max((c for b, c in at if b == 8), default=0)
    for form in SPEC_FORMS:
        a, b = at.get((8, 2048)), at.get((8, longest))
        if longest > 2048 and a and form in a["forms"] and a["forms"][form]["draft_step_ms"]:
            r = b["forms"][form]["draft_step_ms"] / a["forms"][form]["draft_step_ms"]
            lines.append(f"- {form}: draft step at batch 8, context {longest} / 2048 = {r:.2f} "
                         f"({'flat within 20%' if r <= 1.2 else 'NOT flat within 20%'})")
    return lines


def _repeats(runs: list[dict]) -> str:
    """How many repeats each cell's median is of: one count, or (pieces run with different
    counts) each piece's, in the pieces' order."""
    counts = [r["repeats"] for r in runs]
    if len(set(counts)) == 1:
        return str(counts[0])
    return "/".join(map(str, counts)) + " (the pieces listed at the end, in order)"


def write_page(out: Path, kept: dict) -> None:
    cells, runs = kept["cells"], kept["runs"]
    forms = list(cells[0]["forms"]) if cells else []
    spec = [f for f in forms if f != "incremental"]
    s = runs[-1]["settings"]
    lines = ["# Speculation on a batch x context grid (MagicDec's setting, seed 001)", "",
             f"- command: `{runs[0]['command']}` (the grid runs in pieces; every piece's "
             "command is listed at the end)",
             f"- machine: {runs[-1]['machine']}, torch threads {runs[-1]['torch_threads']}",
             f"- dates (UTC): {runs[0]['date']} .. {runs[-1]['date']}; code version: commit "
             f"{runs[-1]['commit']} (each piece's below)",
             # how the pieces were run is the operator's to say, kept beside the cells
             *(f"- note: {n}" for n in kept.get("notes", [])), "",
             f"Each cell decodes b requests to {s['new_tokens']} new tokens (greedy, EOS "
             f"ignored) from prompts of context - {s['new_tokens']} tokens: the long "
             "descriptions of the installed Python packages (`adaserve.loadgen.long_prompts`, "
             f"seed {s['seed']}), {s.get('distinct_prompts', 4)} distinct prompts cycled over the batch. Rates are output "
             "tokens / seconds over the iterations that decoded only (the prompts' K/V is "
             "computed once and copied in: `loadgen/context_grid.py`), median of "
             f"{_repeats(runs)} round-robin repeats. Speculative forms run "
             f"`{s['policy']}`; bounded forms keep {s['draft_sinks']} sink + "
             f"{s['draft_window']} recent tokens of draft KV per request. \"same\": every "
             "form emitted incremental's tokens in every repeat.", "",
             "## Tokens/s (speedup against incremental)", "",
             "| batch | context | incremental | " + " | ".join(spec) + " | same |",
             "|---|---|---|" + "---|" * len(spec) + "---|"]
    for c in cells:
        f = c["forms"]
        row = [f"{f[x]['tok_s']:.1f} ({_speedup(c, x):.2f}x)" if x in f else "-" for x in spec]
        same = all(v["identical"] for v in f.values())
        lines.append(f"| {c['batch']} | {c['context']} | {f['incremental']['tok_s']:.1f} | "
                     + " | ".join(row) + f" | {'yes' if same else 'NO'} |")
    if any(f.get("tok_s_full") is not None for c in cells for f in c["forms"].values()):
        lines += ["", "## Tokens/s while the whole batch decodes (MagicDec's fixed batch)", "",
                  "The same runs, over only the iterations in which all b requests decoded: "
                  "a speculative form's requests accept at different rates and finish apart, "
                  "so its last iterations run a smaller batch, where incremental's requests "
                  "all finish together. MagicDec reports throughput at a fixed batch size. "
                  "`full / decode`: iterations with the whole batch, of the decode "
                  "iterations, per repeat.", "",
                  "| batch | context | incremental | " + " | ".join(spec) + " |",
                  "|---|---|---|" + "---|" * len(spec)]
        for c in cells:
            f = c["forms"]
            if f["incremental"].get("tok_s_full") is None:
                continue
            row = [f"{f[x]['tok_s_full']:.1f} ({_speedup(c, x, 'tok_s_full'):.2f}x; "
                   f"{'/'.join(map(str, f[x]['full_iterations']))} of "
                   f"{'/'.join(map(str, f[x]['decode_iterations']))})"
                   if x in f and f[x].get("tok_s_full") is not None else "-" for x in spec]
            lines.append(f"| {c['batch']} | {c['context']} | {f['incremental']['tok_s_full']:.1f} | "
                         + " | ".join(row) + " |")
    lines += ["", "## Draft step (ms), verify (ms), tokens per request-step", "",
              "A draft step: one draft forward (step 1 includes the catch-up tokens), median "
              "over the iterations. Verify: the target's forward over all requests' roots "
              "and chains (incremental: its decode step).", "",
              "| batch | context | incremental verify | " + " | ".join(
                  f"{x} draft / verify / tokens" for x in spec) + " |",
              "|---|---|---|" + "---|" * len(spec)]
    for c in cells:
        f = c["forms"]
        row = [f"{_fmt(f[x]['draft_step_ms'], '.1f')} / {f[x]['verify_ms']:.0f} / "
               f"{f[x]['accepted_per_step']:.2f}" if x in f else "-" for x in spec]
        lines.append(f"| {c['batch']} | {c['context']} | {f['incremental']['verify_ms']:.0f} | "
                     + " | ".join(row) + " |")
    lines += ["", "## The goals (issue 40)", "", *goals(cells), "", "## Pieces", ""]
    for r in runs:
        lines.append(f"- `{r['command']}`: {r['date']}, commit {r['commit']}, "
                     f"{r['minutes']:.1f} min to its last cell")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

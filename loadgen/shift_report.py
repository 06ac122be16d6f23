"""The domain-shift experiment's page (loadgen/domain_shift.py): results/domain-shift/."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

WINDOW = 100  # requests per row of the table


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan


def windows(rows: list[dict], size: int = WINDOW) -> list[dict]:
    out = []
    for a in range(0, len(rows), size):
        w = rows[a: a + size]
        on, off = _mean([r["served"] for r in w]), _mean([r["off"] for r in w])
        code = [r for r in w if r["kind"] == "code"]
        out.append({"from": a, "to": a + len(w), "code_share": len(code) / len(w),
                    "on": on, "off": off, "gain": on / off - 1 if off else math.nan,
                    "code_on": _mean([r["served"] for r in code]),
                    "code_off": _mean([r["off"] for r in code])})
    return out


def write_page(out: Path, s: dict) -> None:
    rows = sorted(s["rows"], key=lambda r: r["i"])
    ws = windows(rows)
    checked = [r for r in rows if r.get("served_replay") is not None]
    replay_err = _mean([abs(r["served"] - r["served_replay"]) for r in checked])
    last = ws[-1] if ws else {}
    own = s["own"]
    own_ratio = own["on"] / own["off"] if own["off"] else math.nan
    swaps = sum(r["swapped"] for r in s["reports"])
    moved = sum(r.get("head_rows", 0) for r in s["reports"])  # pages of older runs lack it
    run0 = s["runs"][0]
    minutes = sum(r["minutes"] for r in s["runs"])
    lines = [
        "# Online draft adaptation on the domain-shift stream",
        "",
        f"- command: `{s['command']}`",
        f"- code version: commit {run0['commit']} (pieces: "
        + ", ".join(f"{r['from']}-{r['to']} at {r['commit']} on {r['date']}" for r in s["runs"])
        + ")",
        f"- machine: {run0['machine']}; {minutes:.0f} min in {len(s['runs'])} pieces; "
        + s.get("how_run", "accepted tokens per step are counts, not times, so other load on "
                "the machine does not move them; the training time per update is a time"),
        f"- settings: {json.dumps(s['settings'])}; policy chain-4, greedy",
        "",
        "Accepted tokens per step (tokens emitted per verification, the root's included) of "
        "every served request: **on** as served with online adaptation, **off** the "
        "original draft replayed on the same output (greedy output does not depend on the "
        "draft; docs/draft.md says how). Windows of "
        f"{WINDOW} requests in stream order.",
        "",
        "| requests | code share | on | off | on/off - 1 | code: on | code: off |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in ws:
        lines.append(f"| {w['from']}-{w['to']} | {w['code_share']:.2f} | {w['on']:.3f} | "
                     f"{w['off']:.3f} | {100 * w['gain']:+.1f}% | {w['code_on']:.3f} | "
                     f"{w['code_off']:.3f} |")
    lines += [
        "",
        f"Updates: {len(s['reports'])}, {swaps} swapped in, {len(s['reports']) - swaps} "
        "rolled back; held-back agreement before -> after each: "
        + ", ".join(f"{r['agreement_before']:.3f}->{r['agreement_after']:.3f}"
                    for r in s["reports"]) + ".",
        *([f"Head rows moved to tokens served outside the head (at most "
           f"{s['settings']['head_rows']} per update): {moved} in the updates swapped in."]
          if s["settings"].get("head_rows") else []),
        f"Training time per update (inline, {_threads(s['runs'])}): mean "
        f"{_mean([r['train_seconds'] for r in s['reports']]):.1f} s.",
        f"Replay check: on {len(checked)} requests served by one draft, the replayed "
        f"tokens/step differ from the served ones by {replay_err:.4f} on average.",
        "",
        "## Goals (issue 40)",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        f"| on the shifted stream, on/off >= 1.20 within {len(rows)} requests (last window) "
        f"| {1 + last.get('gain', math.nan):.3f} | "
        f"{'yes' if last.get('gain', -1) >= 0.2 else 'no'} |",
        f"| own domain: adapted / original >= 0.95 ({own['n']} own-domain requests replayed) "
        f"| {own_ratio:.3f} ({own['on']:.3f} / {own['off']:.3f}) | "
        f"{'yes' if own_ratio >= 0.95 else 'no'} |",
        f"| outputs unchanged across swaps ({s['parity']['checked']} served by adapted "
        f"drafts, generated again incrementally) | {s['parity']['identical']} identical | "
        f"{'yes' if s['parity']['identical'] == s['parity']['checked'] else 'no'} |",
        "",
    ]
    (out / "summary.md").write_text("\n".join(lines))
    (out / "summary.json").write_text(json.dumps(s, indent=1))


def _threads(runs: list[dict]) -> str:
    """The torch threads the pieces trained with. Pieces recorded before the field ran
    with the machine's 2; pieces side by side with others ran with fewer."""
    n = sorted({r.get("threads", 2) for r in runs})
    return f"{'/'.join(map(str, n))} thread{'s' if n != [1] else ''}"

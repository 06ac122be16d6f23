"""Where a batch-32 decode forward of the default target spends its time, and what each
layout decision in engine/model.py buys. Real SmolLM2-135M weights, fp32, the dev CPU.

- layer matmuls of all 30 layers, both orientations (x @ W.T as F.linear vs (W @ x.T).T);
- the LM head: whole (W @ h.T), transposed to row-major, and in 2,048-token chunks;
- argmax over the vocabulary on row-major vs column-major logits;
- attention (SDPA) with a row-major vs a column-major query (flash vs math kernel).
Interleaved rounds, medians. Prints a table, writes results/forward_parts.{md,json};
--render rewrites the page from the kept JSON, measuring nothing.

    python -m benchmarks.engine.forward_parts [--rows 32] [--context 100] [--render]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from benchmarks.shared.common import Timer
from benchmarks.shared.page import Made, kept, render_flags, write_page

from adaserve.engine import EngineConfig
from adaserve.engine.loader import load_models
from adaserve.engine.model import _head_rows

NAME = "forward_parts"


def measure(args: argparse.Namespace) -> dict:
    made = Made.now("benchmarks.engine.forward_parts").to_dict()
    model = load_models(EngineConfig()).target
    r, t, cfg = args.rows, args.context, model.cfg
    x = {w.shape[1]: torch.randn(r, w.shape[1]) for b in model.blocks for w in b[1:] if w.dim() == 2}
    mats = [w for b in model.blocks for w in (b[1], b[2], b[4], b[5])]
    h = torch.randn(r, cfg.hidden)
    logits = _head_rows(h, model.lm_head)
    col_logits = (model.lm_head @ h.t()).t()
    g = cfg.heads
    kc = torch.randn(r, cfg.kv_heads, t + 64, cfg.head_dim)[:, :, :t]  # a cache view
    q_rows = torch.randn(r, 1, g, cfg.head_dim).transpose(1, 2)
    q_cols = torch.randn(g * cfg.head_dim, r).t().reshape(r, 1, g, cfg.head_dim).transpose(1, 2)
    mask = torch.ones(r, 1, 1, t, dtype=torch.bool)

    def attention(q):
        return lambda: [F.scaled_dot_product_attention(q, kc, kc, attn_mask=mask, enable_gqa=True)
                        for _ in range(cfg.layers)]

    cells = {
        ("layer matmuls, F.linear (x @ W.T)", "all layers"):
            lambda: [F.linear(x[w.shape[1]], w) for w in mats],
        ("layer matmuls, (W @ x.T).T (engine)", "all layers"):
            lambda: [w @ x[w.shape[1]].t() for w in mats],
        ("head, W @ h.T (column-major logits)", "once"): lambda: model.lm_head @ h.t(),
        ("head, W @ h.T then .t().contiguous()", "once"):
            lambda: (model.lm_head @ h.t()).t().contiguous(),
        ("head, 2,048-token chunks (engine)", "once"): lambda: _head_rows(h, model.lm_head),
        ("argmax, row-major logits (engine)", "once"): lambda: logits.argmax(-1),
        ("argmax, column-major logits", "once"): lambda: col_logits.argmax(-1),
        ("SDPA, row-major query (flash kernel, engine)", "all layers"): attention(q_rows),
        ("SDPA, column-major query (math kernel)", "all layers"): attention(q_cols),
    }
    timer = Timer(args.repeats, rounds=5)
    for key, fn in cells.items():
        timer.add(key, fn)
    ms = timer.run()
    return {**made, "torch": torch.__version__, "rows": r, "context": t, "layers": cfg.layers,
            "cells": [{"part": k[0], "scope": k[1], "ms": v} for k, v in ms.items()]}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = ["# Parts of a decode forward (SmolLM2-135M, fp32)", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch {res['torch']}",
             f"- date: {res['date']}; {res['rows']} rows (requests x 1 token), {res['context']} "
             "cached context tokens, medians of interleaved rounds", "", "| part | scope | ms |",
             "|---|---|---:|"]
    lines += [f"| {c['part']} | {c['scope']} | {c['ms']:.1f} |" for c in res["cells"]]
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--context", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=20)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where whole forwards should leave the compiled kernels for MKL: the target's forward at
verify shapes (a batch of requests, each verifying a chain of q tokens after a 500-token
prefix) with the fused path bounded at 32 rows (`SKINNY_ROWS`) against 64
(`WIDE_SKINNY_ROWS`), interleaved call by call in one process, so the host's drift falls
on both alike. A forward past the bound runs MKL's matmuls and the eager norm, rotary and
gating; attention is the compiled kernel either way. Per-product timings
(benchmarks/engine/skinny_matmul.py) leave out those small ops, which is why the bound is
read here. Prints a table, writes results/skinny_bound.{md,json}; --render rewrites the
page from the kept JSON.

    python -m benchmarks.engine.skinny_bound [--rounds 9] [--render]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from benchmarks.engine import kernel_page
from benchmarks.shared.page import Made

from adaserve.engine import EngineConfig
from adaserve.engine.batch import chain_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import load_models
from adaserve.engine.model import SKINNY_ROWS, WIDE_SKINNY_ROWS

NAME = "skinny_bound"
SHAPES = ((8, 4), (8, 5), (16, 3), (8, 8))  # (requests, tokens each): 32, 40, 48, 64 rows
PREFIX = 500


def measure(rounds: int) -> dict:
    made = Made.now("benchmarks.engine.skinny_bound").to_dict()
    m = load_models(EngineConfig()).target
    cells = []
    for n, q in SHAPES:
        kv = KVCache(m.n_layers, n, m.cfg.kv_heads, m.cfg.head_dim, PREFIX + q + 1)
        m(kv, chain_batch(n, PREFIX, 0, kv.trash_col))
        fb = chain_batch(n, q, PREFIX, kv.trash_col)
        times = {SKINNY_ROWS: [], WIDE_SKINNY_ROWS: []}
        for _ in range(rounds):
            for bound in times:
                m.skinny_rows = bound
                t = time.perf_counter()
                m(kv, fb)
                times[bound].append((time.perf_counter() - t) * 1e3)
        cells.append({"requests": n, "tokens": q, "ms": {str(b): statistics.median(v)
                                                         for b, v in times.items()}})
    return {**made, "torch": torch.__version__, "rounds": rounds, "prefix": PREFIX,
            "wide": bool(torch.ops.adaserve.avx512()), "cells": cells}


def page(res: dict) -> list[str]:
    lines = ["# The fused path's row bound: whole verify forwards at 32 against 64", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch {res['torch']}"
             f"; AVX-512 {'yes' if res['wide'] else 'no'}",
             f"- date: {res['date']}, commit {res['commit']}; medians of {res['rounds']} "
             "rounds, the two bounds interleaved call by call", "",
             f"ms for one target forward (SmolLM2-135M) after a {res['prefix']}-token prefix:",
             "", "| requests x tokens | rows | fused to 32 rows | fused to 64 rows | 64 / 32 |",
             "|---|---|---|---|---|"]
    for c in res["cells"]:
        a, b = c["ms"][str(SKINNY_ROWS)], c["ms"][str(WIDE_SKINNY_ROWS)]
        lines.append(f"| {c['requests']} x {c['tokens']} | {c['requests'] * c['tokens']} | "
                     f"{a:.1f} | {b:.1f} | {b / a:.2f} |")
    return lines + ["", "Past 32 rows the first column runs MKL and the eager small ops; the "
                    "engine fuses to 64 rows on an AVX-512 CPU, to 32 on an AVX2 one.", ""]


def main(argv: list[str] | None = None) -> int:
    return kernel_page.run(NAME, __doc__, lambda args: measure(args.rounds), page, argv,
                           lambda ap: ap.add_argument("--rounds", type=int, default=9))


if __name__ == "__main__":
    sys.exit(main())

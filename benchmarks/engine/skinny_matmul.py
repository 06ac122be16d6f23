"""The model's 121 matmuls (30 layers x qkv/o/gate-up/down, and the head) at T input rows,
per backend, side by side: which one the engine should use for each row count.

Backends: ours (torch.ops.adaserve.skinny_linear, the compiled kernel; on an AVX-512 CPU
its AVX-512 tiles, and its AVX2 tiles beside them, isa=0), MKL as F.linear
(x @ W.T), MKL as W @ x.T (the eager engine's orientation), OpenBLAS through numpy
(W @ x.T on the same memory, zero-copy). Medians over rounds; the weights are the real
SmolLM2-135M ones (538 MB fp32), so every call streams them from DRAM. Each round times one
backend at every row count, then rests a second before the next: OpenBLAS's threads spin
after a call and, interleaved call by call, slowed the next backend on the two cores ~2x
(ours at 8 rows: 128 ms right after numpy, 26-32 ms on its own).
Prints a table, writes results/skinny_matmul.{md,json}; --render rewrites the page from the
kept JSON, measuring nothing.

    python -m benchmarks.engine.skinny_matmul [--rounds 5] [--render]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from benchmarks.engine import kernel_page
from benchmarks.shared.page import Made

from adaserve.engine import EngineConfig
from adaserve.engine.loader import load_models

NAME = "skinny_matmul"
ROWS = (1, 2, 4, 8, 16, 24, 32, 40, 64)  # 24 and 40: batches of 8 verifying 3 and 5 tokens


def measure(rounds: int) -> dict:
    made = Made.now("benchmarks.engine.skinny_matmul").to_dict()
    m = load_models(EngineConfig(fast_kernels=False)).target
    ws = [t for b in m.blocks for t in (b[1], b[2], b[4], b[5])] + [m.lm_head]
    wn = [w.numpy() for w in ws]
    nbytes = sum(w.numel() * 4 for w in ws)
    ops = torch.ops.adaserve
    wide = bool(ops.avx512())
    backends = {
        "ours (skinny)": lambda xs, xn: [ops.skinny_linear(x, w) for x, w in zip(xs, ws)],
        **({"ours, AVX2 tiles": lambda xs, xn: [ops.skinny_linear(x, w, 0)
                                                for x, w in zip(xs, ws)]} if wide else {}),
        "MKL F.linear": lambda xs, xn: [F.linear(x, w) for x, w in zip(xs, ws)],
        "MKL W @ x.T": lambda xs, xn: [w @ x.t() for x, w in zip(xs, ws)],
        "OpenBLAS (numpy) W @ x.T": lambda xs, xn: [w @ x.T for x, w in zip(xn, wn)],
    }
    inputs = {}
    for t in ROWS:
        xs = [torch.randn(t, w.shape[1]) for w in ws]
        inputs[t] = (xs, [x.numpy() for x in xs])
    times = {(b, t): [] for b in backends for t in ROWS}
    for _ in range(rounds):
        for b, fn in backends.items():
            fn(*inputs[ROWS[0]])  # warm-up after the rest
            for t in ROWS:
                s = time.perf_counter()
                fn(*inputs[t])
                times[(b, t)].append(time.perf_counter() - s)
            time.sleep(1.0)  # let any spinning worker threads go to sleep
    med = {k: statistics.median(v) for k, v in times.items()}
    return {**made, "torch": torch.__version__, "rounds": rounds, "weight_bytes": nbytes,
            "wide": wide,
            "rows": list(ROWS), "ms": {b: [med[(b, t)] * 1e3 for t in ROWS] for b in backends}}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    ms = res["ms"]
    lines = ["# Skinny matmuls: the model's 121 weight matrices at T input rows", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch {res['torch']}",
             f"- date: {res['date']}, commit {res['commit']}; medians of {res['rounds']} "
             f"rounds, one backend at a time with a 1 s rest between; "
             f"{res['weight_bytes'] / 1e6:.0f} MB of fp32 weights per pass", "",
             "ms for all 121 products (lower is better; best per row count in bold):", "",
             "| T | " + " | ".join(ms) + " |", "|---|" + "---|" * len(ms)]
    for i, t in enumerate(res["rows"]):
        best = min(v[i] for v in ms.values())
        lines.append(f"| {t} | " + " | ".join(
            (f"**{v[i]:.1f}**" if v[i] == best else f"{v[i]:.1f}") for v in ms.values()) + " |")
    if res.get("wide"):
        lines += ["", "This CPU runs AVX-512: `ours (skinny)` is the kernel's AVX-512 tiles "
                  "(kernels/skinny_avx512.cpp), `ours, AVX2 tiles` the same op held to AVX2. "
                  "The engine takes the kernel up to 64 rows here (`WIDE_SKINNY_ROWS`; 32, "
                  "`SKINNY_ROWS`, on an AVX2 CPU) and MKL (W @ x.T) beyond, where prefill "
                  "chunks are compute-bound.", ""]
    else:
        lines += ["", "The engine takes the compiled kernel up to 32 rows (`SKINNY_ROWS`) and "
                  "MKL (W @ x.T) beyond, where prefill chunks are compute-bound.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return kernel_page.run(NAME, __doc__, lambda args: measure(args.rounds), page, argv,
                           lambda ap: ap.add_argument("--rounds", type=int, default=5))


if __name__ == "__main__":
    sys.exit(main())

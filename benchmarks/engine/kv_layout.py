"""Why the KV cache is fixed slots kept compact: attention read cost of three layouts.

Per layer of the default target (9 query heads, 3 KV heads, head_dim 64), one SDPA over
the keys of n requests with T cached columns each, reading them as
- view: the requests' slots are contiguous ([0, n)): a view of the cache, no copy;
- gather: the slots are scattered: index the cache, which copies the keys;
- paged: 16-token blocks from a block table, gathered and reshaped (what paged attention
  costs without a fused kernel, the situation on CPU).
Interleaved rounds, medians. Prints a table, writes results/kv_layout.{md,json}; --render
rewrites the page from the kept JSON, measuring nothing.

    python -m benchmarks.engine.kv_layout [--render] [--out results]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from benchmarks.shared.common import Timer
from benchmarks.shared.page import Made, kept, render_flags, write_page

NAME = "kv_layout"

H, HKV, D, SLOTS, SLOT_LEN, BLOCK = 9, 3, 64, 64, 1024, 16
CASES = [(1, 256, 1), (8, 256, 1), (32, 256, 1), (8, 256, 16), (32, 512, 4)]  # n, T, Q


def cells(n: int, t: int, q: int) -> dict:
    g = torch.Generator().manual_seed(0)
    k = torch.randn(SLOTS, HKV, SLOT_LEN, D, generator=g)
    v = torch.randn(SLOTS, HKV, SLOT_LEN, D, generator=g)
    slots = torch.randperm(SLOTS, generator=g)[:n]
    query = torch.randn(n, H, q, D, generator=g)
    mask = torch.ones(n, 1, q, t, dtype=torch.bool)
    blocks = SLOTS * SLOT_LEN // BLOCK
    kp = torch.randn(blocks, HKV, BLOCK, D, generator=g)
    vp = torch.randn(blocks, HKV, BLOCK, D, generator=g)
    table = torch.randperm(blocks, generator=g)[: n * (t // BLOCK)].view(n, t // BLOCK)

    def attend(keys, values):
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=True)

    def paged(cache):
        return cache[table].permute(0, 2, 1, 3, 4).reshape(n, HKV, t, D)

    return {
        "view": lambda: attend(k[:n, :, :t], v[:n, :, :t]),
        "gather": lambda: attend(k[slots, :, :t], v[slots, :, :t]),
        "paged": lambda: attend(paged(kp), paged(vp)),
    }


def measure() -> dict:
    made = Made.now("benchmarks.engine.kv_layout").to_dict()
    timer = Timer(repeats=60)
    for case in CASES:
        for name, fn in cells(*case).items():
            timer.add((case, name), fn)
    ms = timer.run()
    rows = [{"n": n, "T": t, "Q": q, **{name: ms[((n, t, q), name)] for name in
                                         ("view", "gather", "paged")}} for n, t, q in CASES]
    return {**made, "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = ["# KV cache layout: attention read cost per layer", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch "
             f"{res['torch']}, {res['threads']} threads",
             f"- date: {res['date']}; medians, interleaved rounds", "",
             "| n requests | T columns | Q queries | view ms | gather ms | paged ms | gather/view "
             "| paged/view |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['n']} | {r['T']} | {r['Q']} | {r['view']:.3f} | {r['gather']:.3f} | "
                     f"{r['paged']:.3f} | {r['gather'] / r['view']:.1f}x | "
                     f"{r['paged'] / r['view']:.1f}x |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure()
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

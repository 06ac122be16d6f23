"""Why the KV cache is fixed slots kept compact: attention read cost of three layouts.

Per layer of the default target (9 query heads, 3 KV heads, head_dim 64), one SDPA over
the keys of n requests with T cached columns each, reading them as
- view: the requests' slots are contiguous ([0, n)): a view of the cache, no copy;
- gather: the slots are scattered: index the cache, which copies the keys;
- paged: 16-token blocks from a block table, gathered and reshaped (what paged attention
  costs without a fused kernel, the situation on CPU).
Interleaved rounds, medians. Prints a table, writes results/kv_layout.{md,json}.

    python -m benchmarks.engine.kv_layout
"""

from __future__ import annotations

import datetime as dt
import json
import sys

import torch
import torch.nn.functional as F
from benchmarks.shared.common import RESULTS, Timer, commit, machine

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


def main() -> int:
    timer = Timer(repeats=60)
    for case in CASES:
        for name, fn in cells(*case).items():
            timer.add((case, name), fn)
    ms = timer.run()
    rows = [{"n": n, "T": t, "Q": q, **{name: ms[((n, t, q), name)] for name in
                                         ("view", "gather", "paged")}} for n, t, q in CASES]
    lines = ["# KV cache layout: attention read cost per layer", "",
             f"- command: `python {' '.join(sys.argv)}`", f"- machine: {machine()}, torch "
             f"{torch.__version__}, {torch.get_num_threads()} threads",
             f"- date: {dt.date.today().isoformat()}; medians, interleaved rounds", "",
             "| n requests | T columns | Q queries | view ms | gather ms | paged ms | gather/view "
             "| paged/view |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['T']} | {r['Q']} | {r['view']:.3f} | {r['gather']:.3f} | "
                     f"{r['paged']:.3f} | {r['gather'] / r['view']:.1f}x | "
                     f"{r['paged'] / r['view']:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = RESULTS
    (out / "kv_layout.md").write_text(text)
    head = commit()
    (out / "kv_layout.json").write_text(json.dumps(
        {"command": f"python {' '.join(sys.argv)}", "machine": machine(), "commit": head,
         "date": dt.date.today().isoformat(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`adaserve sim record`: a replay recording of the real pair over the load generator's
prompts, for the simulator's replay acceptance (docs/sim-models.md, "Acceptance").

The prompts are exactly those `adaserve loadgen --prompts SET --requests N --seed S` draws
from (the same prompt set per seed), chat-encoded as the server encodes them, so `adaserve
bench --backend sim --acceptance FILE` with the same settings replays what the real pair
would have said about every request.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# what a tree looks past the longest output: the deepest draft tree (D_max, default 8),
# with room to spare
LOOKAHEAD = 16


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", default="short", choices=("short", "long", "mixed"),
                   help="the load generator's prompt set")
    p.add_argument("--requests", type=int, default=30,
                   help="as given to loadgen/bench: the prompt set holds min(N, 512) prompts")
    p.add_argument("--seeds", default="0",
                   help="comma separated loadgen/bench seeds: each has its own prompt set")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="output tokens per request as loadgen's --max-tokens (0: each "
                        "prompt's own, 64 short and 96 long); the recording holds "
                        f"{LOOKAHEAD} more")
    p.add_argument("--top-k", type=int, default=16, help="draft guesses kept per position")
    p.add_argument("--out", type=Path, required=True, help="the recording to write (.npz)")


def main(args: argparse.Namespace) -> int:
    if args.out.suffix != ".npz":
        print("adaserve sim record: --out must end in .npz", file=sys.stderr)
        return 2
    from adaserve.engine import EngineConfig
    from adaserve.engine.engine import encode_chat
    from adaserve.engine.loader import load_models
    from adaserve.loadgen.workload import prompt_set
    from adaserve.sim.record import record

    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    specs = [p for s in seeds for p in prompt_set(args.prompts, max(1, min(args.requests, 512)), s)]
    cfg = EngineConfig(model=args.model, draft=args.draft, policy="adaserve", device=args.device)
    models = load_models(cfg)
    prompts = list(dict.fromkeys(tuple(encode_chat(models.tokenizer, p.as_messages()))
                                 for p in specs))
    longest = args.max_tokens or max(p.max_tokens for p in specs)
    print(f"recording {len(prompts)} prompts x {longest + LOOKAHEAD} tokens ...", file=sys.stderr)
    rec = record(models, prompts, longest + LOOKAHEAD, top_k=args.top_k,
                 meta={"target": str(cfg.model), "draft": str(cfg.draft),
                       "source": f"adaserve sim record --prompts {args.prompts} --requests "
                                 f"{args.requests} --seeds {args.seeds}"})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rec.save(args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0

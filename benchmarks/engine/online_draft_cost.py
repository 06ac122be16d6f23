"""What online draft training costs serving on this machine (docs/draft.md "Online
adaptation"): engine iterations while the trainer process trains, against the same
iterations with it idle, side by side in one run.

The trainer runs as `adaserve serve --online-draft` runs it (its own process, niceness
19, one thread); it is given one long update (--steps) on records served in a warm-up,
and while it trains the engine serves a batch; then, the update finished, the same batch
again. Rounds alternate the order (busy first, then idle first). Prints a table and
writes results/online_draft_cost.md and .json.

    python -m benchmarks.engine.online_draft_cost --rounds 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

import numpy as np

from benchmarks.shared.common import RESULTS, commit, machine


def serve(engine, prompts, max_tokens: int) -> tuple[list[float], list[float]]:
    """Iteration seconds and per-request TPOT of one batch."""
    from adaserve.engine import SamplingParams

    n0 = len(engine.core.stats)
    done = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    its = [s.seconds for s in list(engine.core.stats)[n0:]]
    return its, [c.stats.tpot_s for c in done if c.stats.tpot_s is not None]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--steps", type=int, default=400, help="steps of the long update")
    args = p.parse_args()

    from adaserve.distill.online import TrainerClient
    from adaserve.engine import Engine, EngineConfig
    from adaserve.engine.online_config import OnlineDraftConfig
    from adaserve.engine.online_draft import DisagreementBuffer
    from adaserve.loadgen.workload import domain_shift_set

    cfg = EngineConfig(policy="chain-4", max_batch=args.batch)
    ocfg = OnlineDraftConfig(steps=args.steps, heldout_every=2)
    stream = domain_shift_set(400, 0, args.max_tokens)[-args.batch * 3:]  # code, mostly
    prompts = [stream[i].as_messages() for i in range(len(stream))]
    busy, idle = [], []
    train_s = []
    with Engine(cfg) as engine:
        enc = [engine.encode_chat(m) for m in prompts]
        batch = enc[: args.batch]
        # records to train on: a warm-up batch served with the buffer tapping verify
        buf = DisagreementBuffer(ocfg)
        engine.core.executor.tap = lambda reqs, c, mask, res: buf.observe(
            reqs, np.where(mask, c.depth, 0).max(1),
            np.array([len(a) for a in res.accepted]), res.bonus_logits)
        ids = [engine.submit(t, None) for t in enc[args.batch:]]
        for i in ids:
            engine.result(i)
        for rid in list(buf.pending):
            buf.seal(rid)
        engine.core.executor.tap = None
        fresh, held = buf.take(), list(buf.held)
        trainer = TrainerClient.start(ocfg, cfg, engine.models)
        try:
            serve(engine, batch, args.max_tokens)  # warm
            for rnd in range(args.rounds):
                for phase in (("busy", "idle") if rnd % 2 == 0 else ("idle", "busy")):
                    if phase == "busy":
                        t0 = time.perf_counter()
                        trainer.submit(fresh, held)
                        time.sleep(5)  # the trainer has loaded its data and is stepping
                        busy.append(serve(engine, batch, args.max_tokens))
                        got = trainer.result(block=True)
                        train_s.append(time.perf_counter() - t0)
                        assert got is not None
                    else:
                        idle.append(serve(engine, batch, args.max_tokens))
        finally:
            trainer.close()
    it_busy = float(np.median([x for its, _ in busy for x in its])) * 1e3
    it_idle = float(np.median([x for its, _ in idle for x in its])) * 1e3
    tp_busy = float(np.median([x for _, t in busy for x in t])) * 1e3
    tp_idle = float(np.median([x for _, t in idle for x in t])) * 1e3
    cmd = "python -m benchmarks.engine.online_draft_cost " + " ".join(sys.argv[1:])
    rows = [("iteration ms, median", it_idle, it_busy), ("TPOT ms, median", tp_idle, tp_busy)]
    table = ["| | trainer idle | trainer training | ratio |", "|---|---|---|---|"]
    table += [f"| {name} | {a:.1f} | {b:.1f} | {b / a:.3f} |" for name, a, b in rows]
    page = "\n".join([
        "# What online draft training costs serving",
        "",
        f"- command: `{cmd}` (ran alone: `/work/cpu-excl`)",
        f"- code version: commit {commit()}",
        f"- machine: {machine()}",
        f"- date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- engine: chain-4, batch {args.batch}, {args.max_tokens} tokens a request, "
        f"{args.rounds} rounds; trainer: its own process, niceness {ocfg.nice}, "
        f"{ocfg.threads} thread, an update of {args.steps} steps "
        f"(median {np.median(train_s):.0f} s from submit to result)",
        "",
        *table,
        "",
    ])
    (RESULTS / "online_draft_cost.md").write_text(page)
    (RESULTS / "online_draft_cost.json").write_text(json.dumps(
        {"busy": busy, "idle": idle, "train_seconds": train_s, "args": vars(args)}))
    print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Served TPOT at light load against the engine alone, in one run: where a token's time goes
between the engine's step and the client.

1. Engine only: `EngineCore` (incremental, the default engine) in this process, one request
   at a time over the short prompt set, 64 new tokens: per request, the decode steps' mean
   (what a request's TPOT would be with no server around it).
2. Served: `adaserve bench --experiment rate --rates 0.25 --policies incremental` (a real
   `adaserve serve`, Locust, Poisson arrivals at 0.25 req/s), after this process has freed
   its engine. Per request, the client's TPOT and the server's own report of it.
3. The ratio served / engine only, over all requests and over those that ran alone (no other
   request in flight: their iterations are batch-1 like the engine-only ones).
Writes results/served_tpot.{md,json} and the bench's pages under results/served_tpot/;
--render rewrites results/served_tpot.md from the kept JSON, measuring nothing.

    python -m benchmarks.serving.served_tpot [--requests 16] [--rounds 3] [--render]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys

from benchmarks.shared.page import Made, kept, render_flags, write_page

NAME = "served_tpot"


def engine_only(rounds: int, new: int) -> list[float]:
    """Per request: mean decode-step seconds, one request at a time."""
    # the engine's imports here, so --render needs none of them
    from benchmarks.engine.engine import run_engine

    from adaserve.engine import EngineConfig
    from adaserve.engine.core import EngineCore
    from adaserve.engine.engine import encode_chat
    from adaserve.engine.loader import load_models
    from adaserve.loadgen.workload import prompt_set

    cfg = EngineConfig()
    core = EngineCore(cfg, load_models(cfg))
    tok = core.models.tokenizer
    out = []
    prompts = prompt_set("short", 6)  # the served run's set (same seed)
    for _ in range(rounds):
        for p in prompts:
            _, stats = run_engine(core, [encode_chat(tok, p.as_messages())], new)
            out.append(statistics.fmean(s.seconds for s in stats if s.prefill_tokens == 0))
    return out


def alone(recs: list[dict]) -> list[dict]:
    """Requests no other request overlapped (sent to finished)."""
    return [r for r in recs if not any(
        o is not r and o["sent_s"] < r["finished_s"] and r["sent_s"] < o["finished_s"]
        for o in recs)]


def measure(args: argparse.Namespace) -> dict:
    made = Made.now("benchmarks.serving.served_tpot").to_dict()
    eng = engine_only(args.rounds, args.new_tokens)
    gc.collect()
    out = args.out / NAME
    cmd = ["adaserve", "bench", "--experiment", "rate", "--rates", "0.25", "--requests",
           str(args.requests), "--policies", "incremental", "--prompts", "short",
           "--max-tokens", str(args.new_tokens), "--out", str(out)]
    subprocess.run(cmd, check=True)
    recs = [json.loads(x) for p in sorted((out / "raw").glob("*/records.jsonl"))
            for x in p.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r["status"] == "ok" and r["output_tokens"] > 1]
    med = statistics.median
    e_ms = med(eng) * 1e3
    solo = alone(recs)

    def row(name: str, rs: list[dict]) -> dict:
        c = med(r["tpot_ms"] for r in rs)
        s = med(r["server"]["tpot_ms"] for r in rs)
        return {"requests": name, "n": len(rs), "client_tpot_ms": c, "server_tpot_ms": s,
                "ratio_client": c / e_ms, "ratio_server": s / e_ms}

    rows = [row("all", recs)] + ([row("alone", solo)] if solo else [])
    return {**made, "bench_command": " ".join(cmd), "new_tokens": args.new_tokens,
            "engine_only_step_ms": e_ms, "engine_only_n": len(eng), "rows": rows}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = [
        "# Served TPOT at 0.25 req/s against the engine alone", "",
        f"- command: `{res['command']}` (runs `{res['bench_command']}`)",
        f"- machine: {res['machine']}", f"- date: {res['date']}, commit {res['commit']}", "",
        f"Engine only (incremental, one request at a time, {res['engine_only_n']} requests, "
        f"{res['new_tokens']} new tokens): median per-request mean decode step "
        f"**{res['engine_only_step_ms']:.1f} ms**.", "",
        "| requests | n | client TPOT ms (median) | server-reported TPOT ms | client / engine "
        "only | server / engine only |", "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['requests']} | {r['n']} | {r['client_tpot_ms']:.1f} | "
              f"{r['server_tpot_ms']:.1f} | {r['ratio_client']:.2f}x | {r['ratio_server']:.2f}x |"
              for r in res["rows"]]
    lines += ["", "\"alone\": no other request in flight from send to finish. The goal "
              "(issue 20): served TPOT at 0.25 req/s within 1.15x of the engine-only step.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SGLang on this CPU, side by side: plain, STANDALONE, ADASERVE, and our embedded engine.

One run, one workload, four servers started one after another (never two at once: two
cores), each driven by the same client:

- `sglang-none`: `adaserve sglang serve-cpu --algorithm none` (no speculation);
- `sglang-standalone`: SGLang's own tree speculation, the target as its own draft;
- `sglang-adaserve`: the plugin, same draft and tree shape (D, W, N) as STANDALONE;
- `embedded`: `adaserve serve` (our engine, its packaged distilled draft, defaults).

A name may carry a budget: `sglang-adaserve:6` runs ADASERVE with ADASERVE_BUDGET=6 (a
budget under the verify layout, so the SLO classes compete for positions); `embedded:4`
runs `adaserve serve --budget 4`.

The workload: the load generator's short prompts (their user message as plain text), a
fixed output length with ignore_eos, greedy, classes urgent / moderate / relaxed in turn,
`--concurrency` requests in flight (closed loop). Every request streams, so TTFT and TPOT
are measured by this client the same way for every server. The SLO classes are multiples
of a baseline: for the SGLang servers, sglang-none's own median TPOT at one request in
flight, measured first in this run; the embedded server uses its profile's baseline.

    .venv/bin/python benchmarks/sglang_cpu.py                 # ~10 min
    .venv/bin/python benchmarks/sglang_cpu.py --requests 6    # quicker look

Writes results/sglang_cpu.md and .json. SGLang on a CPU is a test vehicle for the plugin
(stubbed kernels, torch attention, Triton's interpreter for index kernels), not a fast
path: the table says what runs, not what a GPU would do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import commit, machine, write_results  # noqa: E402

from loadgen.workload import prompt_set  # noqa: E402

from adaserve.sglang.cpu.process import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLASSES = ("urgent", "moderate", "relaxed")
MULTIPLES = {"urgent": 1.0, "moderate": 2.4, "relaxed": 8.0}  # DESIGN.md's default classes
SHAPE = {"steps": 3, "topk": 2, "draft_tokens": 4}


def stream_one(url: str, text: str, tokens: int, slo_class: str | None) -> dict:
    """One streamed /generate (the same route and body shape on both servers)."""
    headers = {"X-SLO-Class": slo_class} if slo_class else {}
    body = {"text": text, "stream": True, "sampling_params": {
        "temperature": 0, "ignore_eos": True, "max_new_tokens": tokens}}
    t0 = time.perf_counter()
    arrivals, last = [], None
    with httpx.stream("POST", url + "/generate", json=body, headers=headers,
                      timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[6:])
                arrivals.append(time.perf_counter())
    meta = last["meta_info"]
    n = int(meta["completion_tokens"])
    # TPOT from the first streamed chunk to the last; a chunk may carry several tokens
    tpot = (arrivals[-1] - arrivals[0]) / (n - 1) if n > 1 and len(arrivals) > 1 else None
    if meta.get("spec_verify_ct"):  # SGLang: every verify step emits >= 1 token
        accepted = n / int(meta["spec_verify_ct"])
    else:
        accepted = meta.get("accepted_tokens_per_step")  # embedded (and ADASERVE's report)
    return {"class": slo_class, "tokens": n, "ttft_s": arrivals[0] - t0, "tpot_s": tpot,
            "e2e_s": arrivals[-1] - t0, "accepted": accepted, "ids": last.get("output_ids")}


def drive(url: str, prompts: list[str], tokens: int, concurrency: int,
          classes: list[str | None]) -> tuple[list[dict], float]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        recs = list(pool.map(lambda pc: stream_one(url, pc[0], tokens, pc[1]),
                             zip(prompts, classes)))
    return recs, time.perf_counter() - t0


def summarize(name: str, recs: list[dict], wall: float, slo_ms: dict[str, float],
              start_s: float) -> dict:
    out = {"system": name, "requests": len(recs), "wall_s": wall, "start_s": start_s,
           "tokens_per_s": sum(r["tokens"] for r in recs) / wall, "classes": {}}
    for c in CLASSES:
        rs = [r for r in recs if r["class"] == c]
        if not rs:
            continue
        acc = [r["accepted"] for r in rs if r["accepted"] is not None]
        tp = [r["tpot_s"] * 1e3 for r in rs if r["tpot_s"] is not None]
        out["classes"][c] = {
            "n": len(rs), "slo_ms": slo_ms[c],
            "accepted_per_step": statistics.mean(acc) if acc else None,
            "tpot_ms": statistics.median(tp) if tp else None,
            "ttft_ms": statistics.median(r["ttft_s"] * 1e3 for r in rs),
            "attained": sum(t <= slo_ms[c] for t in tp) / len(rs)}
    return out


def sglang_argv(algorithm: str, baseline_ms: float | None, concurrency: int,
                budget: int | None) -> list[str]:
    argv = [str(ROOT / ".venv-sglang/bin/adaserve"), "sglang", "serve-cpu",
            "--algorithm", algorithm, "--max-running-requests", str(max(concurrency, 4)),
            "--steps", str(SHAPE["steps"]), "--topk", str(SHAPE["topk"]),
            "--draft-tokens", str(SHAPE["draft_tokens"])]
    if baseline_ms is not None:
        argv += ["--baseline-ms", f"{baseline_ms:.3f}"]
    if budget is not None:
        argv += ["--budget", str(budget)]
    return argv


def page(rows: list[dict], args, baseline_ms: float, same_ids: dict, stamp: str) -> str:
    lines = [
        "# SGLang on this CPU, side by side", "",
        f"`.venv/bin/python benchmarks/sglang_cpu.py --requests {args.requests} --tokens "
        f"{args.tokens} --concurrency {args.concurrency}`; {stamp}; commit {commit()}; "
        f"{machine()}.", "",
        f"Workload: {args.requests} short prompts (the load generator's, user message as "
        f"text), {args.tokens} output tokens each (ignore_eos, greedy), classes "
        f"{' / '.join(CLASSES)} in turn, {args.concurrency} in flight; every request "
        "streamed, TTFT and TPOT measured by the client. SGLang servers: SmolLM2-135M fp32 "
        f"as target and as its own draft, tree D={SHAPE['steps']} W={SHAPE['topk']} "
        f"N={SHAPE['draft_tokens']}, `adaserve sglang serve-cpu`; `:B` = ADASERVE_BUDGET B "
        f"(default: the whole layout, N x max running requests = {SHAPE['draft_tokens']} x "
        f"{max(args.concurrency, 4)}). Embedded: `adaserve serve` (packaged distilled draft; "
        "`:B` = `--budget B`, default the start-up profile's B).", "",
        f"SLO classes for the SGLang rows: x{MULTIPLES['urgent']:g} / "
        f"x{MULTIPLES['moderate']:g} / x{MULTIPLES['relaxed']:g} of sglang-none's median "
        f"TPOT at one request in flight, measured first: {baseline_ms:.1f} ms. The "
        "embedded server's classes scale its own profiled baseline.", "",
        "| system | start s | wall s | tokens/s | class | accepted/step | TPOT ms (median) "
        "| TTFT ms (median) | SLO ms | attained |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for i, (c, v) in enumerate(r["classes"].items()):
            head = (f"| {r['system']} | {r['start_s']:.0f} | {r['wall_s']:.1f} | "
                    f"{r['tokens_per_s']:.2f} |") if i == 0 else "| | | | |"
            acc = "-" if v["accepted_per_step"] is None else f"{v['accepted_per_step']:.2f}"
            lines.append(f"{head} {c} | {acc} | {v['tpot_ms']:.0f} | {v['ttft_ms']:.0f} | "
                         f"{v['slo_ms']:.0f} | {100 * v['attained']:.0f}% |")
    lines += ["", "Greedy outputs token-identical to sglang-none: " + ", ".join(
        f"{k} {v}" for k, v in same_ids.items()) + ".", "",
        "SGLang here runs stubbed kernels, torch attention and Triton's interpreter for its "
        "index kernels: a test vehicle for the plugin, not a fast path. STANDALONE and "
        "ADASERVE verify the same [batch, N] layout, so ADASERVE cannot be faster than "
        "STANDALONE in this integration (no ragged verify; docs/sglang.md); what it "
        "changes is who gets the verified positions.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--systems", default="sglang-none,sglang-standalone,sglang-adaserve,"
                                         "sglang-adaserve:6,embedded,embedded:4")
    ap.add_argument("--name", default="sglang_cpu")
    args = ap.parse_args()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    logs = Path(tempfile.mkdtemp(prefix=f"{args.name}-logs-"))  # server logs: large, not kept
    print(f"[sglang_cpu] server logs in {logs}", flush=True)
    specs = prompt_set("short", args.requests, seed=0)
    prompts = [s.messages[-1][1] for s in specs]
    classes = [CLASSES[i % len(CLASSES)] for i in range(args.requests)]
    systems = args.systems.split(",")

    rows, ids, baseline_ms = [], {}, None
    for name in systems:
        kind, _, b = name.partition(":")
        budget = int(b) if b else None
        if kind == "embedded":
            argv = [str(ROOT / ".venv/bin/adaserve"), "serve",
                    *(["--budget", str(budget)] if budget else [])]
            srv = ServerProcess(argv, logs / f"{name}.log", health="/health", cwd=ROOT)
            info = httpx.get(srv.url + "/server_info", timeout=30).json()
            slo_ms = {c["name"]: c["tpot_ms"] for c in info["slo_classes"]
                      if c["name"] in CLASSES}
        else:
            algo = {"sglang-none": "none", "sglang-standalone": "STANDALONE",
                    "sglang-adaserve": "ADASERVE"}[kind]
            if algo == "ADASERVE" and baseline_ms is None:
                raise SystemExit("sglang-adaserve needs sglang-none first (its baseline)")
            srv = ServerProcess(sglang_argv(algo, baseline_ms, args.concurrency, budget),
                                logs / f"{name}.log", cwd=ROOT)
            slo_ms = None
        try:
            if name == "sglang-none":  # the baseline: one request in flight
                solo = [stream_one(srv.url, p, args.tokens, None) for p in prompts[:3]]
                baseline_ms = statistics.median(r["tpot_s"] for r in solo) * 1e3
            stream_one(srv.url, prompts[0], 4, None)  # warm the path once
            recs, wall = drive(srv.url, prompts, args.tokens, args.concurrency, classes)
        finally:
            srv.stop()
        slo_ms = slo_ms or {c: MULTIPLES[c] * baseline_ms for c in CLASSES}
        rows.append(summarize(name, recs, wall, slo_ms, srv.start_s))
        ids[name] = [r["ids"] for r in recs]
        print(f"[sglang_cpu] {name}: {rows[-1]['tokens_per_s']:.2f} tok/s, wall "
              f"{wall:.1f} s", flush=True)
    same = {k: ("yes" if v == ids["sglang-none"] else "NO") for k, v in ids.items()
            if k.startswith("sglang-") and k != "sglang-none" and "sglang-none" in ids}
    text = page(rows, args, baseline_ms or float("nan"), same, stamp)
    write_results(args.name, text, {"stamp": stamp, "commit": commit(), "args": vars(args),
                                    "baseline_ms": baseline_ms, "rows": rows,
                                    "same_ids_as_plain": same})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SGLang + ADASERVE on this CPU: ragged against uniform verify under a budget, the real
draft's cost, greedy parity, SLO steering, and the load generator against both backends.

One run, servers started one after another (never two at once: two cores), each driven
by the same client:

- `sglang-none`: `adaserve sglang serve-cpu --algorithm none` (no speculation): the
  reference outputs, and the baseline the SLO classes are multiples of (its median TPOT at
  one request in flight, measured first);
- `adaserve-<verify>[-fullhead]:<B>`: the plugin with its real draft (our distilled
  draft, full-vocabulary checkpoint; its head cut to the 8,192 trained tokens by SGLang's
  token map, or whole with `-fullhead`), `--verify ragged|uniform|alternate` and
  `--budget B`, where B is `layout` (N x max running requests: every position of SGLang's
  layout), `2n`, `3n` (n = the concurrency) or a number. `alternate` verifies ragged and
  uniform in turn, iteration by iteration, in one server: the two compared under the same
  load and requests (its iteration log is split by verify); the separate ragged and
  uniform servers give each its own client-side tokens/s;
- `embedded`: `adaserve serve` (our engine, its packaged draft, defaults).

Per SGLang ADASERVE server: greedy outputs of the tier's prompts (tests/sglang_tier) and of
the workload, against sglang-none's; the closed-loop workload (the load generator's short
prompts, a fixed output length, classes urgent / moderate / relaxed in turn, streamed,
`--concurrency` in flight), measured by the client (tokens/s, per-class TPOT, accepted
tokens per step) and by the worker's iteration log over the same window (iteration time,
tokens the target verified against the layout, phase times, and a draft step against the
target's verify forward in the same iterations: the draft's cost against the target's,
side by side). Then `adaserve loadgen`
(one mixed-SLO open-loop workload) against the embedded server and against SGLang +
ADASERVE (`--loadgen-system`), each judged against its own baseline's class multiples.

    .venv/bin/python -m benchmarks.sglang.cpu                        # ~40 min, quiet machine
    .venv/bin/python -m benchmarks.sglang.cpu --requests 4 --tokens 12 --systems \\
        sglang-none,adaserve-ragged:2n --loadgen-requests 0             # a quick look
    .venv/bin/python -m benchmarks.sglang.cpu --render                  # the page again

Writes results/sglang_cpu.md and .json; --render rewrites the page from the JSON, measuring
nothing (benchmarks/sglang/page.py; no SGLang needed). SGLang on a CPU is a test vehicle for
the plugin (stubbed kernels, torch attention, Triton's interpreter for index kernels), not a
fast path: the tables say what runs and how the two verifications compare, not what a GPU
does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import httpx

# the SGLang tier's prompts, which this page measures on too
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "sglang_tier"))
from benchmarks.shared.common import ROOT, commit, machine  # noqa: E402
from benchmarks.shared.page import kept, render_flags, write_page  # noqa: E402
from benchmarks.sglang.page import command, page, same  # noqa: E402
from benchmarks.sglang.runs import (CLASSES, MULTIPLES, drive, greedy_ids, iterations,  # noqa: E402
                          loadgen, per_class, stream_one)
from servers import PROMPTS as TIER_PROMPTS  # noqa: E402

from adaserve.loadgen.workload import prompt_set  # noqa: E402
from adaserve.sglang.cpu.process import ServerProcess  # noqa: E402
from adaserve.scheduler import split_specs  # noqa: E402

SHAPE = {"steps": 3, "topk": 2, "draft_tokens": 4}
DEFAULT_SYSTEMS = ("sglang-none,adaserve-alternate:layout,adaserve-alternate:3n,"
                   "adaserve-alternate:2n,adaserve-uniform:3n,adaserve-ragged:3n,"
                   "adaserve-uniform:2n,adaserve-ragged:2n,adaserve-ragged-fullhead:2n,"
                   "embedded")


def budget_of(spec: str, n: int) -> int:
    layout = SHAPE["draft_tokens"] * n
    return {"layout": layout, "2n": 2 * n, "3n": 3 * n}.get(spec) or int(spec)


def sglang_argv(args, algorithm: str, baseline_ms: float | None, verify: str | None = None,
                budget: int | None = None, log: Path | None = None,
                head: str = "hot") -> list[str]:
    argv = [str(ROOT / ".venv-sglang/bin/adaserve"), "sglang", "serve-cpu",
            "--algorithm", algorithm, "--max-running-requests", str(args.concurrency),
            "--steps", str(SHAPE["steps"]), "--topk", str(SHAPE["topk"]),
            "--draft-tokens", str(SHAPE["draft_tokens"])]
    if baseline_ms is not None:
        argv += ["--baseline-ms", f"{baseline_ms:.3f}"]
    if verify:
        argv += ["--verify", verify, "--budget", str(budget), "--iteration-log", str(log),
                 "--draft-head", head]
    return argv


def run_system(name: str, args, logs: Path, prompts, classes,
               baseline_ms: float | None) -> dict:
    kind, _, b = name.partition(":")
    row = {"system": name}
    if kind == "embedded":
        srv = ServerProcess([str(ROOT / ".venv/bin/adaserve"), "serve"], logs / f"{name}.log",
                            health="/health", cwd=ROOT)
        info = httpx.get(srv.url + "/server_info", timeout=30).json()
        slo_ms = {c["name"]: c["tpot_ms"] for c in info["slo_classes"] if c["name"] in CLASSES}
        row.update(budget=info["budget"], verify="-")
    elif kind == "sglang-none":
        srv = ServerProcess(sglang_argv(args, "none", None), logs / f"{name}.log", cwd=ROOT)
        slo_ms = None
    else:
        _, verify, *full = kind.split("-")  # adaserve-<verify>[-fullhead]
        head = "full" if full == ["fullhead"] else "hot"
        budget = budget_of(b, args.concurrency)
        log = logs / f"{name}.iterations.jsonl"
        srv = ServerProcess(sglang_argv(args, "ADASERVE", baseline_ms, verify, budget, log,
                                        head), logs / f"{name}.log", cwd=ROOT)
        slo_ms = {c: MULTIPLES[c] * baseline_ms for c in CLASSES}
        row.update(budget=budget, budget_spec=b, verify=verify, head=head)
    row["start_s"] = srv.start_s
    try:
        if kind == "sglang-none":  # the baseline: one request in flight
            solo = [stream_one(srv.url, p, args.tokens, None) for p in prompts[:3]]
            baseline_ms = statistics.median(r["tpot_s"] for r in solo) * 1e3
            slo_ms = {c: MULTIPLES[c] * baseline_ms for c in CLASSES}
            row["baseline_ms"] = baseline_ms
        stream_one(srv.url, prompts[0], 4, None)  # warm the path once
        if kind.startswith(("sglang", "adaserve")):
            row["tier_ids"] = greedy_ids(srv.url, TIER_PROMPTS, 24)
        recs, wall, start, end = drive(srv.url, prompts, args.tokens, args.concurrency, classes)
        if kind.startswith("adaserve"):
            row["iterations"] = iterations(log, start, end, True if "alternate" in kind
                                           else None)
            if "alternate" in kind:
                row["iterations_uniform"] = iterations(log, start, end, False)
        if name == args.loadgen_system and args.loadgen_requests:
            row["loadgen"] = loadgen(srv.url, logs / f"loadgen-{name}", args.loadgen_rate,
                                     args.loadgen_requests, args.tokens, 0, slo_ms)
        if kind == "embedded" and args.loadgen_requests:
            row["loadgen"] = loadgen(srv.url, logs / "loadgen-embedded", args.loadgen_rate,
                                     args.loadgen_requests, args.tokens, 0, slo_ms)
    finally:
        srv.stop()
    row.update(wall_s=wall, tokens_per_s=sum(r["tokens"] for r in recs) / wall,
               classes=per_class(recs, slo_ms), slo_ms=slo_ms,
               workload_ids=[r["ids"] for r in recs])
    return row


def measure(args: argparse.Namespace) -> dict:
    os.environ["ADASERVE_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="adaserve-cache-")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    logs = Path(tempfile.mkdtemp(prefix=f"{args.name}-logs-"))  # server logs: large, not kept
    print(f"[sglang_cpu] server logs in {logs}", flush=True)
    specs = prompt_set("short", args.requests, seed=0)
    prompts = [s.messages[-1][1] for s in specs]
    classes = [CLASSES[i % len(CLASSES)] for i in range(args.requests)]
    rows, baseline_ms = [], None
    for name in split_specs(args.systems):
        if name.startswith("adaserve") and baseline_ms is None:
            raise SystemExit("the adaserve systems need sglang-none first (its baseline)")
        rows.append(run_system(name, args, logs, prompts, classes, baseline_ms))
        baseline_ms = rows[-1].get("baseline_ms", baseline_ms)
        print(f"[sglang_cpu] {name}: {rows[-1]['tokens_per_s']:.2f} tok/s", flush=True)
    ref = next((r for r in rows if r["system"] == "sglang-none"), None)
    for r in rows:  # the page says whether they match; the ids are bulky
        if r["system"].startswith("adaserve"):
            r.update(tier_same=same(r, ref, "tier_ids"),
                     workload_same=same(r, ref, "workload_ids"))
    for r in rows:
        r.pop("tier_ids", None)
        r.pop("workload_ids", None)
    return {"command": command(args), "stamp": stamp, "commit": commit(), "machine": machine(),
            "shape": SHAPE, "args": {k: v for k, v in vars(args).items()
                                     if k not in ("out", "render")},
            "baseline_ms": baseline_ms, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS)
    ap.add_argument("--loadgen-system", default="adaserve-ragged:3n",
                    help="the SGLang + ADASERVE server the load generator also drives")
    ap.add_argument("--loadgen-requests", type=int, default=24, help="0: no loadgen runs")
    ap.add_argument("--loadgen-rate", type=float, default=0.15)
    ap.add_argument("--cache", default=None,
                    help="the model cache the servers use (default: a new empty one, so the "
                         "first server's start is a first launch, conversion included)")
    ap.add_argument("--name", default="sglang_cpu")
    render_flags(ap, "<name>")
    args = ap.parse_args(argv)
    data = kept(args.name, args.out) if args.render else measure(args)
    write_page(args.name, page(data), args.out, None if args.render else data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

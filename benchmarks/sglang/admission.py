"""SGLang + ADASERVE admitting by TTFT deadline (the preset's ``admit=deadline``, hooked
into SGLang's waiting queue: adaserve/sglang/admission.py) against first come, first
served (``adaserve:admit=fifo``), under one mixed-SLO overload on this CPU:
results/sglang_admission.md.

For each seed, one server of each policy after the other (never two at once: two cores),
each `adaserve sglang serve-cpu` with the same settings, and the same `adaserve loadgen`
run against it: short prompts, 32 output tokens, Poisson arrivals, the default class mix
(60% urgent), each request naming its class only, so the server's classes judge it and
give it its default TTFT SLO (docs/contract.md). The classes are the default multiples
(x1 / x2.4 / x8) of ``--baseline-ms`` 150, SGLang + ADASERVE's median TPOT on this CPU
at four in flight (results/sglang_cpu.md: 148 ms). The default TTFT SLO needs a prefill
rate: ``--prefill-chunk-ms`` 550 per chunk of 256 tokens, the first-token time of one
250-token prompt alone on such a server (2026-11-27, dev CPU: 551 ms). At 1 req/s the
offered load is twice what four running requests serve here, so requests queue and the
order they are admitted in decides who gets a first token in time.

    .venv/bin/python -m benchmarks.sglang.admission              # ~15 min, quiet machine
    .venv/bin/python -m benchmarks.sglang.admission --render     # the page again

Needs .venv-sglang (SGLang 0.5.23 and the plugin) and .venv (the load generator).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.shared.common import ROOT, commit, machine
from benchmarks.shared.page import kept, render_flags, write_page
from benchmarks.sglang.admission_page import DEFAULT_NAME, command, page
from benchmarks.sglang.runs import loadgen

from adaserve.sglang.cpu.process import ServerProcess
from adaserve.scheduler import split_specs

NAME = DEFAULT_NAME


def server_argv(policy: str, args: argparse.Namespace) -> list[str]:
    return [str(ROOT / ".venv-sglang/bin/adaserve"), "sglang", "serve-cpu",
            "--policy", policy, "--baseline-ms", f"{args.baseline_ms:g}",
            "--prefill-chunk-ms", f"{args.prefill_chunk_ms:g}",
            "--max-running-requests", str(args.max_running), "--max-total-tokens", "8192",
            "--", "--chunked-prefill-size", str(args.chunk)]


def run_one(policy: str, seed: int, args: argparse.Namespace, logs: Path) -> dict:
    tag = f"{policy.replace(':', '_').replace('=', '-')}-s{seed}"
    srv = ServerProcess(server_argv(policy, args), logs / f"{tag}.log", cwd=ROOT)
    try:
        run = loadgen(srv.url, logs / tag, args.rate, args.requests, args.tokens, seed, None,
                      args.prompts)
    finally:
        srv.stop()
    return {"policy": policy, "seed": seed, "command": run["command"], "classes": run["rows"]}


def measure(args: argparse.Namespace) -> dict:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    logs = Path(tempfile.mkdtemp(prefix=f"{args.name}-logs-"))  # server logs: large, not kept
    print(f"[{args.name}] server and load logs in {logs}", flush=True)
    runs = []
    for i, seed in enumerate(range(args.seed, args.seed + args.seeds)):
        # interleaved, and every other seed in the reverse order: a server run second in
        # its pair was ahead on every seed of a run where the two behaved alike
        # (results/sglang_prefill_tpot), so drift and order hit every policy alike
        policies = split_specs(args.policies)
        for policy in policies if i % 2 == 0 else policies[::-1]:
            runs.append(run_one(policy, seed, args, logs))
            over = runs[-1]["classes"]["overall"]
            print(f"[{args.name}] {policy} seed {seed}: {100 * over['attainment_paper']:.1f}% "
                  f"paper, {100 * over['attainment_ttft']:.1f}% end to end", flush=True)
    return {"command": command(args), "stamp": stamp, "commit": commit(),
            "machine": machine(), "args": {k: v for k, v in vars(args).items()
                                           if k not in ("out", "render")}, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default=NAME, help="the page's name: results/<name>.md "
                    "(sglang_prefill: --policies adaserve,adaserve:prefill=chunk)")
    ap.add_argument("--policies", default="adaserve,adaserve:admit=fifo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompts", choices=("short", "long", "mixed"), default="short",
                    help="the load generator's prompt set (loadgen/workload.py)")
    ap.add_argument("--max-running", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=256, help="SGLang's --chunked-prefill-size")
    ap.add_argument("--baseline-ms", type=float, default=150.0)
    ap.add_argument("--prefill-chunk-ms", type=float, default=550.0)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    data = kept(args.name, args.out) if args.render else measure(args)
    write_page(args.name, page(data), args.out, None if args.render else data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory of the server process at batch 32.

Starts `adaserve serve` (defaults: adaserve policy, the distilled draft, 32 slots, a
2 GiB KV pool) as its own process, reads its resident memory when idle, then drives 32
concurrent streaming requests of --new-tokens output tokens each and reads the peak
(VmHWM from /proc). Prints a table, writes results/server_memory.{md,json}; --render
rewrites the page from the kept JSON, measuring nothing.

    python -m benchmarks.serving.server_memory [--new-tokens 64] [--render]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
from benchmarks.shared.page import Made, kept, render_flags, write_page

from adaserve.loadgen.serve_process import ServeProcess

NAME = "server_memory"


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) // 1024  # MiB
    return out


async def _load(url: str, n: int, new: int) -> tuple[float, int, int]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        async def one(i: int) -> int:
            body = {"prompt": f"Write a long essay, part {i}:", "max_tokens": new,
                    "ignore_eos": True, "stream": True, "temperature": 0,
                    "stream_options": {"include_usage": True}}
            final = None
            async with c.stream("POST", "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        ev = json.loads(line[6:])
                        if not ev["choices"]:  # the usage chunk (include_usage)
                            final = ev
            return final["usage"]["completion_tokens"]

        t = time.perf_counter()
        toks = await asyncio.gather(*(one(i) for i in range(n)))
        metrics = (await c.get("/metrics")).text
        running = max((float(line.split()[-1]) for line in metrics.splitlines()
                       if line.startswith("adaserve_running_requests ")), default=0)
        return time.perf_counter() - t, sum(toks), int(running)


def measure(args: argparse.Namespace) -> dict:
    made = Made.now("benchmarks.serving.server_memory").to_dict()
    log = Path(tempfile.mkdtemp()) / "serve.log"
    server = ServeProcess(["--log-level", "warning"], log)
    try:
        info = server.info
        if info["max_batch"] < args.batch:
            raise SystemExit(f"the server holds {info['max_batch']} requests, not {args.batch}: "
                             "raise --kv-cache-mb")
        idle = _status(server.proc.pid)
        sec, tokens, _ = asyncio.run(_load(server.url, args.batch, args.new_tokens))
        peak = _status(server.proc.pid)
    finally:
        server.stop()
    return {**made, "policy": info["policy"], "draft": info["draft"],
            "max_batch": info["max_batch"], "batch": args.batch, "new_tokens": args.new_tokens,
            "idle_rss_mib": idle["VmRSS"], "peak_rss_mib": peak["VmHWM"], "seconds": sec,
            "tokens": tokens}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    sec, tokens = res["seconds"], res["tokens"]
    lines = ["# Server process memory at batch 32", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}",
             f"- date: {res['date']}, commit {res['commit']}", "",
             f"`adaserve serve` with its defaults (policy {res['policy']}, draft "
             f"{res['draft']}, {res['max_batch']} KV slots in a 2 GiB pool allocated at "
             f"start-up), {res['batch']} concurrent streaming requests of {res['new_tokens']} "
             f"tokens each.", "",
             "| state | resident memory (MiB) |", "|---|---|",
             f"| idle, after start-up | {res['idle_rss_mib']} |",
             f"| peak (VmHWM) over the batch-{res['batch']} load | {res['peak_rss_mib']} |", "",
             f"The load took {sec:.1f} s for {tokens} output tokens ({tokens / sec:.1f} tok/s).",
             ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

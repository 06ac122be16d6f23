"""`adaserve serve` start-up time on a fresh machine (cold) and again (warm), as a user runs
it: the README's command with an empty model cache, then the same cache a second time.

Cold pays the GGUF conversion, the CPU kernels' build and the start-up profile; warm finds
the converted model and the built kernels (no profile is saved by `serve`, so it measures
one again). For each: seconds to the first /health answer and to the first chat reply,
and what the server said it spent on the kernels. Writes results/startup.{md,json};
--render rewrites the page from the kept JSON, measuring nothing.

    python -m benchmarks.serving.startup [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.shared.page import Made, kept, render_flags, write_page

NAME = "startup"

CHAT = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 16, "temperature": 0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cache: str) -> dict:
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    t0 = time.perf_counter()
    proc = subprocess.Popen(["adaserve", "serve", "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, ADASERVE_CACHE_DIR=cache))
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"adaserve serve exited: {open(log.name).read()[-2000:]}")
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.25)
            if time.perf_counter() - t0 > 600:
                raise RuntimeError("no /health answer within 10 minutes")
        health = time.perf_counter() - t0
        req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(CHAT).encode(),
                                     {"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
        answered = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(30)
    text = open(log.name).read()
    built = re.search(r"CPU kernels built in ([\d.]+) s", text)
    return {"health_s": health, "answer_s": answered,
            "kernel_build_s": float(built.group(1)) if built else None,
            "converted": "convert" in text.lower(),
            "answer": reply["choices"][0]["message"]["content"]}


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    lines = ["# `adaserve serve` start-up, cold and warm", "",
             f"- command: `{res['command']}`", f"- machine: {res['machine']}",
             f"- date: {res['date']}, commit {res['commit']}", "",
             "`adaserve serve` with an empty `ADASERVE_CACHE_DIR` (cold: converts the packaged "
             "GGUF, builds the CPU kernels, measures a start-up profile), then again on the "
             "same cache (warm: the profile is measured again; `adaserve profile` would save "
             "it).", "",
             "| start | first /health answer, s | first chat reply, s | kernel build, s | reply |",
             "|---|---|---|---|---|"]
    for name in ("cold", "warm"):
        r = res[name]
        build = f"{r['kernel_build_s']:.1f}" if r["kernel_build_s"] is not None else "cached"
        lines.append(f"| {name} | {r['health_s']:.1f} | {r['answer_s']:.1f} | {build} | "
                     f"{r['answer']!r} |")
    lines += ["", "Goal (issue 20): a fresh machine answers within a minute of starting.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    if args.render:
        res = kept(NAME, args.out)
    else:
        made = Made.now("benchmarks.serving.startup").to_dict()
        cache = tempfile.mkdtemp(prefix="adaserve-startup-")
        res = {**made, "cold": start(cache), "warm": start(cache)}
    write_page(NAME, page(res), args.out, None if args.render else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

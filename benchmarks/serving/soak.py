"""Soak: ten minutes of mixed-SLO traffic at 0.8x capacity; no 5xx, KV pool whole, RSS flat.

`adaserve serve` under open-loop traffic for --minutes, then checked for server errors,
a whole KV pool and flat memory:

1. Starts `adaserve serve` with its defaults (plus --serve-args) on a free loopback port.
2. Capacity (unless --capacity gives it): a closed-loop probe keeps max_batch + 8
   requests of the soak's own workload outstanding (the prompt set's prompts and output
   lengths, the default class mix) and counts the requests finished per second over
   --probe-seconds after --probe-warmup seconds.
3. Runs `adaserve loadgen` (Poisson arrivals, default class mix) at --load x capacity for
   --minutes, sampling the server's RSS and its running/waiting gauges every
   --sample-seconds, then waits for the server to drain.
4. Fills every KV slot once more (max_batch concurrent requests) to see each one is free.

Prints a table and writes results/soak/ (or --out): summary.md, summary.json, rss.png,
the load generator's records (loadgen/) and the server's log. Exits 1 if a check fails.
--render rewrites summary.md, rss.png and loadgen/summary.md from the kept summary.json,
loadgen/summary.json and loadgen/records.jsonl, measuring nothing (soak_page.py).

    python -m benchmarks.serving.soak [--minutes 10] [--capacity REQ_PER_S] [--serve-args '...']
        [--render]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import httpx
import psutil  # installed with locust, which the soak needs anyway (the [loadgen] extra)
from benchmarks.serving.soak_checks import (completion_rate, failures, others_cores, rss_slope,
                                            soak_requests)
from benchmarks.serving.soak_page import PROBE_QUEUE, page, plot
from benchmarks.shared.common import RESULTS, commit, machine
from benchmarks.shared.page import Made

from adaserve.loadgen.records import read_jsonl
from adaserve.loadgen.run import render as render_loadgen
from adaserve.loadgen.serve_process import ServeProcess, parse_metrics
from adaserve.loadgen.workload import DEFAULT_MIX, PROMPT_SETS, ClassMix, prompt_set



def rss_mib(pid: int) -> float:
    """Resident memory of the server process and any children it started."""
    p = psutil.Process(pid)
    procs = [p, *p.children(recursive=True)]
    return sum(q.memory_info().rss for q in procs) / 2**20


def cpu_seconds() -> tuple[float, float]:
    """(CPU-seconds the machine has been busy, CPU-seconds of this script and everything
    it started: the server, the load generator and Locust)."""
    t = psutil.cpu_times()
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)  # steal counts: a neighbour's load
    me = psutil.Process()
    ours = 0.0
    for p in (me, *me.children(recursive=True)):
        try:
            c = p.cpu_times()  # a reaped child is in its parent's children_* already
            ours += c.user + c.system + c.children_user + c.children_system
        except psutil.NoSuchProcess:
            pass
    return busy, ours


def scrape(url: str) -> dict[str, float] | None:
    try:
        return parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
    except httpx.HTTPError:
        return None


def sample(server: ServeProcess, t0: float) -> dict:
    m = scrape(server.url)
    return {"t": time.monotonic() - t0, "rss_mib": rss_mib(server.proc.pid),
            "cpu": cpu_seconds(),
            "running": None if m is None else m.get("adaserve_running_requests"),
            "waiting": None if m is None else m.get("adaserve_waiting_requests")}


def watch(server: ServeProcess, t0: float, samples: list[dict], every: float,
          until: Callable[[dict], bool], deadline: float) -> bool:
    """Sample every ``every`` s until ``until(last sample)`` or the deadline (monotonic);
    True if ``until`` was met."""
    due = time.monotonic()
    while True:
        s = sample(server, t0)
        samples.append(s)
        if len(samples) % 6 == 1:
            print(f"[soak] t={s['t']:6.0f}s rss {s['rss_mib']:.0f} MiB running {s['running']} "
                  f"waiting {s['waiting']}", flush=True)
        if until(s):
            return True
        if time.monotonic() > deadline:
            return False
        due += every
        time.sleep(max(0.0, due - time.monotonic()))


async def _closed_loop(url: str, prompts, classes: list[str], clients: int, warmup: float,
                       window: float) -> dict:
    t0 = time.perf_counter()
    stop = t0 + warmup + window
    done: list[tuple[float, int]] = []  # (finish s, output tokens)
    bad: list[int | str] = []  # status codes, or the exception of a failed connection
    turn = iter(range(10**9))
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        async def client() -> None:
            while time.perf_counter() < stop:
                i = next(turn)
                p = prompts[i % len(prompts)]
                try:
                    r = await c.post("/v1/chat/completions", headers={
                        "X-SLO-Class": classes[i % len(classes)]}, json={
                        "messages": p.as_messages(), "max_tokens": p.max_tokens,
                        "temperature": 0})
                except httpx.HTTPError as e:
                    bad.append(type(e).__name__)
                    continue
                if r.status_code == 200:
                    done.append((time.perf_counter() - t0, r.json()["usage"]["completion_tokens"]))
                else:
                    bad.append(r.status_code)

        async def emitted() -> float:
            """Tokens/s the server emitted over the window (its dashboard's per-second
            iteration history, which keeps 600 s): smooth where completions come in
            clumps, as requests admitted together finish together."""
            span = window  # 10-600 s, as main() checks
            await asyncio.sleep(max(0.0, stop - time.perf_counter()))
            r = await c.get("/dashboard/data", params={"seconds": span})
            return sum(x["tokens"] for x in r.json()["seconds"]) / span

        *_, tok_s = await asyncio.gather(*(client() for _ in range(clients)), emitted())
    ends = [t for t, _ in done]
    mean_tokens = sum(n for _, n in done) / len(done) if done else float("nan")
    return {"clients": clients, "warmup_s": warmup, "window_s": window,
            "completed_in_window": sum(warmup <= t < warmup + window for t in ends),
            "non_200": bad, "capacity_rps": completion_rate(ends, warmup, warmup + window),
            "server_tok_s": tok_s, "mean_output_tokens": mean_tokens,
            # every request the probe started finished, so their mean length is unbiased
            "capacity_from_tokens_rps": tok_s / mean_tokens}


def measure_capacity(server: ServeProcess, args: argparse.Namespace) -> dict:
    prompts = prompt_set(args.prompts, 512, args.seed)
    classes = ClassMix.parse(DEFAULT_MIX).draw(len(prompts), random.Random(args.seed))
    clients = server.info["max_batch"] + PROBE_QUEUE
    print(f"[soak] capacity probe: {clients} closed-loop clients, {args.probe_warmup:g} s "
          f"warm-up + {args.probe_seconds:g} s counted", flush=True)
    cpu, t = cpu_seconds(), time.monotonic()
    probe = asyncio.run(_closed_loop(server.url, prompts, classes, clients, args.probe_warmup,
                                     args.probe_seconds))
    probe["others_cores"] = others_cores(cpu, cpu_seconds(), time.monotonic() - t)
    return probe


async def _fill(url: str, n: int) -> dict:
    """n concurrent requests long enough that all are decoding at once, the running gauge
    polled meanwhile: it reaches n only if n slots can be taken."""
    peak = 0
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        async def one(i: int) -> int | str:
            try:
                r = await c.post("/v1/completions", json={
                    "prompt": f"Count from {i} upwards, one number per line:",
                    "max_tokens": 48, "ignore_eos": True, "temperature": 0})
            except httpx.HTTPError as e:
                return type(e).__name__
            return r.status_code

        async def poll() -> None:
            nonlocal peak
            while True:
                try:
                    m = parse_metrics((await c.get("/metrics")).text)
                    peak = max(peak, int(m.get("adaserve_running_requests", 0)))
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)

        poller = asyncio.create_task(poll())
        codes = await asyncio.gather(*(one(i) for i in range(n)))
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
    return {"requests": n, "ok": sum(c == 200 for c in codes), "peak_running": peak,
            "not_ok": [c for c in codes if c != 200]}


def log_problems(path: Path) -> int:
    """Lines of the server log that report a traceback or an ERROR."""
    return sum("Traceback" in line or "ERROR" in line for line in path.read_text().splitlines())


def run(args: argparse.Namespace, out: Path) -> dict:
    (out / "loadgen").mkdir(parents=True, exist_ok=True)
    server = ServeProcess(["--log-level", "warning", *shlex.split(args.serve_args)],
                          out / "serve.log")
    res: dict = {"server": server.info}
    try:
        res["rss_idle_mib"] = rss_mib(server.proc.pid)
        res["probe"] = measure_capacity(server, args) if args.capacity is None else None
        capacity = args.capacity or res["probe"]["capacity_rps"]
        rate = args.load * capacity
        n = soak_requests(rate, args.minutes)
        res.update(capacity_rps=capacity, rate_rps=rate, requests=n)
        res["metrics_start"] = scrape(server.url)
        cmd = [sys.executable, "-m", "adaserve.cli", "loadgen", "--host", server.url,
               "--rate", f"{rate:.4f}", "--requests", str(n), "--prompts", args.prompts,
               "--seed", str(args.seed), "--out", str(out / "loadgen")]
        res["loadgen_command"] = shlex.join(["adaserve", *cmd[3:]])
        print(f"[soak] {n} requests at {rate:.3f}/s ({args.load:g} x {capacity:.3f}): "
              f"{res['loadgen_command']}", flush=True)
        samples: list[dict] = []
        t0 = time.monotonic()
        with open(out / "loadgen.log", "w") as log:
            # its own session: a stop must reach Locust, which `adaserve loadgen` starts
            load = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                finished = watch(server, t0, samples, args.sample_seconds,
                                 lambda s: load.poll() is not None,
                                 t0 + 60 * args.minutes + args.grace_seconds)
            finally:
                if load.poll() is None:
                    os.killpg(load.pid, signal.SIGTERM)
                    load.wait(timeout=60)
        res["load_s"] = time.monotonic() - t0
        res["loadgen_exit"] = load.returncode if finished else "stopped after the grace time"
        res["drained"] = watch(server, t0, samples, args.sample_seconds,
                               lambda s: s["running"] == 0 and s["waiting"] == 0,
                               time.monotonic() + args.grace_seconds)
        res["metrics_end"] = scrape(server.url)
        res["samples"] = samples
        res["others_cores_load"] = others_cores(samples[0]["cpu"], samples[-1]["cpu"],
                                                samples[-1]["t"] - samples[0]["t"])
        res["fill"] = asyncio.run(_fill(server.url, server.info["max_batch"]))
        res["metrics_after_fill"] = scrape(server.url)
        res["rss_after_fill_mib"] = rss_mib(server.proc.pid)
    finally:
        server.stop()
    res["log_problems"] = log_problems(out / "serve.log")
    return res


def gauges(m: dict[str, float]) -> tuple[float | None, float | None]:
    """(running, waiting) requests from a /metrics scrape."""
    return m.get("adaserve_running_requests"), m.get("adaserve_waiting_requests")


def evaluate(res: dict, args: argparse.Namespace, records) -> list[tuple[str, str, str, bool]]:
    """(check, what it reads, value, passed) rows; adds the failure counts, the slope and
    the threshold to ``res``."""
    f = failures(records)
    res["failures"] = asdict(f)
    end, after = res["metrics_end"] or {}, res["metrics_after_fill"] or {}
    fill = res["fill"]
    half = 30 * args.minutes
    try:
        slope = rss_slope([s["t"] for s in res["samples"]],
                          [s["rss_mib"] for s in res["samples"]], half, 2 * half)
        res["slope"] = {**asdict(slope), "window_s": [half, 2 * half]}
        flat = (f"{slope.mib_per_min:+.2f} ± {slope.stderr:.2f} MiB/min (limit "
                f"{args.max_slope:g})", slope.mib_per_min <= args.max_slope)
    except ValueError as e:  # too few samples: reported, and not a pass
        res["slope"], flat = None, (str(e), False)
    per_req_kib = args.max_slope * 1024 / (60 * res["rate_rps"])
    res["threshold"] = {"mib_per_min": args.max_slope, "kib_per_request": per_req_kib}
    return [
        ("zero 5xx", "HTTP status of every request in loadgen/records.jsonl (503 included)",
         f"{f.http_5xx} of {f.sent}", f.http_5xx == 0),
        ("every request served", "status ok in every record (4xx, errors inside a 200 "
         "stream, cut streams, transport errors, unfinished count against it)",
         f"{f.ok} of {res['requests']} ok; 4xx {f.http_4xx}, other {f.other}, "
         f"unfinished {f.pending}, never sent {res['requests'] - f.sent}",
         f.ok == res["requests"]),
        ("server log clean", "lines with Traceback or ERROR in serve.log",
         str(res["log_problems"]), res["log_problems"] == 0),
        ("KV pool whole: drained", "/metrics adaserve_running_requests and "
         "adaserve_waiting_requests after the load (running, waiting)", str(gauges(end)),
         res["drained"] and gauges(end) == (0.0, 0.0)),
        ("KV pool whole: every slot takes a request",
         f"{fill['requests']} concurrent requests (max_batch) of 48 tokens: 200s, and the "
         "peak of adaserve_running_requests polled every 0.2 s",
         f"{fill['ok']} ok, peak running {fill['peak_running']}; after: {gauges(after)}",
         fill["ok"] == fill["requests"] == fill["peak_running"] and gauges(after) == (0.0, 0.0)),
        ("memory flat", f"least-squares slope of the server's RSS, sampled every "
         f"{args.sample_seconds:g} s, over {half:g}-{2 * half:g} s of the load", *flat),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the load")
    ap.add_argument("--load", type=float, default=0.8, help="request rate / capacity")
    ap.add_argument("--capacity", type=float, default=None,
                    help="capacity in requests/s (default: measure it with the probe)")
    ap.add_argument("--probe-seconds", type=float, default=180.0,
                    help="the probe's counted window, 10-600 s")
    ap.add_argument("--probe-warmup", type=float, default=60.0,
                    help="probe seconds before counting starts: at least one turn of the "
                         "clients (40 requests at ~0.8/s on the 2-core dev VM: ~50 s)")
    ap.add_argument("--sample-seconds", type=float, default=5.0,
                    help="RSS and /metrics sampling period")
    ap.add_argument("--max-slope", type=float, default=1.0,
                    help="RSS slope over the second half of the load, MiB/min, that passes")
    ap.add_argument("--grace-seconds", type=float, default=600.0,
                    help="how long the load may run past --minutes, and the drain may take, "
                         "before they are stopped")
    ap.add_argument("--prompts", choices=list(PROMPT_SETS), default="mixed",
                    help="the loadgen's prompt set, for the probe and the load")
    ap.add_argument("--seed", type=int, default=0,
                    help="seeds the arrival times, prompts and classes")
    ap.add_argument("--serve-args", default="", help="extra flags for `adaserve serve`")
    ap.add_argument("--out", type=Path, default=RESULTS / "soak")
    ap.add_argument("--render", action="store_true",
                    help="measure nothing: rewrite the pages and plot from --out's kept data")
    args = ap.parse_args(argv)
    if args.render:
        res = json.loads((args.out / "summary.json").read_text())
        ok = write(res, args.out)
        render_loadgen(args.out / "loadgen")
        return ok
    for name in ("minutes", "load", "sample_seconds"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    if args.capacity is not None and not args.capacity > 0:
        ap.error("--capacity must be > 0 requests/s")
    if not 10 <= args.probe_seconds <= 600:
        ap.error("--probe-seconds must be 10-600 (the server's history keeps 600 s)")
    if args.probe_warmup < 0:
        ap.error("--probe-warmup must be >= 0")

    # the code the server runs is the tree at its start: others may commit meanwhile
    started, head = dt.datetime.now().isoformat(timespec="seconds"), commit()
    res = run(args, args.out)
    res.update(command=Made.now("benchmarks.serving.soak").command, date=started, commit=head,
               machine=f"{platform.node()}, {platform.platform()}, {machine()}",
               cores=os.cpu_count(), settings={
                   "minutes": args.minutes, "load": args.load, "prompts": args.prompts,
                   "mix": DEFAULT_MIX, "seed": args.seed, "serve_args": args.serve_args,
                   "sample_seconds": args.sample_seconds, "max_slope": args.max_slope})
    rows = evaluate(res, args, _records(args.out))
    res["checks"] = [{"check": c, "reads": w, "value": v, "passed": ok} for c, w, v, ok in rows]
    (args.out / "summary.json").write_text(json.dumps(res, indent=2))
    return write(res, args.out)


def _records(out: Path) -> list:
    path = out / "loadgen" / "records.jsonl"
    return read_jsonl(path) if path.exists() else []  # none: the loadgen failed, see its log


def write(res: dict, out: Path) -> int:
    """The page and plot from the run's data; 1 if a check failed."""
    plot(res, out / "rss.png")
    text = page(res, _records(out))
    print(text)
    (out / "summary.md").write_text(text)
    return 0 if all(c["passed"] for c in res["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())

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

    python -m benchmarks.serving.soak [--minutes 10] [--capacity REQ_PER_S] [--serve-args '...']
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
from benchmarks.shared.common import RESULTS, commit, machine
from benchmarks.serving.soak_checks import (completion_rate, failures, others_cores, parse_metrics, rss_slope,
                         soak_requests, total)

from adaserve.loadgen.records import read_jsonl, summarize, summary_table
from adaserve.loadgen.serve_process import ServeProcess
from adaserve.loadgen.workload import DEFAULT_MIX, PROMPT_SETS, ClassMix, prompt_set

PROBE_QUEUE = 8  # requests queued beyond the slots, so a freed slot is refilled at once
SHARED_CORES = 0.25  # others' load beyond which the page says the machine was shared
TTFT_SLO_MS = 5000.0  # the loadgen's default, for its per-class table


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


def plot(res: dict, args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = res["samples"]
    t = [x["t"] / 60 for x in s]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(t, [x["rss_mib"] for x in s], color="tab:blue", label="server RSS")
    if sl := res["slope"]:
        a, b = sl["window_s"]
        ax.plot([a / 60, b / 60], [sl["intercept_mib"] + sl["mib_per_min"] * x / 60
                                   for x in (a, b)],
                color="black", ls="--", label=f"fit {sl['mib_per_min']:+.2f} MiB/min")
    lo, hi = min(x["rss_mib"] for x in s), max(x["rss_mib"] for x in s)
    mid = (lo + hi) / 2  # at least 20 MiB tall, so a flat line looks flat
    ax.set_ylim(min(lo, mid - 10) - 1, max(hi, mid + 10) + 1)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_xlabel("minutes since the load generator started")
    ax.set_ylabel("resident memory (MiB)")
    ax2 = ax.twinx()
    for key, color in (("running", "tab:orange"), ("waiting", "tab:red")):
        ax2.step(t, [x[key] if x[key] is not None else float("nan") for x in s], where="post",
                 color=color, alpha=0.7, label=f"{key} requests")
    ax2.set_ylabel("requests in the server")
    ax.axvline(args.minutes, color="grey", lw=0.8)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    ax.set_title(f"Soak at {res['rate_rps']:.2f} req/s ({args.load:g} x capacity)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page(res: dict, rows, args: argparse.Namespace, records) -> str:
    info, probe, th = res["server"], res["probe"], res["threshold"]
    rss = [x["rss_mib"] for x in res["samples"]]
    ms, me = res["metrics_start"] or {}, res["metrics_end"] or {}
    fin = total(me, "adaserve_requests_total") - total(ms, "adaserve_requests_total")
    if probe:
        cap = (f"measured: {probe['clients']} closed-loop clients (max_batch "
               f"{info['max_batch']} + {PROBE_QUEUE} queued) each sending its next request "
               f"as soon as the last finished, the soak's prompts (`{args.prompts}`, their own "
               f"output lengths) and class mix; {probe['completed_in_window']} requests "
               f"finished in the {probe['window_s']:g} s after a {probe['warmup_s']:g} s "
               f"warm-up = **{probe['capacity_rps']:.3f} requests/s**; non-200 answers: "
               f"{len(probe['non_200'])}. Cross-check: the server emitted "
               f"{probe['server_tok_s']:.1f} tokens/s over the window (/dashboard/data), / "
               f"{probe['mean_output_tokens']:.1f} output tokens per probe request = "
               f"{probe['capacity_from_tokens_rps']:.3f} requests/s")
    else:
        cap = f"given with --capacity: **{res['capacity_rps']:.3f} requests/s**"
    f = res["failures"]
    others = [res["others_cores_load"]] + ([probe["others_cores"]] if probe else [])
    shared = (f"{probe['others_cores']:.2f} cores during the probe, " if probe else "") + \
        f"{res['others_cores_load']:.2f} cores during the load"
    lines = [
        "# Soak: 0.8x capacity, mixed SLO classes", "",
        f"- command: `{res['command']}`", f"- machine: {res['machine']}",
        f"- date: {res['date']}, commit {res['commit']}",
        f"- server: `adaserve serve` defaults{' + ' + args.serve_args if args.serve_args else ''}"
        f": {info['model']} + {info['draft']}, policy {info['policy']}, B = {info['budget']}, "
        f"{info['max_batch']} KV slots, max waiting {info['max_waiting']}; classes "
        + ", ".join(f"{c['name']} {c['tpot_ms']:.1f} ms" if c["tpot_ms"] else c["name"]
                    for c in info["slo_classes"]),
        f"- capacity: {cap}",
        f"- load: `{res['loadgen_command']}`: {res['requests']} requests, Poisson at "
        f"{res['rate_rps']:.3f}/s = {args.load:g} x capacity over {args.minutes:g} minute(s), "
        f"class mix {DEFAULT_MIX} (i.i.d. draws), prompt set {args.prompts}; the last "
        f"request finished {res['load_s']:.0f} s after the load started",
        f"- other processes' CPU load, on average: {shared} (of {os.cpu_count()} cores; "
        "the machine's busy time less this script's, the server's and the loadgen's)"
        + (": **the machine was shared, so the capacity and the timings are low**"
           if max(others) > SHARED_CORES else ""), "",
        "Capacity is the request throughput the server sustains when it is never short of "
        "work, measured with the soak's own workload, so 0.8x keeps the server busy with a "
        "stable queue. The rate sweeps in results/rate/ are not used: they ran with "
        "`--budget 4` and short prompts, and where their attainment falls is an SLO limit "
        "(urgent attainment is under 50% at their lowest rate), not a throughput limit.", "",
        "## Checks", "", "| check | reads | value | pass |", "|---|---|---|---|",
        *(f"| {c} | {what} | {v} | {'yes' if ok else '**NO**'} |" for c, what, v, ok in rows), "",
        f"Memory limit: {th['mib_per_min']:g} MiB/min, at this run's "
        f"{60 * res['rate_rps']:.0f} requests/min {th['kib_per_request']:.0f} KiB per "
        "request. Weights and the KV pool are allocated at start-up; what a request could "
        "leak is host objects: its token ids as a Python list take ~36 B a token, ~20 KiB "
        "for a 500-token prompt, and a leaked per-step tensor (logits over the 49k "
        "vocabulary: 192 KiB) far more. A slower leak passes: a "
        f"{args.minutes:g}-minute run cannot tell it from noise, and the limit is still "
        f"{th['mib_per_min'] * 60 * 24 / 1024:.1f} GiB a day.", "",
        "## Memory (server RSS, MiB)", "", "| when | RSS |", "|---|---|",
        f"| idle after start-up | {res['rss_idle_mib']:.0f} |",
        f"| load start (after the probe) | {rss[0]:.0f} |",
        f"| peak during the load | {max(rss):.0f} |",
        f"| end (drained) | {rss[-1]:.0f} |",
        f"| after the slot fill | {res['rss_after_fill_mib']:.0f} |", "",
        "![RSS and requests in the server over the run](rss.png)", "",
        "## Server counters (/metrics)", "", "| | load start | end | change |",
        "|---|---|---|---|",
        *(f"| {name} | {total(ms, key):g} | {total(me, key):g} | "
          f"{total(me, key) - total(ms, key):+g} |" for name, key in (
              ("running requests", "adaserve_running_requests"),
              ("waiting requests", "adaserve_waiting_requests"),
              ("finished requests (adaserve_requests_total)", "adaserve_requests_total"),
              ("rejected (adaserve_rejected_requests_total)",
               "adaserve_rejected_requests_total"),
              ("output tokens", "adaserve_output_tokens_total"))), "",
        f"The server counted {fin:g} requests finished during the load; the client "
        f"recorded {f['ok']} ok of {f['sent']}.", "",
        "## Per class (client-measured; attainment is reported, not a soak criterion)", "",
        summary_table(summarize(records, TTFT_SLO_MS), TTFT_SLO_MS), ""]
    return "\n".join(lines)


def main() -> int:
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
    args = ap.parse_args()
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
    res.update(command="python " + shlex.join(sys.argv), date=started, commit=head,
               machine=f"{platform.node()}, {platform.platform()}, {machine()}")
    path = args.out / "loadgen" / "records.jsonl"
    records = read_jsonl(path) if path.exists() else []  # none: the loadgen failed, see its log
    rows = evaluate(res, args, records)
    res["checks"] = [{"check": c, "reads": w, "value": v, "passed": ok} for c, w, v, ok in rows]
    plot(res, args, args.out / "rss.png")
    text = page(res, rows, args, records)
    print(text)
    (args.out / "summary.md").write_text(text)
    (args.out / "summary.json").write_text(json.dumps(res, indent=2))
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

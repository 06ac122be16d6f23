"""`adaserve loadgen`: one headless Locust run of the mixed-SLO traffic, then its tables.

Runs loadgen/locustfile.py under Locust (its own process: Locust monkey-patches the
interpreter with gevent), with one dispatcher user; then reads the per-request records
and writes, in --out: records.jsonl, Locust's CSV statistics (locust_*.csv), summary.json
and summary.md (a row per SLO class and overall, the exact command, machine and date).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from adaserve.loadgen.options import add_mix_draw_args, add_traffic_args, traffic_argv
from adaserve.loadgen.records import ClassSummary, read_jsonl, summarize, summary_table
from adaserve.loadgen.workload import MIX_DRAWS

LOCUSTFILE = Path(__file__).with_name("locustfile.py")

DESCRIPTION = """\
Send open-loop mixed-SLO traffic to a running AdaServe server (or SGLang with the plugin)
and report SLO attainment and goodput per class. Requests go out at their scheduled times
whatever is still outstanding, each with an SLO class (the X-SLO-Class header); the run is
Locust, headless, with one dispatcher user. Writes to --out: records.jsonl (one line per
request), summary.json, summary.md and Locust's CSV statistics.

example:
  adaserve loadgen --host http://127.0.0.1:8000 --rate 1 --requests 100 --out loadgen-out"""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="http://127.0.0.1:8000", help="the server's base URL")
    add_traffic_args(p)
    add_mix_draw_args(p.add_mutually_exclusive_group(), "iid", notes={
        "iid": " (the default, so a recorded command draws the same classes again)"})
    p.add_argument("--class-tpot-ms", default="", metavar="NAME=MS,...",
                   help="the classes' TPOT SLOs, e.g. urgent=80,relaxed=640,best-effort "
                        "(default: the server's, from its /server_info)")
    p.add_argument("--ttft-slo-ms", type=float, default=5000.0,
                   help="TTFT SLO of the TTFT+TPOT attainment variant")
    p.add_argument("--out", type=Path, default=Path("loadgen-out"),
                   help="directory for the records, summaries and Locust CSVs")
    p.add_argument("--web", action="store_true",
                   help="open Locust's web UI instead of running headless")


def locust_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", args.host,
           *traffic_argv(args), "--records", str(args.out / "records.jsonl")]
    if args.class_tpot_ms:
        cmd += ["--class-tpot-ms", args.class_tpot_ms]
    if not args.web:
        # a missed SLO or a refused request is a result, not a failed run: exit 0 for them
        cmd += ["--headless", "-u", "1", "-r", "1", "--only-summary", "--exit-code-on-error",
                "0", "--csv", str(args.out / "locust")]
    return cmd


def classes_missing(host: str) -> str | None:
    """Why the server at ``host`` cannot give the classes' SLOs (its /server_info has no
    ``slo_classes``), or None. Checked before Locust starts: its dispatcher reads them
    when it starts, and a headless run whose one user failed to start would wait forever."""
    import httpx

    try:
        r = httpx.get(f"{host}/server_info", timeout=30)
        classes = r.json().get("slo_classes") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        return f"{host}/server_info did not answer with JSON ({e!r})"
    if not classes:
        return (f"{host}/server_info lists no SLO classes (HTTP {r.status_code}); give them "
                "with --class-tpot-ms NAME=MS,...")
    return None


def main(args: argparse.Namespace) -> int:
    if not args.class_tpot_ms and not args.web and (why := classes_missing(args.host)):
        print(f"adaserve loadgen: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "records.jsonl").unlink(missing_ok=True)
    cmd = locust_command(args)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    rc = subprocess.run(cmd, env=env).returncode
    records_path = args.out / "records.jsonl"
    if not records_path.exists():
        print(f"locust exited with {rc} and wrote no records", file=sys.stderr)
        return rc or 1
    records = read_jsonl(records_path)
    rows = summarize(records, args.ttft_slo_ms)
    try:
        import httpx

        info = httpx.get(f"{args.host}/server_info", timeout=10).json()
    except Exception:  # the summary is still worth writing without it
        info = None
    meta = {"command": "adaserve loadgen " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
            "machine": machine(),
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "server": info, "requests": len(records), "ttft_slo_ms": args.ttft_slo_ms,
            "mix_draw": args.mix_draw}
    (args.out / "summary.json").write_text(json.dumps(
        {**meta, "rows": [asdict(r) for r in rows]}, indent=2))
    text = page(meta, rows, args)
    (args.out / "summary.md").write_text(text)
    print(text)
    return rc


def page(meta: dict, rows: list[ClassSummary], args: argparse.Namespace) -> str:
    """summary.md: the run's command, machine and date (``meta``) and its table."""
    return "\n".join([
        "# Load run", "", f"- command: `{meta['command']}`", f"- machine: {meta['machine']}",
        f"- date: {meta['date']}",
        f"- server: {_server_line(meta['server'])}",
        f"- {meta['requests']} requests, {args.arrival} arrivals"
        + _arrivals(args)
        + f", prompt set {args.prompts}, class mix {args.mix}"
        + (f" with urgent share {args.urgent:g}" if args.urgent >= 0 else "")
        + f"; {MIX_DRAWS[args.mix_draw]}", "",
        "Attainment = requests within their TPOT SLO / requests sent with an SLO (refused or "
        "failed ones count as missed); goodput = output tokens of requests that met their "
        "SLO (best effort: completed) per second of the run; TPOT and TTFT measured by the "
        "client from the stream.", "",
        summary_table(rows, args.ttft_slo_ms), ""])


def render(out: Path) -> str:
    """Rewrite a kept run's summary.md from its summary.json and records.jsonl, sending
    nothing: the run's flags are read back from the command it records."""
    meta = json.loads((out / "summary.json").read_text())
    p = argparse.ArgumentParser()
    add_args(p)
    args = p.parse_args(shlex.split(meta["command"])[2:])  # after "adaserve loadgen"
    text = page(meta, summarize(read_jsonl(out / "records.jsonl"), args.ttft_slo_ms), args)
    (out / "summary.md").write_text(text)
    return text


def machine() -> str:
    """This machine in one line, for result pages."""
    return (f"{platform.node()}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}")


def commit() -> str:
    """The checkout's short commit, for result pages ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _arrivals(args: argparse.Namespace) -> str:
    if args.arrival == "trace":
        return f" from {args.trace}"
    if args.arrival == "paper":
        at = f"at a mean {args.rate:g}/s" if args.rate > 0 else f"x {args.time_scale:g} in time"
        return f" from the paper trace {args.trace} ({at}; its lengths and SLOs)"
    return f" at {args.rate:g}/s"


def _server_line(info: dict | None) -> str:
    if not info:
        return "(no /server_info)"
    classes = ", ".join(f"{c['name']} {c['tpot_ms']:.1f} ms" if c["tpot_ms"] else c["name"]
                        for c in info.get("slo_classes", []))
    return (f"{info.get('model')} + {info.get('draft')}, policy {info.get('policy')}, "
            f"B = {info.get('budget')}; classes: {classes}")

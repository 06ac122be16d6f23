"""`adaserve sglang fleet-cpu`: N `adaserve sglang serve-cpu` replicas behind SGLang's own
router (sglang-router), with the SLO front before it, started and taken down together
(issue 28).

The replicas are exactly what `serve-cpu` starts, with whatever flags follow ``--`` (so
its defaults, the draft included, are the fleet's), each on its own port, with
``--enable-metrics`` so Prometheus can scrape every one. The first replica starts alone
(it converts the packaged model into the cache on a fresh machine, and two converters
would race); the others start together once it answers. Then the router
(``python -m sglang_router.launch_router``) starts in front of them with the routing
policy asked for, on an internal port, and the front (``adaserve.sglang.front``: the
router drops every SLO a client states, so the front carries it on ``tracestate``) on the
fleet's port. The fleet prints one JSON line per part (role, url, pid).

A replica that dies is reported and left dead: the router's health checks take it out,
which is what a fleet is for. The fleet stops when it is told to (SIGINT or SIGTERM) or
when the router or the front exits, and then stops every part, each with its whole
process group (SGLang spawns a scheduler and a detokenizer per replica).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from adaserve.sglang.cpu.process import (  # noqa: F401 (the tests take them from here)
    free_port, group_alive, shared_memory_of, stop_group, unlink_all)

# sglang-router 0.3.2's policies (its --policy choices), and ours: the SLO front picks
ROUTER_POLICIES = ("round_robin", "random", "power_of_two", "cache_aware", "manual")
PICKER = "picker"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=int, default=2, help="serve-cpu replicas (N)")
    p.add_argument("--policy", choices=(*ROUTER_POLICIES, PICKER), default="round_robin",
                   help="the router's load-balancing policy (sglang-router --policy; manual "
                        "honours X-SMG-Routing-Key), or picker: the SLO front picks each "
                        "request's replica from the replicas' reports and names it to the "
                        "router (docs/fleet.md)")
    p.add_argument("--front-args", default="",
                   help="more flags of the SLO front, as one quoted string (e.g. "
                        "\"--picker-capacity 6\": python -m adaserve.sglang.front --help)")
    p.add_argument("--host", default="127.0.0.1", help="address the router and replicas use")
    p.add_argument("--port", type=int, default=30000,
                   help="the fleet's port, where clients connect (the SLO front; 0: a free "
                        "port)")
    p.add_argument("--router-port", type=int, default=0, help="the router's own port, "
                   "behind the front (default 0: a free port)")
    p.add_argument("--replica-port", type=int, default=None,
                   help="the first replica's port; the others follow it (default: the "
                        "router's + 1; 0: free ports chosen by the system)")
    p.add_argument("--router-metrics-port", type=int, default=29000,
                   help="the router's own Prometheus port (0: a free port)")
    p.add_argument("--health-check-interval", type=int, default=5,
                   help="seconds between the router's health checks of each replica; two "
                        "failed checks in a row take a replica out (sglang-router's default "
                        "is 60 s and 3 failures)")
    p.add_argument("--health-check-endpoint", default="/model_info",
                   help="the replica route the router's health checks GET (default "
                        "/model_info: the replica's HTTP process answers it without the "
                        "scheduler; SGLang's /health runs a generation, which a loaded CPU "
                        "replica can take over its 20 s limit to answer, and the router "
                        "then takes a live replica out)")
    p.add_argument("--router-args", default="", help="more sglang-router flags, as one "
                   "quoted string")
    p.add_argument("--log-dir", type=Path, default=None,
                   help="one log per part (default: a new temporary directory)")
    p.add_argument("--threads-per-replica", type=int, default=None,
                   help="torch threads of each replica (OMP_NUM_THREADS); default: this "
                        "machine's cores / N, at least 1, so N replicas do not oversubscribe "
                        "the cores (an OMP_NUM_THREADS already set is kept)")
    p.add_argument("--startup-timeout", type=float, default=900.0, help="seconds a "
                   "replica may take to answer")
    p.add_argument("replica_args", nargs=argparse.REMAINDER,
                   help="after --: flags for every `adaserve sglang serve-cpu` replica "
                        "(e.g. --baseline-ms 80 --budget 6)")


@dataclass
class Part:
    role: str  # replica | router | front
    index: int
    url: str
    proc: subprocess.Popen
    log: Path

    def line(self) -> str:
        return json.dumps({"fleet": self.role, "index": self.index, "url": self.url,
                           "pid": self.proc.pid, "log": str(self.log)})

    def stop(self) -> None:
        """SIGTERM to the part's process group, SIGKILL after 30 s; returns once the
        group's processes (SGLang's scheduler and detokenizer too) have exited."""
        stop_group(self.proc, 30.0)


def replica_ports(args: argparse.Namespace) -> list[int]:
    first = (args.port + 1 if args.port else 0) if args.replica_port is None \
        else args.replica_port
    if first == 0:
        return [free_port() for _ in range(args.replicas)]
    return [first + i for i in range(args.replicas)]


def replica_command(args: argparse.Namespace, port: int) -> list[str]:
    extra = list(args.replica_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if "--enable-metrics" not in extra:
        extra.append("--enable-metrics")
    return [sys.executable, "-m", "adaserve.cli", "sglang", "serve-cpu", *extra,
            "--host", args.host, "--port", str(port)]


def replica_env(args: argparse.Namespace, cores: int | None = None) -> dict[str, str]:
    """The replicas' environment: this one, with each replica's share of the cores as its
    torch threads. Every torch process takes all the cores by default, so two replicas on
    two cores each ran two threads a core (a 12-request batch in 118 s; 14 s with one
    thread each)."""
    env = dict(os.environ)
    if args.threads_per_replica is not None:
        env["OMP_NUM_THREADS"] = str(max(1, args.threads_per_replica))
    elif "OMP_NUM_THREADS" not in env:
        cores = cores or len(os.sched_getaffinity(0))
        env["OMP_NUM_THREADS"] = str(max(1, cores // max(1, args.replicas)))
    return env


def router_command(args: argparse.Namespace, urls: list[str], port: int,
                   metrics_port: int) -> list[str]:
    # picker: the router policy that follows the front's X-SMG-Target-Worker
    launcher, policy = (("adaserve.sglang.target_router", "random") if args.policy == PICKER
                        else ("sglang_router.launch_router", args.policy))
    return [sys.executable, "-m", launcher, "--worker-urls", *urls,
            "--policy", policy, "--host", args.host, "--port", str(port),
            "--prometheus-host", args.host, "--prometheus-port", str(metrics_port),
            "--health-check-interval-secs", str(args.health_check_interval),
            # a dead replica refuses the connection at once; a busy one on a CPU can take
            # seconds to answer at all, which must not take it out
            "--health-failure-threshold", "2", "--health-check-timeout-secs", "30",
            "--health-check-endpoint", args.health_check_endpoint,
            "--log-level", "warn",
            *shlex.split(args.router_args)]


def front_command(args: argparse.Namespace, router: str, urls: list[str],
                  port: int, pick_log: Path | None = None) -> list[str]:
    pick = ["--pick", *urls] if args.policy == PICKER else []
    if pick and pick_log is not None:
        pick += ["--pick-log", str(pick_log)]
    return [sys.executable, "-m", "adaserve.sglang.front", "--router", router, "--host",
            args.host, "--port", str(port), "--classes-from", urls[0], "--replicas", *urls,
            *pick,
            *shlex.split(args.front_args)]


def check(args: argparse.Namespace) -> str | None:
    """Why the fleet cannot start here, or None."""
    if args.replicas < 1:
        return f"--replicas must be >= 1, got {args.replicas}"
    for mod, what in (("sglang", "sglang"), ("sglang_router", "sglang-router")):
        if importlib.util.find_spec(mod) is None:
            return (f"{what} is not installed in this Python ({sys.executable}); run it from "
                    "SGLang's environment, e.g. .venv-sglang/bin/adaserve (docs/fleet.md)")
    return None


def needs_baseline(args: argparse.Namespace) -> bool:
    """Do the replicas need a baseline they were not given? Their default classes are
    multiples of the target's plain decode step, which a replica does not measure, and
    the picker weighs requests in baseline steps. Without one each replica died at
    start-up naming only environment variables; now the fleet finds one (baseline.py)."""
    from adaserve.server.slo_classes import DEFAULT_CLASSES, parse_classes

    extra = list(args.replica_args or [])
    flags = dict(zip(extra, extra[1:]))
    if "--baseline-ms" in flags or os.environ.get("ADASERVE_BASELINE_MS"):
        return False
    spec = flags.get("--slo-classes") or os.environ.get("ADASERVE_SLO_CLASSES", DEFAULT_CLASSES)
    try:
        parse_classes(spec, None)
    except ValueError:
        return True
    return args.policy == PICKER


def with_baseline(args: argparse.Namespace, env: dict[str, str], logdir: Path) -> None:
    """Add ``--baseline-ms`` to the replicas' flags: the one saved for this model and
    thread count, else measured now and saved (baseline.py); says which in one line."""
    from adaserve.sglang.cpu import baseline

    extra = [a for a in (args.replica_args or []) if a != "--"]
    path, k = baseline.saved_path(), baseline.key(extra, int(env["OMP_NUM_THREADS"]))
    ms, source = baseline.saved(path, k), str(path)
    if ms is None:
        print(json.dumps({"fleet": "measuring baseline", "how": "serve-cpu --algorithm "
                          "none, once; saved for the next start", "log": str(
                              logdir / "baseline.log")}), flush=True)
        ms, source = baseline.measure(extra, env, logdir / "baseline.log",
                                      args.startup_timeout), "measured"
        baseline.save(path, k, ms)
    print(json.dumps({"fleet": "baseline", "ms": round(ms, 3), "from": source}), flush=True)
    args.replica_args = [*extra, "--baseline-ms", f"{ms:.3f}"]


def _start(role: str, index: int, argv: list[str], url: str, log: Path,
           env: dict[str, str] | None = None) -> Part:
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    return Part(role, index, url, proc, log)


def _wait_healthy(part: Part, route: str, timeout_s: float) -> None:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if part.proc.poll() is not None:
            tail = part.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{part.role} {part.index} exited:\n{tail}")
        try:
            if httpx.get(part.url + route, timeout=30).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{part.role} {part.index} did not answer {route} in {timeout_s:.0f} s "
                       f"(log: {part.log})")


def _ready(part: Part, route: str, timeout_s: float, t0: float) -> None:
    """Wait for ``part``, then say so in its line (with the seconds since the start), so
    the minutes a CPU fleet takes to load show as they pass."""
    _wait_healthy(part, route, timeout_s)
    line = json.loads(part.line())
    print(json.dumps({**line, "ready_s": round(time.monotonic() - t0, 1)}), flush=True)


def start_routing(args: argparse.Namespace, urls: list[str], logdir: Path,
                  parts: list[Part], t0: float | None = None,
                  name: str = "") -> tuple[Part, Part, str]:
    """The router with ``args.policy`` before the replicas at ``urls``, then the SLO front
    before it, each waited for and added to ``parts`` (which the caller stops): (router,
    front, the router's metrics URL). A picking front logs its picks to
    ``picks<name>.jsonl`` in ``logdir``. ``name`` tells a further routing's logs apart
    (benchmarks/fleet/routing.py runs three routings before the same replicas)."""
    t0 = time.monotonic() if t0 is None else t0
    metrics_port = args.router_metrics_port or free_port()
    router_port = args.router_port or free_port()
    router = _start("router", 0, router_command(args, urls, router_port, metrics_port),
                    f"http://{args.host}:{router_port}", logdir / f"router{name}.log")
    parts.append(router)
    _ready(router, "/readiness", 120, t0)
    port = args.port or free_port()
    front = _start("front", 0, front_command(args, router.url, urls, port,
                                             logdir / f"picks{name}.jsonl"),
                   f"http://{args.host}:{port}", logdir / f"front{name}.log")
    parts.append(front)
    _ready(front, "/readiness", 120, t0)
    return router, front, f"http://{args.host}:{metrics_port}/metrics"


def _interrupt(signum, frame) -> None:
    """SIGTERM from whoever started the fleet stops it as Ctrl-C does."""
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    why = check(args)
    if why is not None:
        print(f"adaserve sglang fleet-cpu: {why}", file=sys.stderr)
        return 2
    logdir = args.log_dir or Path(tempfile.mkdtemp(prefix="adaserve-fleet-"))
    clean = False  # a stop asked for (Ctrl-C, SIGTERM), not a part that failed
    logdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    parts: list[Part] = []
    try:
        ports = replica_ports(args)
        urls = [f"http://{args.host}:{p}" for p in ports]
        t0 = time.monotonic()
        env = replica_env(args)
        print(json.dumps({"fleet": "starting", "replicas": args.replicas,
                          "threads_per_replica": int(env["OMP_NUM_THREADS"]),
                          "logs": str(logdir)}), flush=True)
        if needs_baseline(args):
            with_baseline(args, env, logdir)
        for i, (port, url) in enumerate(zip(ports, urls)):
            parts.append(_start("replica", i, replica_command(args, port), url,
                                logdir / f"replica{i}.log", env))
            if i == 0:  # alone first: a fresh cache is filled once
                _ready(parts[0], "/health_generate", args.startup_timeout, t0)
        for part in parts[1:]:
            _ready(part, "/health_generate", args.startup_timeout, t0)
        router, front, metrics = start_routing(args, urls, logdir, parts, t0)
        print(json.dumps({"fleet": "ready", "url": front.url, "router": router.url,
                          "router_metrics": metrics,
                          "pick_log": str(logdir / "picks.jsonl")
                          if args.policy == PICKER else None}), flush=True)
        dead: set[int] = set()
        while router.proc.poll() is None and front.proc.poll() is None:
            for part in parts:
                if part.role == "replica" and part.index not in dead and \
                        part.proc.poll() is not None:
                    dead.add(part.index)
                    print(json.dumps({"fleet": "replica exited", "index": part.index,
                                      "code": part.proc.returncode}), flush=True)
            time.sleep(1)
        for part in (p for p in (router, front) if p.proc.poll() is not None):
            print(json.dumps({"fleet": f"{part.role} exited", "code": part.proc.returncode}),
                  flush=True)
        return 1
    except KeyboardInterrupt:
        clean = True
        return 0
    except (RuntimeError, TimeoutError) as e:
        print(f"adaserve sglang fleet-cpu: {e}", file=sys.stderr)
        return 1
    finally:
        shm = shared_memory_of([p.proc.pid for p in parts])
        for part in reversed(parts):  # front and router first: nothing reaches a stopping replica
            part.stop()
        unlink_all(shm)  # what the parts' processes left behind (their semaphores)
        if args.log_dir is None:  # the logs of a temporary directory go with a clean stop
            if clean:
                shutil.rmtree(logdir, ignore_errors=True)
            else:
                print(f"adaserve sglang fleet-cpu: the parts' logs are kept in {logdir}",
                      file=sys.stderr)


class FleetProcess:
    """`adaserve sglang fleet-cpu` started as a child in its own process group, for the
    tests and the benchmark: waits for its "ready" line and keeps what its lines say
    (``url``: the front, ``router``, ``replicas`` by index, each a dict with url and pid)."""

    def __init__(self, argv: list[str], out: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, timeout_s: float = 1500.0) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "adaserve.cli", "sglang",
                                      "fleet-cpu", *argv], stdout=out.open("w"),
                                     stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                     start_new_session=True)
        while time.monotonic() - self.t0 < timeout_s:
            lines = self.lines()
            ready = [ln for ln in lines if ln["fleet"] == "ready"]
            if ready:
                self.ready_s = time.monotonic() - self.t0
                self.ready = ready[0]  # its line: the front's url, the pick log
                self.url, self.router = ready[0]["url"], next(
                    ln for ln in lines if ln["fleet"] == "router")
                self.replicas = {ln["index"]: ln for ln in lines if ln["fleet"] == "replica"}
                self.parts = [ln for ln in lines if "pid" in ln]
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"fleet-cpu exited: {out.read_text()[-4000:]}")
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"the fleet did not come up in {timeout_s:.0f} s: "
                           f"{out.read_text()[-4000:]}")

    def lines(self) -> list[dict]:
        return [json.loads(ln) for ln in self.out.read_text().splitlines()
                if ln.startswith("{")]

    def stop(self) -> None:
        """SIGTERM to the fleet, which stops its parts; SIGKILL to its group after 180 s."""
        stop_group(self.proc, 180.0)

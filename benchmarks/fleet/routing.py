"""Routing in the CPU fleet (issue 39): the SLO-aware picker against round robin and
least-load, mixed-SLO Locust runs at several rates, same trace and seed, rounds in turn:
results/fleet_routing.md (the page: routing_page.py).

One `adaserve sglang fleet-cpu --replicas 2 --policy picker` (ADASERVE replicas at the
test tier's lean settings, the default classes over ``--baseline-ms``), and before the
same two replicas two more routings, each its own sglang-router and SLO front
(``fleet.start_routing``): round robin, and least-load (sglang-router's ``power_of_two``:
with two replicas it compares both). Sharing the replicas keeps the routings on the same
processes and lets one invocation run them all in turn without a fleet start (two
minutes) each. For each rate of ``--rates``, each of ``--rounds`` rounds and each routing
(their order rotated each round, so no routing always follows the same one): the
replicas' prefix caches are flushed, then `adaserve loadgen` runs against that routing's
front (Poisson arrivals at the rate, ``--requests`` short prompts, the default class mix,
``--seed``) and waits for every request. The picking front logs each pick (picking.PickLog),
joined with the client's records by ``X-Request-Id``: what the picker predicted against
what happened.

Everything the page shows is kept in results/fleet_routing.json; ``--render`` rewrites the
page from it, measuring nothing, and ``--add`` measures more rounds into it (same settings:
a long measurement in pieces of a few minutes each). Timed: run it alone.

    .venv-sglang/bin/python -m benchmarks.fleet.routing [--rates 0.2 0.35 0.5]
        [--requests 24] [--rounds 2] [--tokens 24] [--seed 0] [--add] [--render]
        [--loadgen-python .venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.fleet.routing_page import NAME, render
from benchmarks.shared.common import RESULTS, ROOT
from benchmarks.shared.page import Made, kept

from adaserve.loadgen.records import DEFAULT_TTFT_SLO_MS, read_jsonl

ROUTINGS = {"round robin": "round_robin", "least-load": "power_of_two", "picker": "picker"}
REPLICA_ARGS = ["--max-running-requests", "8", "--max-total-tokens", "4096",
                "--steps", "3", "--topk", "2", "--draft-tokens", "4", "--budget", "6"]
MODULE = "benchmarks.fleet.routing"


class Routings:
    """The fleet (replicas, the picking router and front) and the other routings' routers
    and fronts before the same replicas: ``fronts`` by routing name; ``stop`` ends all."""

    def __init__(self, baseline_ms: float, work: Path) -> None:
        from adaserve.sglang.cpu.fleet import FleetProcess, add_args, start_routing

        self.work, self.extra = work, []
        self.fleet = FleetProcess(
            ["--replicas", "2", "--policy", "picker", "--port", "0", "--replica-port", "0",
             "--router-metrics-port", "0", "--log-dir", str(work / "fleet"), "--",
             *REPLICA_ARGS, "--baseline-ms", str(baseline_ms)], work / "fleet.out", cwd=ROOT)
        try:
            self.replicas = [self.fleet.replicas[k]["url"] for k in sorted(self.fleet.replicas)]
            self.fronts = {"picker": self.fleet.url}
            self.pick_log = Path(self.fleet.ready["pick_log"])
            for name, policy in ROUTINGS.items():
                if policy == "picker":
                    continue
                p = argparse.ArgumentParser()
                add_args(p)
                args = p.parse_args(["--policy", policy, "--port", "0",
                                     "--router-metrics-port", "0"])
                _, front, _ = start_routing(args, self.replicas, work / "fleet", self.extra,
                                            name=f"-{policy}")
                self.fronts[name] = front.url
        except BaseException:
            self.stop()
            raise

    def flush(self) -> None:
        """Empty every replica's prefix cache: a routing must not find the prompts the
        previous one left cached. SGLang flushes only an idle replica (400 otherwise): the
        run drained, but a replica may still be freeing its last request."""
        import httpx

        for url in self.replicas:
            for _ in range(60):
                if httpx.post(url + "/flush_cache", timeout=60).status_code == 200:
                    break
                time.sleep(0.5)
            else:
                raise RuntimeError(f"{url} would not flush its cache in 30 s")

    def stop(self) -> None:
        for part in reversed(self.extra):
            part.stop()
        self.fleet.stop()


def picks_since(path: Path, offset: int) -> tuple[dict[str, dict], int]:
    """The pick log's lines after byte ``offset`` by request id, and the new offset."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    lines = [json.loads(ln) for ln in data.decode().splitlines() if ln.strip()]
    return {ln["id"]: ln for ln in lines if ln.get("id")}, offset + len(data)


def requests_of(records_path: Path, picks: dict[str, dict]) -> list[dict]:
    """Each request as the client measured it, with the picker's pick where there was one:
    the replica it named (None: the router's policy chose) and its prediction there."""
    out = []
    for r in read_jsonl(records_path):
        pick = picks.get(r.request_id)
        named = None if pick is None else pick["replica"]
        pred = pick["predictions"][named] if named is not None and pick["predictions"] \
            else None
        out.append({"i": r.index, "class": r.slo_class, "status": r.status,
                    "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "attained": r.attained,
                    "e2e": r.attained_with_ttft(DEFAULT_TTFT_SLO_MS),
                    "picked": pick is not None, "replica": named,
                    "retried": None if pick is None else pick["retried"],
                    "predicted": pred})
    return out


def one_run(url: str, rate: float, args: argparse.Namespace, out: Path) -> tuple[list, Path]:
    """One loadgen run against a front: (its summary rows, its records)."""
    subprocess.run([str(args.loadgen_python), "-m", "adaserve.cli", "loadgen", "--host", url,
                    "--rate", str(rate), "--requests", str(args.requests), "--seed",
                    str(args.seed), "--prompts", "short", "--max-tokens", str(args.tokens),
                    "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   # the arrivals' span and ten minutes to drain: a run that never ends
                   # (a Locust user that failed to start waits forever) stops the benchmark
                   timeout=args.requests / rate + 600)
    return json.loads((out / "summary.json").read_text())["rows"], out / "records.jsonl"


def settings(args: argparse.Namespace) -> dict:
    """What a kept run was measured with; --add refuses to mix runs of other settings."""
    return {"replica_args": REPLICA_ARGS, "baseline_ms": args.baseline_ms,
            "requests": args.requests, "tokens": args.tokens, "seed": args.seed,
            "prompts": "short", "replicas": 2}


def measure(args: argparse.Namespace, first_round: int) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="fleet-routing-"))
    runs = []
    fleet = Routings(args.baseline_ms, work)
    try:
        offset = fleet.pick_log.stat().st_size if fleet.pick_log.exists() else 0
        names = list(ROUTINGS)
        for rate in args.rates:
            for k in range(args.rounds):
                rnd = first_round + k
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in order:
                    fleet.flush()
                    t0 = time.monotonic()
                    rows, records = one_run(fleet.fronts[name], rate, args,
                                            work / f"r{rate:g}-{rnd}-{ROUTINGS[name]}")
                    picks: dict[str, dict] = {}
                    if name == "picker" and fleet.pick_log.exists():
                        picks, offset = picks_since(fleet.pick_log, offset)
                    runs.append({"routing": name, "rate": rate, "round": rnd, "rows": rows,
                                 "wall_s": time.monotonic() - t0,
                                 "requests": requests_of(records, picks)})
                    o = next(r for r in rows if r["slo_class"] == "overall")
                    print(f"rate {rate:g} round {rnd} {name}: TPOT {_pct(o['attainment'])} "
                          f"e2e {_pct(o['attainment_ttft'])} goodput "
                          f"{o['goodput_tok_s']:.2f} tok/s", flush=True)
    finally:
        fleet.stop()
    return runs


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", type=float, nargs="+", default=[0.2, 0.35, 0.5],
                   help="requests/s, each run at every routing and round")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--baseline-ms", type=float, default=80.0)
    p.add_argument("--loadgen-python", type=Path, default=ROOT / ".venv/bin/python",
                   help="the Python that runs `adaserve loadgen` (Locust: the main venv; "
                        "SGLang's venv, which runs this, has none)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the page and JSON go")
    p.add_argument("--add", action="store_true",
                   help="add these rounds to the kept runs (same settings) instead of "
                        "replacing them")
    p.add_argument("--render", action="store_true",
                   help="rewrite the page from results/fleet_routing.json, measuring nothing")
    args = p.parse_args(argv)
    if args.render:
        data = kept(NAME, args.out)
    else:
        made = Made.now(MODULE).to_dict()
        old = kept(NAME, args.out) if args.add else None
        if old is not None and old["settings"] != settings(args):
            raise SystemExit(f"--add: the kept runs were measured with {old['settings']}, "
                             f"not {settings(args)}")
        first = 0 if old is None else 1 + max(r["round"] for r in old["runs"])
        runs = measure(args, first)
        if old is None:
            data = {**made, "settings": settings(args), "pieces": [made], "runs": runs}
        else:
            data = {**old, "pieces": [*old["pieces"], made], "runs": [*old["runs"], *runs]}
        (args.out / f"{NAME}.json").write_text(json.dumps(data, indent=1) + "\n")
    text = render(data)
    (args.out / f"{NAME}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

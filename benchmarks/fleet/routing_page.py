"""The page of benchmarks/fleet/routing.py, rendered from its kept data alone
(results/fleet_routing.json), so ``--render`` rewrites it without measuring.

Attainment is read both ways (the project's standard): TPOT within its SLO, and end to end
(the TTFT within the TTFT SLO the replica reported for the request too). Each cell over
rounds is the median with the range [min-max] beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from benchmarks.shared.page import Made, table

NAME = "fleet_routing"
GOAL_POINTS = 5.0  # issue 39: the picker beats round robin by >= 5 points at the top rate


def spread(vals: Sequence[float | None], scale: float = 1.0, digits: int = 1) -> str:
    """``median [min-max]`` of the values present (the median alone where they are equal
    as shown; "-" for none)."""
    xs = [scale * v for v in vals if v is not None]
    if not xs:
        return "-"
    med, lo, hi = (f"{v:.{digits}f}" for v in (statistics.median(xs), min(xs), max(xs)))
    return med if lo == hi else f"{med} [{lo}-{hi}]"


def _row(run: dict, cls: str) -> dict | None:
    return next((r for r in run["rows"] if r["slo_class"] == cls), None)


def _cells(runs: list[dict], cls: str, get: Callable[[dict], float | None],
           scale: float = 1.0, digits: int = 1) -> str:
    return spread([get(r) for r in (_row(run, cls) for run in runs) if r is not None],
                  scale, digits)


def _median(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in (_row(run, "overall") for run in runs) if r and r[key] is not None]
    return 100 * statistics.median(xs) if xs else None


def _by(data: dict) -> tuple[list[float], list[str], list[str], dict]:
    runs = data["runs"]
    rates = sorted({r["rate"] for r in runs})
    routings = list(dict.fromkeys(r["routing"] for r in runs))
    classes = list(dict.fromkeys(row["slo_class"] for r in runs for row in r["rows"]))
    grid: dict[tuple[str, float], list[dict]] = {}
    for r in runs:
        grid.setdefault((r["routing"], r["rate"]), []).append(r)
    return rates, routings, classes, grid


def attainment_tables(data: dict) -> list[str]:
    rates, routings, classes, grid = _by(data)
    lines = []
    for rate in rates:
        n = max(len(grid.get((rt, rate), [])) for rt in routings)
        lines += [f"## {rate:g} requests/s ({n} round{'s' * (n != 1)})", ""]
        rows = []
        for rt in routings:
            runs = grid.get((rt, rate), [])
            for cls in classes:
                rows.append([rt, cls,
                             _cells(runs, cls, lambda r: r["attainment"], 100),
                             _cells(runs, cls, lambda r: r["attainment_ttft"], 100),
                             _cells(runs, cls, lambda r: r["ttft_ms"]["p50"], 1, 0),
                             _cells(runs, cls, lambda r: r["ttft_ms"]["p99"], 1, 0),
                             _cells(runs, cls, lambda r: r["tpot_ms"]["p50"], 1, 0),
                             _cells(runs, cls, lambda r: r["goodput_tok_s"], 1, 2)])
        lines += table(["routing", "class", "attainment % (TPOT)", "end to end % (+TTFT)",
                        "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "goodput tok/s"], rows,
                       "llrrrrrr") + [""]
    return lines


def goal(data: dict) -> list[str]:
    """The issue's goal at the highest rate, both readings, against both other routings."""
    rates, routings, _, grid = _by(data)
    top = rates[-1]
    pick = grid.get(("picker", top), [])
    lines = [f"## The goal: the picker >= {GOAL_POINTS:g} points over round robin at the "
             f"highest rate ({top:g} requests/s)", ""]
    for key, reading in (("attainment", "TPOT"), ("attainment_ttft", "end to end")):
        ours = _median(pick, key)
        for other in (rt for rt in routings if rt != "picker"):
            theirs = _median(grid.get((other, top), []), key)
            if ours is None or theirs is None:
                continue
            d = ours - theirs
            verdict = ("met" if d >= GOAL_POINTS else "not met") if other == "round robin" \
                else "for reference"
            lines.append(f"- {reading}: picker {ours:.1f}% against {other} {theirs:.1f}% "
                         f"(medians over rounds, all classes): {d:+.1f} points, {verdict}")
    return lines + [""]


def _share(reqs: list[dict], test: Callable[[dict], bool]) -> str:
    got = [r for r in reqs if test(r)]
    return "-" if not got else f"{sum(bool(r['e2e']) for r in got)}/{len(got)}"


def predictions(data: dict) -> list[str]:
    """The picker's predictions against what the client measured, per rate and class,
    pooled over rounds."""
    rates, _, classes, grid = _by(data)
    lines = ["## The picker's predictions against what happened", "",
             "Pooled over rounds. *named*: requests the picker named a replica for (the "
             "rest went by the router's policy: the reports were stale or missing); *predicted "
             "to attain*: its margin on the replica it named was >= 1, with how many of those "
             "attained end to end; *predicted to miss*: margin < 1 on every replica. TTFT and "
             "TPOT: the median predicted on the named replica against the median the client "
             "measured, over the named requests that finished.", ""]
    rows = []
    for rate in rates:
        reqs = [q for run in grid.get(("picker", rate), []) for q in run["requests"]]
        for cls in [c for c in classes if c != "overall"] + ["overall"]:
            rs = [q for q in reqs if cls == "overall" or q["class"] == cls]
            named = [q for q in rs if q["replica"] is not None and q["predicted"]]
            if not rs:
                continue
            ok = [q for q in named if q["status"] == "ok"]
            per = [sum(q["replica"] == k for q in named) for k in (0, 1)]
            rows.append([
                f"{rate:g}", cls, len(rs), len(named), f"{per[0]} / {per[1]}",
                _share(named, lambda q: q["predicted"]["margin"] >= 1),
                _share(named, lambda q: q["predicted"]["margin"] < 1),
                spread([q["predicted"]["ttft_ms"] for q in ok], 1, 0) + " / "
                + spread([q["ttft_ms"] for q in ok], 1, 0),
                spread([q["predicted"]["tpot_ms"] for q in ok], 1, 0) + " / "
                + spread([q["tpot_ms"] for q in ok], 1, 0)])
    return lines + table(["rate", "class", "requests", "named", "replica 0 / 1",
                          "predicted to attain: attained", "predicted to miss: attained",
                          "TTFT ms predicted / measured", "TPOT ms predicted / measured"],
                         rows, "llrrrrrrr") + [""]


def each_run(data: dict) -> list[str]:
    rows = []
    for r in sorted(data["runs"], key=lambda r: (r["rate"], r["round"])):
        o = _row(r, "overall")
        rows.append([f"{r['rate']:g}", r["round"], r["routing"], o["sent"], o["ok"],
                     spread([o["attainment"]], 100), spread([o["attainment_ttft"]], 100),
                     f"{o['goodput_tok_s']:.2f}", f"{r['wall_s']:.0f}"])
    return ["## Each run (all classes)", "", *table(
        ["rate", "round", "routing", "sent", "ok", "TPOT %", "end to end %", "goodput tok/s",
         "wall s"], rows, "lllrrrrrr"), ""]


def render(data: dict) -> str:
    s = data["settings"]
    lines = Made.of(data).header(
        "Routing in the CPU fleet: the SLO-aware picker, round robin, least-load",
        "; run alone: no other work on the machine")
    lines = lines[:-1] + [f"- more rounds added: `{p['command']}` at {p['date']} UTC, "
                          f"commit {p['commit']}" for p in data["pieces"][1:]] + [""]
    lines += [
        f"Two replicas, `adaserve sglang fleet-cpu --replicas 2 --policy picker -- "
        f"{' '.join(s['replica_args'])} --baseline-ms {s['baseline_ms']:g}` (a thread each; "
        "default classes: urgent x1, moderate x2.4, relaxed x8 of the baseline, TTFT SLOs "
        "the replicas' own), and before the same two replicas round robin and least-load "
        "(sglang-router's round_robin and power_of_two, each with its own SLO front). Load: "
        f"`adaserve loadgen --rate R --requests {s['requests']} --seed {s['seed']} --prompts "
        f"{s['prompts']} --max-tokens {s['tokens']}` (Poisson, the default class mix: the "
        "same requests and times for every routing), the routings in turn (their order "
        "rotated each round), the replicas' prefix caches flushed before each run. The "
        "picker's reports hold a replica's last 30 s of finished requests, which may include "
        "the previous routing's.", "",
        "Attainment: TPOT within its SLO / requests sent with an SLO (refused or failed: "
        "missed); end to end: the TTFT within the TTFT SLO the replica reported too. Each "
        "cell: median over rounds [min-max].", ""]
    lines += goal(data) + attainment_tables(data) + predictions(data) + each_run(data)
    return "\n".join(lines)

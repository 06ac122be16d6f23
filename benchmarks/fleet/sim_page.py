"""The page of simulated fleets (results/sim/fleet.md, benchmarks/fleet/sim.py): its
tables, the goals computed, and where the SLO-aware routers' gain goes."""

from __future__ import annotations

import datetime as dt
import shlex
import sys

from benchmarks.shared.common import commit, machine
from benchmarks.paper.kit import KIT_REF, LLAMA
from benchmarks.paper.runs import TTFT_SLO_MS

TRACE = "fig8_9_rps{x}_ol256.csv"
TOP = ("4.6", "4.8")  # Fig. 8's two highest rates (one trace)
TUNE_TRACE = "fig10_rps4.0_prop0.6.csv"
TUNED_WHAT = {"slo-spill": "cap", "picker": "capacity", "class-affinity": "slack"}
# routers with one parameter, tuned on TUNE_TRACE at N replicas: slo-spill's cap, the
# picker's capacity (both in SLO demand a replica serves), class-affinity's slack (requests
# in flight, at N = 4: a split of 2 + 2)
TUNED = (("slo-spill", (10, 15, 20, 25, 30, 40), 2),
         ("picker", (10, 15, 20, 30, 45, 60), 2),
         ("class-affinity", (0, 2, 4, 8, 16, 32, 64), 4))
GOAL_SHARE = 0.95  # N replicas hold >= 0.95 x N x one replica's rate at 90% attainment
GOAL_POINTS = 5.0  # an SLO-aware router beats round robin by >= 5 points at TOP
TARGET = 90.0


def crossing(rates: list[float], att: list[float], target: float = TARGET) -> float | None:
    """The per-replica rate where attainment falls through ``target``, linear between the
    two points around the first fall; None if it never falls (or starts below)."""
    if att[0] < target:
        return None
    for (r0, a0), (r1, a1) in zip(zip(rates, att), zip(rates[1:], att[1:])):
        if a1 < target <= a0:
            return r0 + (a0 - target) / (a0 - a1) * (r1 - r0)
    return None


def render(args, ns, rates, routers, top_routers, top_rates, grid, tunings, wall_s):
    cap, slack, capacity_ = (tunings[r][0] for r in ("slo-spill", "class-affinity", "picker"))
    att = lambda n, r, x: grid[n, r, x]["classes"]["overall"]["attainment"]  # noqa: E731
    e2e = lambda n, r, x: grid[n, r, x]["classes"]["overall"]["attainment_e2e"]  # noqa: E731
    good = lambda n, r, x: grid[n, r, x]["classes"]["overall"]["goodput"]  # noqa: E731
    name = lambda n, r: "one replica" if n == 1 else r  # noqa: E731
    cmd = "python -m benchmarks.fleet.sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    sim_s = sum(v["wall_s"] for v in grid.values())
    tuned_text = " ".join(
        f"{router}'s {TUNED_WHAT[router]}, tuned at N = {n} on `{TUNE_TRACE}` (not a Fig. 8 "
        "trace): " + ", ".join(f"{c:g}: {a:.1f}%" for c, a in tunings[router][1])
        + f" -> **{tunings[router][0]:g}**." for router, _, n in TUNED)
    lines = [
        "# Simulated fleets: N replicas behind a router, the authors' traces at N x their rate",
        "",
        f"- command: `{cmd}` ({len(grid)} points, {sim_s / 60:.0f} min of simulation kept "
        f"under results/sim/fleet-runs/; this invocation {wall_s / 60:.1f} min)",
        f"- machine: {machine()}",
        f"- date: {dt.date.today().isoformat()}, commit {commit()}",
        f"- set-up: {LLAMA.title}: deployment `{LLAMA.deployment}` (the figure pages' "
        "set-up: adaserve/sim/data/setups/, docs/sim.md's choice table), outputs ending "
        "at EOS, which no policy or router knows before it comes (the client's cap is "
        f"all they read); policy `{args.policy}` on every replica; acceptance seeds "
        f"{args.seeds}",
        f"- workload: the authors' `{KIT_REF}/traces/{TRACE.format(x='<x>')}`; for N "
        "replicas each trace is played N times back to back, each N times faster "
        "(adaserve/sim/scale.py): N x its rate over the same 360 s. Rates below are per "
        "replica (the trace's own); the fleet's is N x that. The kit's twins (2.6 = 2.4, "
        "3.4 = 3.2, 4.0 = 3.8, 4.8 = 4.6, byte for byte) are one set of runs. Past the "
        f"highest trace, the same trace again at {args.overloads} x its rate (every "
        "arrival time divided: benchmarks/fleet/runs.py, `speed`), where one replica no "
        "longer holds 90% end to end",
        "- attainment, two readings: TPOT within its SLO (the paper's), and end to end: "
        f"TTFT within {TTFT_SLO_MS / 1000:g} s too. Drain: the simulated time to serve "
        "the whole trace over the time its last request arrives (1.0: the fleet keeps up)",
        "- each replica is the engine's own scheduling loop (EngineCore on the simulated "
        "executor) with its own virtual clock; the fleet is a discrete-event loop over "
        "arrivals and iteration ends (adaserve/sim/fleet.py). A router knows what a real "
        "one knows: its in-flight requests per replica and each request's SLO, and the "
        "picker the reports a real replica serves (adaserve/sim/routers.py). One point as a "
        f"command: `adaserve simulate --setup {LLAMA.deployment} --trace "
        f"{KIT_REF}/traces/fig8_9_rps<x>_ol256.csv --policies {args.policy} --replicas N "
        "--rate-scale N --router <router>`",
        "- this page is the policy as it is at the commit above: re-run it after a change "
        "to the policy (runs keyed on the scheduling code re-run themselves)",
        "",
        "## Routers",
        "",
        "| router | what it keys on | in sglang-router 0.3.2 |",
        "|---|---|---|",
        "| round-robin | nothing | `--policy round_robin` |",
        "| random | nothing | `--policy random` |",
        "| power-of-two | in-flight requests of two random replicas | `--policy power_of_two` |",
        "| least-load | in-flight requests, all replicas | no policy of its own (cache_aware "
        "falls back to it past its imbalance thresholds) |",
        "| slo-aware | in-flight SLO demand (a request weighs baseline / its TPOT SLO; best "
        "effort 0.1) | no: no policy reads a request's SLO; prototype only |",
        f"| slo-spill:{cap:g} | slo-aware while a replica stays under the cap; past it on "
        "every replica, to the one with the most demand (one replica takes the overflow) | "
        "no; prototype only |",
        f"| picker:{capacity_:g} | the fleet's SLO-aware endpoint picker (adaserve/picker, "
        "the code the CPU fleet's front runs): each replica's predicted TPOT and TTFT "
        "margin for this request, from its report (requests per class waiting and "
        "decoding, recent TPOT and TTFT); the capacity is the SLO demand one replica "
        "serves | `adaserve sglang fleet-cpu --policy picker` (the front names the "
        "replica; docs/fleet.md) |",
        "| class-split | the request's class: tight SLOs (<= 1.25 x baseline) to half the "
        "replicas, the rest to the other half, least-load within | only by a client or "
        "gateway choosing the replica (`--policy manual` with `X-SMG-Target-Worker`) |",
        f"| class-affinity:{slack:g} | class-split, but a request crosses to the other set "
        "when its own set's least-loaded replica has more than the slack in flight beyond "
        "the other set's | as class-split (the gateway would need the replicas' loads) |",
        "",
        tuned_text,
        "",
    ]
    head = "| N | router | " + " | ".join(rates) + " |"
    sep = "|---|---|" + "---|" * len(rates)
    for title, fn, fmt in (("Attainment (%), TPOT within its SLO, overall", att, "{:.1f}"),
                           ("Attainment (%), end to end (TTFT too), overall", e2e, "{:.1f}"),
                           ("Goodput (tok/s), the whole fleet", good, "{:.0f}")):
        lines += [f"## {title}", "", head, sep]
        for n in ns:
            for r in (["round-robin"] if n == 1 else routers + top_routers):
                cells = [fmt.format(fn(n, r, x)) if (n, r, x) in grid else ""
                         for x in rates]
                lines.append(f"| {n} | {name(n, r)} | " + " | ".join(cells) + " |")
        lines.append("")
    # capacity at 90%, on both readings: a replica that defers what it cannot serve in
    # time keeps TPOT attainment high past saturation while its queue grows, which only
    # the end-to-end reading sees
    readings = (("TPOT", att), ("end to end", e2e))
    xs = [float(x) for x in rates]
    one = {k: crossing(xs, [fn(1, "round-robin", x) for x in rates]) if 1 in ns else None
           for k, fn in readings}
    capacity = {(k, n, r): crossing(xs, [fn(n, r, x) for x in rates])
                for k, fn in readings for n in ns if n > 1 for r in routers}
    fmt2 = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines += ["## Rate held at 90% attainment", "",
              "Per-replica rate where attainment falls through 90%, linear between the two "
              "rates around it (-: it does not fall through 90% in the rates run); the "
              "fleet holds N x that. Against N x one replica's: "
              + "; ".join(f"{k} {fmt2(one[k])} req/s" for k, _ in readings) + ".", "",
              "| N | router | " + " | ".join(
                  f"{k}: per replica | fleet | / (N x one replica's)" for k, _ in readings)
              + " |", "|---|---|" + "---|" * (3 * len(readings))]
    for n in ns:
        if n == 1:
            continue
        for r in routers:
            cells = []
            for k, _ in readings:
                c = capacity[k, n, r]
                cells += [fmt2(c), fmt2(None if c is None else n * c),
                          "-" if c is None or one[k] is None else f"{c / one[k]:.3f}"]
            lines.append(f"| {n} | {r} | " + " | ".join(cells) + " |")
    lines.append("")
    # per class and per replica at the top rates
    x_top = top_rates[-1]
    cls = [c for c in grid[1, "round-robin", x_top]["classes"] if c != "overall"]
    lines += [f"## At {x_top} req/s per replica, the highest rate run",
              "", "Attainment per class, TPOT / end to end (%); TTFT p50 / p99 overall; per "
              "replica: the lowest and highest replica's TPOT attainment.", "",
              "| N | router | overall | " + " | ".join(cls)
              + " | TTFT p50 / p99 s | drain | replicas min / max |",
              "|---|---|---|" + "---|" * (len(cls) + 3)]
    for n in ns:
        for r in (["round-robin"] if n == 1 else routers + top_routers):
            g = grid[n, r, x_top]
            both = lambda v: f"{v['attainment']:.1f} / {v['attainment_e2e']:.1f}"  # noqa: E731
            o = g["classes"]["overall"]
            lines.append(f"| {n} | {name(n, r)} | {both(o)} | "
                         + " | ".join(both(g["classes"][c]) for c in cls)
                         + f" | {o['ttft_p50_ms'] / 1000:.1f} / {o['ttft_p99_ms'] / 1000:.1f} "
                         f"| {g['drain']:.2f} | {min(g['replicas']):.1f} / "
                         f"{max(g['replicas']):.1f} |")
    lines.append("")
    # goals
    multi = [n for n in ns if n > 1]
    lines += ["## Goals, computed", ""]
    for k, _ in readings:
        for n in multi:
            got = {r: capacity[k, n, r] for r in routers if capacity[k, n, r] is not None}
            if not got or one[k] is None:
                lines.append(f"- N = {n}, {k}: no 90% crossing in the rates run"
                             + ("" if one[k] is not None else " for one replica")
                             + ": not computed")
                continue
            best = max(got, key=got.get)
            c = got[best]
            ok = c / one[k] >= GOAL_SHARE
            lines.append(f"- N = {n}, {k}, best router {best}: {n * c:.2f} req/s at 90% = "
                         f"{c / one[k]:.3f} x N x one replica's ({one[k]:.2f}): "
                         f"{'met' if ok else 'not met'} (goal >= {GOAL_SHARE})")
    slo_routers = [r for r in routers + top_routers
                   if r.startswith(("slo-", "class-", "picker"))]
    for n in multi:
        for x in top_rates:
            which = ("past one replica's 90% end to end" if float(x) > float(TOP[0]) else
                     f"Fig. 8's two highest, {TOP[0]} and {TOP[1]} (one trace)")
            rr = att(n, "round-robin", x)
            best = max(slo_routers, key=lambda r: att(n, r, x) if (n, r, x) in grid else -1)
            d = att(n, best, x) - rr
            pk = next((r for r in slo_routers if r.startswith("picker")), None)
            picked = "" if pk is None or (n, pk, x) not in grid else (
                f"; the picker {att(n, pk, x) - rr:+.1f} (TPOT), "
                f"{e2e(n, pk, x) - e2e(n, 'round-robin', x):+.1f} (end to end)")
            lines.append(f"- N = {n}, {x} req/s per replica ({which}): best SLO-aware "
                         f"router {best} {att(n, best, x):.1f}% vs round robin {rr:.1f}%: "
                         f"{d:+.1f} points "
                         f"({'met' if d >= GOAL_POINTS else 'not met'}, goal >= "
                         f"+{GOAL_POINTS:g}){picked}")
    lines.append("")
    lines += why_not(ns, rates, slo_routers, x_top, grid, one, att)
    data = {"command": cmd, "date": dt.date.today().isoformat(), "commit": commit(),
            "machine": machine(), "tunings": tunings, "rates": rates,
            "one_replica_90": one,
            "capacity_90": {f"{k}/{n}/{r}": c for (k, n, r), c in capacity.items()},
            "grid": {f"{n}/{r}/{x}": v for (n, r, x), v in grid.items()}}
    return "\n".join(lines) + "\n", data


def _rate_at(rates: list[str], att: list[float], target: float) -> str:
    """The per-replica rate where one replica's attainment falls through ``target``."""
    c = crossing([float(r) for r in rates], att, target)
    return f"{c:.2f} req/s" if c is not None else f"below {rates[0]} req/s"


READING = {"TPOT": "on the TPOT reading", "end to end": "end to end"}


def _holds(one: dict, x: str) -> str:
    """What one replica holds at 90% on each reading, against the top rate ``x``."""
    said = [f"{READING[k]} up to {c:.2f} req/s ({float(x) / c:.3f}x that is asked of each "
            f"replica at {x})" if c is not None else f"{READING[k]} past every rate run"
            for k, c in one.items()]
    return "One replica holds 90% " + "; ".join(said) + "."


LOAD_ONLY = ("least-load", "power-of-two")  # routers that even out in-flight counts only


def why_not(ns, rates, slo_routers, x, grid, one, att) -> list[str]:
    """Where the SLO-aware routers' gain goes at the top rate, decomposed from the runs:
    what one replica can hold, what evening out the load is worth (the load-only routers
    over round robin) and what choosing by SLO adds on top (SLO-aware over the best
    load-only router)."""
    multi = [n for n in ns if n > 1]
    if not multi or one["TPOT"] is None and one["end to end"] is None:
        return []
    cls = [c for c in grid[1, "round-robin", x]["classes"] if c != "overall"]
    have = lambda n, r: (n, r, x) in grid  # noqa: E731
    lines = [f"## Why the SLO-aware routers gain little at {x} req/s per replica", "",
             _holds(one, x) + " A router moves requests between replicas of "
             "the same speed: it cannot add capacity. It can change two things, and the "
             "runs measure each: how evenly the load falls (round robin's replicas spread; "
             "the load-only routers remove that spread) and which requests share a batch "
             "(the SLO-aware routers, over the best load-only router).", "",
             "| N | round robin | its replicas min / max | best load-only | gain | "
             "best SLO-aware | gain over load-only | " + " | ".join(
                 f"{c}: rr / best" for c in cls) + " | one replica attains rr + "
             f"{GOAL_POINTS:g} up to |",
             "|---|---|---|---|---|---|---|" + "---|" * (len(cls) + 1)]
    one_curve = [att(1, "round-robin", r) for r in rates]
    gains, over_load = [], []
    for n in multi:
        rr = grid[n, "round-robin", x]
        lo = max((r for r in LOAD_ONLY if have(n, r)), key=lambda r: att(n, r, x),
                 default=None)
        sl = max((r for r in slo_routers if have(n, r)), key=lambda r: att(n, r, x),
                 default=None)
        if lo is None or sl is None:
            continue
        gains.append(att(n, sl, x) - att(n, "round-robin", x))
        over_load.append((n, att(n, sl, x) - att(n, lo, x)))
        best = grid[n, sl, x]
        lines.append(
            f"| {n} | {att(n, 'round-robin', x):.1f} | {min(rr['replicas']):.1f} / "
            f"{max(rr['replicas']):.1f} | {lo} {att(n, lo, x):.1f} | "
            f"{att(n, lo, x) - att(n, 'round-robin', x):+.1f} | {sl} {att(n, sl, x):.1f} | "
            f"{att(n, sl, x) - att(n, lo, x):+.1f} | " + " | ".join(
                f"{rr['classes'][c]['attainment']:.1f} / {best['classes'][c]['attainment']:.1f}"
                for c in cls)
            + f" | {_rate_at(rates, one_curve, att(n, 'round-robin', x) + GOAL_POINTS)} |")
    if not gains:  # no N ran both a load-only and an SLO-aware router at x
        return []
    ns_run = [n for n, _ in over_load]
    lines += ["",
              "Each replica runs AdaServe, whose SLO phase serves every request's need "
              "before the goodput phase, so a relaxed request (about baseline / SLO of a "
              "token per iteration) costs the tight requests in its batch little. Choosing "
              "by SLO gains over the best load-only router "
              + " / ".join(f"{g:+.1f}" for _, g in over_load) + " points at N = "
              + " / ".join(str(n) for n in ns_run) + ": the lever that grows with N is "
              "keeping the classes apart (class-split, class-affinity), as a split's sets "
              "can then follow the classes' shares of the traffic; weighing requests by SLO "
              "demand (slo-aware, slo-spill) moves little once the load is even. Over every "
              f"N and SLO-aware router run, the largest gain over round robin at {x} is "
              f"{max(gains):+.1f} points. The last column is the rate at which one replica "
              f"attains round robin's figure + {GOAL_POINTS:g}: to meet the goal, every "
              f"replica, given {x} req/s, would have to serve as one replica serves that "
              "lower rate: the difference is capacity, which routing only reaches through "
              "the batch mix measured here.", ""]
    return lines

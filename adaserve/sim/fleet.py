"""A simulated fleet (issue 28): N replicas, each the engine's own scheduling loop
(EngineCore over a SimExecutor, built as `adaserve simulate` builds one server), behind a
router that sends each request to one of them on arrival.

Each replica keeps its own virtual clock. The fleet is a discrete-event loop over two kinds
of event: an arrival, which the router places, and the end of a replica's iteration. It
always handles the earliest: an arrival at t is placed before any replica starts an
iteration at t or later (a replica sees it at its next iteration start, as one server sees
arrivals during an iteration), and among replicas the one whose clock is furthest behind
steps next. A replica idle since before t starts at t; one still busy at t (its last
iteration ends after t) takes the request when that iteration ends.

The router learns of a finish when it happens: a request that finishes at the end of an
iteration still in flight at t counts as in flight at t."""

from __future__ import annotations

import heapq
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm import tqdm

from adaserve.engine.core import EngineCore
from adaserve.loadgen.records import Record
from adaserve.sim.clock import VirtualClock
from adaserve.sim.driver import SimSetup, _add, _update, build
from adaserve.sim.routers import ReplicaLoad, make_router, slo_weight
from adaserve.sim.workload import SimRequest


@dataclass(frozen=True, slots=True)
class FleetRun:
    policy: str
    router: str
    replicas: int
    seed: int
    records: list[Record]  # one per request, by index
    replica_of: dict[int, int]  # request index -> replica
    iterations: list[int]  # per replica
    simulated_s: float  # virtual time at the last finish
    wall_s: float

    def of_replica(self, k: int) -> list[Record]:
        return [r for r in self.records if self.replica_of[r.index] == k]

    def headline(self) -> str:
        per = "/".join(str(sum(1 for v in self.replica_of.values() if v == k))
                       for k in range(self.replicas))
        return (f"{self.policy}, {self.replicas} replicas, router {self.router} (seed "
                f"{self.seed}): {len(self.records)} requests ({per} per replica), "
                f"{sum(self.iterations)} iterations, {self.simulated_s:.1f} s simulated in "
                f"{self.wall_s:.1f} s wall")


class _Replica:
    def __init__(self, core: EngineCore, clock: VirtualClock) -> None:
        self.core, self.clock = core, clock
        self.in_flight = 0
        self.demand = 0.0
        self.iterations = 0
        self.held: set[int] = set()  # request indices in flight, as the router knows
        self.finished: list[Record] = []  # as the router learnt of them, oldest first

    def report(self, t: float, records: dict[str, Record], reqs: dict[int, SimRequest]):
        """What a real replica's ``GET /adaserve/load`` would say at ``t``: its requests
        per SLO, waiting for a first token or decoding, and its recently finished ones."""
        from adaserve.picker.report import RECENT_S, ClassLoad, ReplicaReport, recent

        groups: dict[tuple[str, float | None], list[int]] = {}
        for idx in self.held:
            r = reqs[idx]
            first = records[str(idx)].first_token_s
            g = groups.setdefault((r.slo_class, r.slo_ms), [0, 0])
            g[first is not None and first <= t] += 1
        done = [(rec.slo_class, rec.tpot_ms, rec.ttft_ms) for rec in self.finished
                if rec.finished_s is not None and rec.finished_s >= t - RECENT_S]
        return ReplicaReport(t, tuple(ClassLoad(c, ms, w, run)
                                      for (c, ms), (w, run) in groups.items()),
                             recent(done))


def simulate_fleet(setup: SimSetup, requests: Sequence[SimRequest], replicas: int,
                   router: str, seed: int = 0, progress: bool = False) -> FleetRun:
    """Route ``requests`` over ``replicas`` copies of the simulated server ``setup``.
    Request i gets the sampling seed (seed << 32) + i whichever replica serves it, so
    routers are compared on the same drafts and targets; the router's own randomness
    (random, power-of-two) is seeded by ``seed`` too. ValueError for an unknown router."""
    if not requests:
        raise ValueError("no requests to simulate")
    rt = make_router(router, replicas, seed)
    reads_reports = getattr(rt, "reads_reports", False)
    baseline_ms = setup.hardware.baseline_latency_ms
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    fleet = [_Replica(*build(setup, max_context=longest, max_waiting=len(requests)))
             for _ in range(replicas)]
    order = sorted(requests, key=lambda r: (r.t, r.index))
    weight = {r.index: slo_weight(r.slo_ms, baseline_ms) for r in order}
    by_index = {r.index: r for r in order}
    records: dict[str, Record] = {}
    replica_of: dict[int, int] = {}
    finishes: list[tuple[float, int, int]] = []  # (time, replica, request index), a heap
    i, done = 0, 0
    t0 = time.perf_counter()
    with tqdm(total=len(order), desc=f"{router} x{replicas}", unit="req", leave=False,
              disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        while i < len(order) or any(rep.core.has_work for rep in fleet):
            busy = [rep for rep in fleet if rep.core.has_work]
            nxt = min(busy, key=lambda rep: rep.clock.now()) if busy else None
            if i < len(order) and (nxt is None or order[i].t <= nxt.clock.now()):
                req = order[i]
                while finishes and finishes[0][0] <= req.t:  # what the router knows at t
                    _, k, idx = heapq.heappop(finishes)
                    fleet[k].in_flight -= 1
                    fleet[k].demand -= weight[idx]
                    if reads_reports:
                        fleet[k].held.discard(idx)
                        fleet[k].finished.append(records[str(idx)])
                if reads_reports:
                    from adaserve.picker.report import Ask

                    k = rt.choose_reported(Ask(req.slo_class, req.slo_ms), [
                        rep.report(req.t, records, by_index) for rep in fleet], req.t,
                        baseline_ms)
                else:
                    k = rt.choose(weight[req.index], [ReplicaLoad(rep.in_flight, rep.demand)
                                                      for rep in fleet])
                rep = fleet[k]
                rep.clock.advance_to(req.t)
                rep.in_flight += 1
                rep.demand += weight[req.index]
                if reads_reports:
                    rep.held.add(req.index)
                replica_of[req.index] = k
                _add(rep.core, req, records, seed)
                i += 1
                continue
            outputs = nxt.core.step()
            nxt.iterations += 1
            now = nxt.clock.now()
            k = fleet.index(nxt)
            for out in outputs:
                if _update(records[out.request_id], out, now):
                    done += 1
                    heapq.heappush(finishes, (now, k, int(out.request_id)))
            bar.update(done - bar.n)
    ends = [r.finished_s for r in records.values() if r.finished_s is not None]
    return FleetRun(setup.policy, router, replicas, seed,
                    sorted(records.values(), key=lambda r: r.index), replica_of,
                    [rep.iterations for rep in fleet], max(ends, default=0.0),
                    time.perf_counter() - t0)

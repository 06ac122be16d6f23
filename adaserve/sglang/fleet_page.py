"""The fleet view on the SLO front (issue 39): ``GET /fleet`` (a page, static/fleet.html)
and ``GET /fleet/data`` (what it draws), per SLO class, for the fleet and for each
replica: requests finished since the replicas started, attainment read both ways the
project reads it (TPOT within its SLO; TTFT within its SLO; end to end, every objective
the request had), the recent median TPOT and TTFT, and the requests in flight.

Everything comes from the replicas' own reports (``GET /adaserve/load``, load.py): the
fleet's tallies are the replicas' added up, so a replica's count shows in the fleet's
row as it finished it; a replica that does not answer shows so and adds nothing. The
front reads the reports when the page asks (a picking front's poll holds fresh ones
already, and those are used).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from adaserve.picker.report import ClassTally, ReplicaReport, from_json

PAGE = Path(__file__).with_name("static") / "fleet.html"


def _ratio(met: int, of: int) -> float | None:
    return met / of if of else None


def class_row(tally: ClassTally, report: ReplicaReport | None = None) -> dict:
    """One class's row: its counts, its attainment each way (None: no request of the class
    had that objective), and, for a replica, its recent medians and requests in flight."""
    row = {"slo_class": tally.slo_class, "finished": tally.finished,
           "tpot": _ratio(tally.tpot_met, tally.tpot_of), "tpot_of": tally.tpot_of,
           "ttft": _ratio(tally.ttft_met, tally.ttft_of), "ttft_of": tally.ttft_of,
           "e2e": _ratio(tally.met, tally.met_of), "e2e_of": tally.met_of}
    if report is not None:
        recent = report.recent_of(tally.slo_class)
        loads = [ld for ld in report.loads if ld.slo_class == tally.slo_class]
        row.update(recent_tpot_ms=None if recent is None else recent.tpot_ms,
                   recent_ttft_ms=None if recent is None else recent.ttft_ms,
                   waiting=sum(ld.waiting for ld in loads),
                   running=sum(ld.running for ld in loads))
    return row


def _classes(reports: Sequence[ReplicaReport | None], order: Sequence[str]) -> list[str]:
    """The classes to show: the fleet's configured ones in their order, then any other a
    replica reported (a request's own TPOT SLO reports as its class's name)."""
    seen = [t.slo_class for r in reports if r is not None for t in r.totals]
    seen += [ld.slo_class for r in reports if r is not None for ld in r.loads]
    return list(dict.fromkeys([*order, *seen]))


def fleet_view(replicas: Sequence[str], reports: Sequence[ReplicaReport | None],
               order: Sequence[str] = (), picks: Mapping[str, int] | None = None) -> dict:
    """The fleet view's data from the replicas' reports (None: the replica did not
    answer), ``order``: the configured classes; ``picks``: a picking front's counts of
    requests it named a replica for and left to the router."""
    classes = _classes(reports, order)
    per = []
    fleet = {c: ClassTally(c) for c in classes}
    for k, (url, rep) in enumerate(zip(replicas, reports)):
        tallies = {t.slo_class: t for t in (rep.totals if rep is not None else ())}
        for c, t in tallies.items():
            fleet[c] = fleet[c] + t
        per.append({"index": k, "url": url, "answered": rep is not None,
                    "classes": [] if rep is None else
                    [class_row(tallies.get(c, ClassTally(c)), rep) for c in classes]})
    in_flight = {c: {"waiting": 0, "running": 0} for c in classes}
    for rep in (r for r in reports if r is not None):
        for ld in rep.loads:
            in_flight[ld.slo_class]["waiting"] += ld.waiting
            in_flight[ld.slo_class]["running"] += ld.running
    return {"fleet": [{**class_row(fleet[c]), **in_flight[c]} for c in classes],
            "replicas": per, "picks": None if picks is None else dict(picks)}


async def read_all(client, replicas: Sequence[str], timeout_s: float = 2.0
                   ) -> list[ReplicaReport | None]:
    """Every replica's report, read now, all at once."""
    from adaserve.sglang.picking import read_report

    docs = await asyncio.gather(*(read_report(client, u, timeout_s) for u in replicas))
    now = time.monotonic()
    out: list[ReplicaReport | None] = []
    for doc in docs:
        try:
            out.append(None if doc is None else from_json(doc, now))
        except ValueError:  # answered, but not with a report: not one of ours
            out.append(None)
    return out


def routes(client, replicas: Sequence[str], view=None) -> list:
    """The front's ``/fleet`` and ``/fleet/data`` (Starlette routes); ``view``: a picking
    front's picking.FleetView, whose polled reports are used while fresh."""
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    async def page(_):
        return HTMLResponse(PAGE.read_text())

    async def data(_):
        reports = None
        if view is not None:
            now = time.monotonic()
            held = list(view.reports)
            if all(r is not None and now - r.read_at <= view.cfg.stale_s for r in held):
                reports = held
        if reports is None:
            reports = await read_all(client, replicas)
        try:
            from adaserve.sglang.slo import configured_classes

            order = list(configured_classes()[0])
        except ValueError:  # a front started without the fleet's classes
            order = []
        return JSONResponse({**fleet_view(replicas, reports, order,
                                          None if view is None else view.picks),
                             "time": time.time()})

    return [Route("/fleet", page, methods=["GET"]), Route("/fleet/data", data, methods=["GET"])]

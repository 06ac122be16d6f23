"""What a replica reports to the picker (issue 39), and what the picker is asked about.

A replica's report is what it can say of itself without the router: the requests it holds
per SLO class, split into those still waiting for their first token (queued or in
prefill) and those decoding, the TPOT and TTFT of its recently finished requests per
class, and since it started, per class, how many finished and kept their SLOs (the
fleet view's; the picker does not read them). The SGLang plugin serves it at
``GET /adaserve/load`` (adaserve/sglang/load.py); the simulated fleet builds the same
carrier from a simulated replica (adaserve/sim/fleet.py). ``from_json`` reads the route's
body, so the front and the tests share one parser.

Pure Python, no tensors: the picker is tested on fabricated reports.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

# what "recent" means, on both sides: the last RECENT_FINISHED finished requests of each
# class, of those finished in the last RECENT_S seconds (older ones describe a load gone)
RECENT_FINISHED = 32
RECENT_S = 30.0


@dataclass(frozen=True, slots=True)
class ClassLoad:
    """The requests a replica holds of one SLO (a class, or a TPOT SLO in ms)."""

    slo_class: str
    tpot_slo_ms: float | None  # None: best effort
    waiting: int  # no first token yet: queued or prefilling
    running: int  # decoding

    @property
    def count(self) -> int:
        return self.waiting + self.running


@dataclass(frozen=True, slots=True)
class Recent:
    """A replica's recently finished requests of one class: how many and their medians."""

    slo_class: str
    finished: int
    tpot_ms: float | None  # median TPOT; None: no request with two tokens
    ttft_ms: float | None  # median time to first token


@dataclass(frozen=True, slots=True)
class ClassTally:
    """A replica's finished client requests of one class since it started, and how many
    kept each objective: TPOT and TTFT each over the requests that had it, end to end
    (every objective the request had) over those with any. Fleets add them up
    (``+``): the SLO front's fleet view (adaserve/sglang/fleet_page.py)."""

    slo_class: str
    finished: int = 0
    tpot_met: int = 0
    tpot_of: int = 0  # finished with a TPOT SLO
    ttft_met: int = 0
    ttft_of: int = 0  # finished with a TTFT SLO
    met: int = 0
    met_of: int = 0  # finished with any SLO

    def __add__(self, other: ClassTally) -> ClassTally:
        return ClassTally(self.slo_class, *(getattr(self, f) + getattr(other, f)
                                            for f in _COUNTS))

    def with_finished(self, tpot_met: bool | None, ttft_met: bool | None,
                      met: bool | None) -> ClassTally:
        """This tally with one more finished request (None: it had no such objective)."""
        add = ClassTally(self.slo_class, 1, *(x for m in (tpot_met, ttft_met, met)
                                              for x in (bool(m), m is not None)))
        return self + add

    def to_json(self) -> dict:
        return {"slo_class": self.slo_class, **{f: getattr(self, f) for f in _COUNTS}}


_COUNTS = ("finished", "tpot_met", "tpot_of", "ttft_met", "ttft_of", "met", "met_of")


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """One replica's report, stamped with when the reader read it (its own clock: the
    front's monotonic seconds, or the simulator's virtual time)."""

    read_at: float
    loads: tuple[ClassLoad, ...] = ()
    recent: tuple[Recent, ...] = ()
    totals: tuple[ClassTally, ...] = ()  # since the replica started (the fleet view's)

    @property
    def waiting(self) -> int:
        return sum(ld.waiting for ld in self.loads)

    @property
    def in_flight(self) -> int:
        return sum(ld.count for ld in self.loads)

    def recent_of(self, slo_class: str | None) -> Recent | None:
        return next((r for r in self.recent if r.slo_class == slo_class), None)

    def with_sent(self, asks: Sequence[Ask]) -> ReplicaReport:
        """The report with requests sent to the replica since it was read counted as
        waiting there: a burst of arrivals between two reads must not all see the same
        empty replica."""
        if not asks:
            return self
        loads = list(self.loads)
        for ask in asks:
            k = next((i for i, ld in enumerate(loads) if ld.slo_class == ask.slo_class
                      and ld.tpot_slo_ms == ask.tpot_slo_ms), None)
            if k is None:
                loads.append(ClassLoad(ask.slo_class or "", ask.tpot_slo_ms, 1, 0))
            else:
                loads[k] = replace(loads[k], waiting=loads[k].waiting + 1)
        return replace(self, loads=tuple(loads))


@dataclass(frozen=True, slots=True)
class Ask:
    """The request the picker places: its SLOs as the replicas will judge them."""

    slo_class: str | None
    tpot_slo_ms: float | None  # None: best effort
    ttft_slo_ms: float | None = None  # None: no TTFT SLO known at the door


def recent(finished: Iterable[tuple[str, float | None, float | None]]) -> tuple[Recent, ...]:
    """Each class's ``Recent`` from its finished requests, each (class, TPOT ms, TTFT ms),
    oldest first; the last RECENT_FINISHED of a class count (the caller drops those older
    than RECENT_S)."""
    by: dict[str, list[tuple[float | None, float | None]]] = {}
    for cls, tpot, ttft in finished:
        by.setdefault(cls, []).append((tpot, ttft))
    out = []
    for cls, rows in by.items():
        rows = rows[-RECENT_FINISHED:]
        tpots = [t for t, _ in rows if t is not None]
        ttfts = [t for _, t in rows if t is not None]
        out.append(Recent(cls, len(rows), statistics.median(tpots) if tpots else None,
                          statistics.median(ttfts) if ttfts else None))
    return tuple(out)


def from_json(doc: Mapping, read_at: float) -> ReplicaReport:
    """A report from the body of a replica's ``GET /adaserve/load``; ValueError for a body
    that is not one."""
    try:
        loads = tuple(ClassLoad(str(g["slo_class"]), _ms(g.get("tpot_slo_ms")),
                                int(g["waiting"]), int(g["running"]))
                      for g in doc.get("in_flight", ()))
        recent = tuple(Recent(str(r["slo_class"]), int(r["finished"]), _ms(r.get("tpot_ms")),
                              _ms(r.get("ttft_ms")))
                       for r in doc.get("recent", ()))
        totals = tuple(ClassTally(str(t["slo_class"]), *(int(t[f]) for f in _COUNTS))
                       for t in doc.get("totals", ()))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a replica load report: {e!r}") from None
    return ReplicaReport(read_at, loads, recent, totals)


def _ms(v) -> float | None:
    return None if v is None else float(v)

"""The SLO front's replica picking (issue 39): the shared picker (adaserve/picker) in the
real fleet, naming each request's replica to sglang-router.

The front polls every replica's ``GET /adaserve/load`` (load.py) and the router's ``GET
/workers`` every ``poll_s``. For a request on an SLO route it asks the picker where the
request is most likely to attain and says so to the router in ``X-SMG-Target-Worker``.
What sglang-router 0.3.2 does with that header, measured here (docs/fleet.md): only its
``consistent_hashing`` policy reads it (``manual`` reads the routing key alone), and the
value is an index into the router's *healthy* workers in the order of its ``/workers``
list (the order workers registered, not ``--worker-urls``); a target that is not there is
answered 503. So the index is taken from ``/workers`` as last read, and a replica the
router holds unhealthy is never named. The router keeps health checks, circuit breakers
and retries; a request without the header goes by its policy, which is what the front
sends when the reports are stale (``PickerConfig.stale_s``) or a replica's is missing.

Requests the front sent to a replica since its report was read count as waiting there
(``ReplicaReport.with_sent``), so a burst does not all go to the replica that looked idle.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path

from adaserve.picker import Ask, Pick, PickerConfig, ReplicaReport, from_json, pick

HEADER = "X-SMG-Target-Worker"


class FleetView:
    """What the front knows of the replicas, and the picks it makes from it."""

    def __init__(self, replicas: list[str], cfg: PickerConfig, poll_s: float = 0.25) -> None:
        self.replicas = [u.rstrip("/") for u in replicas]
        self.cfg, self.poll_s = cfg, poll_s
        self.reports: list[ReplicaReport | None] = [None] * len(self.replicas)
        self.sent: list[list[tuple[float, Ask]]] = [[] for _ in self.replicas]
        self.healthy: list[str] = []  # the router's healthy workers, in its order
        self.picks = {"named": 0, "fallback": 0}

    def take(self, k: int, doc: Mapping, read_started: float) -> None:
        """Replica ``k``'s report, read from ``read_started`` (monotonic s): requests sent
        to it before then are in it."""
        self.reports[k] = from_json(doc, read_started)
        self.sent[k] = [(t, a) for t, a in self.sent[k] if t >= read_started]

    def take_workers(self, doc: Mapping) -> None:
        """The router's ``GET /workers`` body."""
        self.healthy = [w["url"].rstrip("/") for w in doc.get("workers", ())
                        if w.get("is_healthy")]

    def choose(self, ask: Ask, now: float | None = None) -> tuple[str | None, Pick]:
        """(the header's value, or None to leave it to the router; the picker's answer)."""
        now = time.monotonic() if now is None else now
        views = [None if r is None else r.with_sent([a for _, a in s])
                 for r, s in zip(self.reports, self.sent)]
        got = pick(ask, views, now, self.cfg)
        if got.replica is not None and self.replicas[got.replica] in self.healthy:
            self.sent[got.replica].append((now, ask))
            self.picks["named"] += 1
            return str(self.healthy.index(self.replicas[got.replica])), got
        self.picks["fallback"] += 1
        return None, got

    async def poll(self, client, router: str) -> None:
        """Read every report and the router's workers once (a failed read leaves the old
        report, which goes stale)."""
        async def one(k: int, url: str) -> None:
            t0 = time.monotonic()
            doc = await read_report(client, url, self.cfg.stale_s)
            if doc is not None:  # else a replica busy or gone: its report ages
                self.take(k, doc, t0)

        async def workers() -> None:
            try:
                r = await client.get(router + "/workers", timeout=self.cfg.stale_s)
                if r.status_code == 200:
                    self.take_workers(r.json())
            except Exception:  # noqa: BLE001
                pass

        await asyncio.gather(workers(), *(one(k, u) for k, u in enumerate(self.replicas)))

    async def poll_forever(self, client, router: str) -> None:
        while True:
            await self.poll(client, router)
            await asyncio.sleep(self.poll_s)


async def read_report(client, url: str, timeout_s: float) -> Mapping | None:
    """A replica's ``GET /adaserve/load`` body, or None when it did not answer in time."""
    try:
        r = await client.get(url + "/adaserve/load", timeout=timeout_s)
        return r.json() if r.status_code == 200 else None
    except Exception:  # noqa: BLE001  busy, gone, or not a replica of ours
        return None


class PickLog:
    """One JSON line per request the picking front placed (``--pick-log``): its id (the
    client's ``X-Request-Id``), its SLOs, the replica named (its index among the
    replicas; None: the router's policy chose) and what the picker predicted on every
    replica, so a benchmark can set the predictions against what the client measured
    (benchmarks/fleet/routing.py)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a", buffering=1)  # a line each: a reader sees whole lines

    def write(self, request_id: str | None, ask: Ask, got: Pick, named: bool,
              retried: bool) -> None:
        self.file.write(json.dumps({
            "t": time.monotonic(), "id": request_id, "slo_class": ask.slo_class,
            "tpot_slo_ms": ask.tpot_slo_ms, "ttft_slo_ms": ask.ttft_slo_ms,
            "replica": got.replica if named else None, "why": got.why,
            "retried": retried,  # named, answered 503, re-sent to the router's choice
            "predictions": [{"demand": p.demand, "tpot_ms": p.tpot_ms, "ttft_ms": p.ttft_ms,
                             "margin": p.margin} for p in got.predictions]}) + "\n")

    def close(self) -> None:
        self.file.close()


def ask_of(headers: Mapping[str, str]) -> Ask | None:
    """The request's SLOs as a replica will resolve them, from the headers the front
    forwards (the SLO on ``tracestate``: front.forwarded_headers); None when the fleet's
    classes are not known here or the SLO is bad (the replica's 400 says why)."""
    from adaserve.server.slo_classes import SLOError, request_slo
    from adaserve.sglang.slo import configured_classes
    from adaserve.sglang.tracestate import slo_headers

    try:
        classes, default = configured_classes()
        label, slo = request_slo(None, None, slo_headers(headers), classes, default)
    except (ValueError, SLOError):
        return None
    ms = lambda s: None if s is None else s * 1e3  # noqa: E731
    return Ask(label, ms(slo.tpot_s), ms(slo.ttft_s))


def config_of(server_info: Mapping, capacity: float | None, stale_s: float) -> PickerConfig:
    """The picker's settings from a replica's /server_info: its baseline (the weights'
    unit), one prefill chunk's ms, and a capacity of its token budget per iteration (else
    its running-request cap) unless ``capacity`` is given. ValueError without a baseline."""
    baseline = server_info.get("baseline_latency_ms")
    if not baseline:
        raise ValueError("the picker needs the replicas' baseline (serve-cpu --baseline-ms)")
    ttft = server_info.get("ttft_default") or {}
    cap = capacity or server_info.get("budget") or server_info.get("max_running_requests") or 8
    return PickerConfig(float(baseline), float(cap), ttft.get("chunk_ms"), stale_s)

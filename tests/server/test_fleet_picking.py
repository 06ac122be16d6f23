"""The SLO front naming each request's replica to the router (issue 39): FleetView reads
the replicas' `GET /adaserve/load` and the router's `GET /workers`, the shared picker
chooses, and the front sends `X-SMG-Target-Worker` with the index the router knows that
replica by: its healthy workers in its own order. Replicas and router are stand-ins here
(a MockTransport); the real fleet is tests/sglang_tier/test_fleet_cpu.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from adaserve.picker import PickerConfig
from adaserve.sglang.front import app
from adaserve.sglang.picking import HEADER, FleetView, ask_of, config_of

REAL_CLIENT = httpx.AsyncClient
R0, R1 = "http://r0.invalid", "http://r1.invalid"


class Stand:
    """Two replicas and a router: the replicas' loads are set by the test; the router
    lists r1 before r0 (as sglang-router orders workers by registration) and answers a
    request with the headers it got, or 503 for a target it does not have."""

    def __init__(self) -> None:
        self.loads = {R0: [], R1: []}
        self.healthy = {R0: True, R1: True}
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}"
        if request.url.path == "/adaserve/load":
            return httpx.Response(200, json={"in_flight": self.loads[base], "recent": []})
        if request.url.path == "/workers":
            return httpx.Response(200, json={"workers": [
                {"url": u, "is_healthy": self.healthy[u]} for u in (R1, R0)]})
        self.seen.append(request)
        target = request.headers.get(HEADER)
        healthy = [u for u in (R1, R0) if self.healthy[u]]
        if target is not None and int(target) >= len(healthy):
            return _streamed(503, {"error": "no worker"})
        return _streamed(200, {"target": target})


def _streamed(status: int, doc: dict) -> httpx.Response:
    """A JSON answer as a router streams it (the front relays the raw stream)."""
    return httpx.Response(status, headers={"content-type": "application/json"},
                          stream=httpx.ByteStream(json.dumps(doc).encode()))


@pytest.fixture
def fleet(monkeypatch):
    from adaserve.sglang.front import adopt_classes
    from adaserve.sglang.slo import configured_classes

    monkeypatch.setattr("os.environ", dict(__import__("os").environ))
    info = {"slo_classes": [{"name": "urgent", "tpot_ms": 60.0, "spec": "60ms"},
                            {"name": "relaxed", "tpot_ms": 400.0, "spec": "400ms"},
                            {"name": "best-effort", "tpot_ms": None, "spec": ""}],
            "default_slo_class": "relaxed", "baseline_latency_ms": 80.0, "budget": 4,
            "ttft_default": {"chunk_ms": 100.0}}
    adopt_classes(info)
    stand = Stand()
    monkeypatch.setattr(httpx, "AsyncClient",
                        lambda **kw: REAL_CLIENT(transport=httpx.MockTransport(stand), **kw))
    view = FleetView([R0, R1], config_of(info, None, 2.0))
    yield stand, view, app("http://router.invalid", view)
    configured_classes.cache_clear()


def test_the_config_comes_from_a_replicas_server_info():
    cfg = config_of({"baseline_latency_ms": 80, "budget": 6, "ttft_default":
                     {"chunk_ms": 120.0}}, None, 1.5)
    assert cfg == PickerConfig(80.0, 6.0, 120.0, 1.5)
    assert config_of({"baseline_latency_ms": 80, "budget": 6}, 9, 2.0).capacity == 9.0
    with pytest.raises(ValueError, match="baseline"):
        config_of({"budget": 6}, None, 2.0)


def test_the_front_names_the_replica_with_headroom(fleet):
    asyncio.run(_names(*fleet))


async def _names(stand: Stand, view: FleetView, asgi) -> None:
    poller = REAL_CLIENT(transport=httpx.MockTransport(stand))
    async with REAL_CLIENT(transport=httpx.ASGITransport(app=asgi), base_url="http://f") as c:
        async def send(**headers):
            r = await c.post("/generate", json={"text": "hi"}, headers=headers)
            assert r.status_code == 200, r.text
            return stand.seen[-1].headers.get(HEADER)

        # before any report: stale, so no header and the router's policy decides
        assert await send(**{"X-SLO-Class": "urgent"}) is None
        assert view.picks == {"named": 0, "fallback": 1}
        # r0 holds three urgent requests (all of its capacity), r1 relaxed ones
        stand.loads[R0] = [{"slo_class": "urgent", "tpot_slo_ms": 60.0, "waiting": 0,
                            "running": 3}]
        stand.loads[R1] = [{"slo_class": "relaxed", "tpot_slo_ms": 400.0, "waiting": 0,
                            "running": 4}]
        await view.poll(poller, "http://router.invalid")
        assert view.healthy == [R1, R0]
        # r1 is the router's worker 0
        assert await send(**{"X-SLO-Class": "urgent"}) == "0"
        # the SLO on the tracestate member is what the picker reads (the body slo here)
        r = await c.post("/generate", json={"text": "hi", "slo": {"tpot_ms": 60}})
        assert r.status_code == 200 and stand.seen[-1].headers[HEADER] == "0"
        # requests sent since the last read count: the next urgent ones spread
        picks = [await send(**{"X-SLO-Class": "urgent"}) for _ in range(4)]
        assert "1" in picks, picks
        # a route without an SLO is passed without a name
        await c.get("/v1/models")
        assert HEADER not in stand.seen[-1].headers
        # the named worker left the router's healthy set since /workers was read: the
        # router answers 503, and the front sends it again without a name
        stand.healthy[R0] = False
        view.sent = [[], []]
        view.healthy = [R1, R0]
        stand.loads[R1] = [{"slo_class": "urgent", "tpot_slo_ms": 60.0, "waiting": 0,
                            "running": 3}]
        stand.loads[R0] = []
        await view.poll(poller, "http://router.invalid")
        view.healthy = [R1, R0]  # as last read before the router marked r0 down
        n = len(stand.seen)
        assert await send(**{"X-SLO-Class": "urgent"}) is None
        assert [q.headers.get(HEADER) for q in stand.seen[n:]] == ["1", None]
    await poller.aclose()


def test_a_replica_the_router_holds_unhealthy_is_never_named():
    view = FleetView([R0, R1], PickerConfig(80, 4, stale_s=2))
    view.take(0, {"in_flight": []}, 10.0)
    view.take(1, {"in_flight": [{"slo_class": "urgent", "tpot_slo_ms": 60.0,
                                 "waiting": 0, "running": 3}]}, 10.0)
    view.take_workers({"workers": [{"url": R1, "is_healthy": True},
                                   {"url": R0 + "/", "is_healthy": False}]})
    from adaserve.picker import Ask

    target, got = view.choose(Ask("urgent", 60.0), now=10.5)
    assert got.replica == 0 and target is None  # the picker's choice is out: no name
    view.take_workers({"workers": [{"url": R1, "is_healthy": True},
                                   {"url": R0, "is_healthy": True}]})
    assert view.choose(Ask("urgent", 60.0), now=10.5)[0] == "1"
    assert view.choose(Ask("urgent", 60.0), now=13.0)[0] is None  # stale: 3 s old


def test_the_ask_is_the_slo_a_replica_resolves(fleet):
    assert ask_of({"tracestate": "adaserve=class:urgent;ttft-ms:900"}).__repr__() == \
        "Ask(slo_class='urgent', tpot_slo_ms=60.0, ttft_slo_ms=900.0)"
    assert ask_of({}).slo_class == "relaxed"
    assert ask_of({"tracestate": "adaserve=class:nope"}) is None  # the replica's 400


def test_a_replica_reports_its_client_requests_by_slo():
    """load.py, the replica's side, on stand-ins of SGLang's request states: the SLO the
    HTTP hooks put in custom_params, waiting until a first token, health checks left out;
    and the recent medians of the finished ones it was told of."""
    from types import SimpleNamespace as NS

    from adaserve.sglang import load

    def state(custom, first=0.0, finished=False, log=True):
        return NS(finished=finished, time_stats=NS(first_token_time=first),
                  obj=NS(log_metrics=log, sampling_params={"custom_params": custom}))

    states = {"a": state({"slo_class": "urgent", "tpot_slo_ms": 60.0}),
              "b": state({"slo_class": "urgent", "tpot_slo_ms": 60.0}, first=5.0),
              "c": state({}, first=5.0),  # no SLO of its own: the default class
              "d": state({"slo_class": "urgent", "tpot_slo_ms": 60.0}, finished=True),
              "h": state({}, log=False)}  # SGLang's health check
    rows = sorted(load.in_flight_rows(states, "relaxed"), key=lambda r: r["slo_class"])
    assert rows == [{"slo_class": "relaxed", "tpot_slo_ms": None, "waiting": 0, "running": 1},
                    {"slo_class": "urgent", "tpot_slo_ms": 60.0, "waiting": 1, "running": 1}]
    load._FINISHED.clear()
    for tpot in (40.0, 50.0, 90.0):
        load.finished("urgent", tpot, 300.0)
    assert load.recent_rows() == [{"slo_class": "urgent", "finished": 3, "tpot_ms": 50.0,
                                   "ttft_ms": 300.0}]
    assert load.recent_rows(now=__import__("time").monotonic() + 60) == []  # too old
    load._FINISHED.clear()

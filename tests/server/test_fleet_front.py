"""The SLO across SGLang's router (issue 28): the tracestate member a replica reads, and the
fleet front that writes it from whatever SLO the client stated. The front runs as an ASGI
app in front of a recording upstream that stands in for the router (the real router and
replicas are tests/sglang_tier/test_fleet_cpu.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from adaserve.server.slo_classes import SLOError, parse_classes, resolve
from adaserve.sglang.front import Incoming, app, forwarded_headers, slo_source
from adaserve.sglang.tracestate import member, slo_headers, with_member

REAL_CLIENT = httpx.AsyncClient  # the test's own client; the front's is patched below
CLASSES = parse_classes("urgent=30,relaxed=2000,best-effort", None)


def test_a_member_becomes_the_header_it_stands_for():
    assert slo_headers({"tracestate": "adaserve=class:urgent"})["x-slo-class"] == "urgent"
    assert slo_headers({"TraceState": "vendor=1, adaserve=tpot-ms:30ms"})["x-slo-tpot-ms"] \
        == "30ms"
    # resolved by the contract's own rules once it is a header again
    h = slo_headers({"tracestate": "adaserve=tpot-ms:45"})
    assert resolve(None, h, CLASSES, "relaxed")[1].tpot_s == pytest.approx(0.045)


def test_a_members_ttft_part_becomes_the_ttft_header():
    """The TTFT SLO crosses in the same member: read as X-SLO-TTFT-MS, by the contract's
    rules, beside the class or TPOT the member carries, or alone (the default class)."""
    h = slo_headers({"tracestate": "adaserve=class:urgent;ttft-ms:800"})
    assert (h["x-slo-class"], h["x-slo-ttft-ms"]) == ("urgent", "800")
    label, slo = resolve(None, h, CLASSES, "relaxed")
    assert label == "urgent" and slo.ttft_s == pytest.approx(0.8)
    label, slo = resolve(None, slo_headers({"tracestate": "adaserve=ttft-ms:1.5"}),
                         CLASSES, "relaxed")
    assert label == "relaxed" and slo.ttft_s == pytest.approx(0.0015)
    # a direct TTFT header is a direct header: the member is not read
    direct = {"X-SLO-TTFT-MS": "90", "tracestate": "adaserve=class:urgent"}
    assert slo_headers(direct) is direct
    for bad in ("adaserve=class:urgent;", "adaserve=class:a;class:b",
                "adaserve=ttft-ms:1;speed:2"):
        with pytest.raises(SLOError) as e:
            slo_headers({"tracestate": bad})
        assert e.value.param == "tracestate"


def test_a_direct_header_wins_over_the_member():
    h = {"X-SLO-Class": "relaxed", "tracestate": "adaserve=class:urgent"}
    assert slo_headers(h) is h


def test_other_vendors_members_are_ignored_and_ours_must_be_well_formed():
    assert "x-slo-class" not in slo_headers({"tracestate": "congo=t61rcWkgMzE"})
    for bad in ("adaserve=urgent", "adaserve=speed:fast", "adaserve="):
        with pytest.raises(SLOError) as e:
            slo_headers({"tracestate": bad})
        assert e.value.param == "tracestate"


def test_members_are_written_safely_and_move_to_the_front():
    assert member(("class", " urgent ")) == "adaserve=class:urgent"
    assert member(("class", "urgent"), ("ttft-ms", "800ms")) == \
        "adaserve=class:urgent;ttft-ms:800ms"
    assert with_member("congo=1,adaserve=class:x, rojo=2", "adaserve=tpot-ms:30") == \
        "adaserve=tpot-ms:30,congo=1,rojo=2"
    for bad in ("a,b", "a=b", "caf\u00e9", "", "urgent;ttft-ms:1"):
        with pytest.raises(SLOError):
            member(("class", bad))
    with pytest.raises(SLOError) as e:
        member(("class", "urgent"), ("ttft-ms", "8;00"))
    assert e.value.param == "X-SLO-TTFT-MS"


@pytest.mark.parametrize("body, headers, want", [
    ({"slo": {"class": "urgent"}, "sampling_params": {"custom_params": {"slo_class": "x"}}},
     {"X-SLO-Class": "y"}, ("class", "urgent")),
    ({"slo": {"tpot_ms": 30}}, {}, ("tpot-ms", "30")),
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": "40ms"}}}, {"X-SLO-TPOT-MS": "9"},
     ("tpot-ms", "40ms")),
    ({"custom_params": {"slo_class": "relaxed"}}, {}, ("class", "relaxed")),  # OpenAI routes
    ({"text": "hi"}, {"X-SLO-TPOT-MS": "12", "X-SLO-Class": "urgent"}, ("tpot-ms", "12")),
    ({"text": "hi"}, {"x-slo-class": "urgent"}, ("class", "urgent")),
    ({"text": "hi", "slo": None}, {}, None),
])
def test_the_contracts_precedence(body, headers, want):
    assert slo_source(body, headers) == want


@pytest.mark.parametrize("body", [
    {"slo": "urgent"}, {"slo": {"class": "a", "tpot_ms": 3}}, {"slo": {"speed": 1}},
    {"custom_params": ["x"]}, {"sampling_params": {"custom_params": {"slo_class": True}}},
])
def test_shapes_the_contract_refuses(body):
    with pytest.raises(SLOError):
        slo_source(body, {})


@pytest.mark.parametrize("body, headers, want", [
    ({"slo": {"class": "urgent", "ttft_ms": 800}}, {"X-SLO-TTFT-MS": "9"},
     "adaserve=class:urgent;ttft-ms:800"),
    ({"slo": {"ttft_ms": "1200ms"}}, {"X-SLO-Class": "urgent"},
     "adaserve=class:urgent;ttft-ms:1200ms"),
    ({"text": "hi"}, {"x-slo-ttft-ms": "700"}, "adaserve=ttft-ms:700"),
    ({"text": "hi", "slo": {"ttft_ms": None}}, {"X-SLO-TPOT-MS": "30"}, "adaserve=tpot-ms:30"),
    ({"sampling_params": {"custom_params": {"slo_class": "urgent"}}}, {"X-SLO-TTFT-MS": "5"},
     "adaserve=class:urgent;ttft-ms:5"),
])
def test_the_ttft_slo_rides_in_the_same_member(body, headers, want):
    """Body slo.ttft_ms first, then X-SLO-TTFT-MS, beside the TPOT's source."""
    out = forwarded_headers(Incoming.of("POST", "/generate", json.dumps(body).encode(), headers))
    assert out["tracestate"] == want


def test_only_slo_routes_get_the_member_and_hop_headers_stay():
    body = json.dumps({"text": "hi"}).encode()
    h = {"X-SLO-Class": "urgent", "Connection": "keep-alive", "Authorization": "Bearer t"}
    out = forwarded_headers(Incoming.of("POST", "/generate", body, h))
    assert out["tracestate"] == "adaserve=class:urgent" and "Connection" not in out
    assert out["Authorization"] == "Bearer t"
    assert "tracestate" not in forwarded_headers(Incoming.of("GET", "/health", b"", h))
    assert "tracestate" not in forwarded_headers(Incoming.of("POST", "/generate", b"not json",
                                                             {}))


class Chunks(httpx.AsyncByteStream):
    """A streamed body, as the router streams SSE: two chunks."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self):
        yield self.data[:5]
        yield self.data[5:]


class Recorder:
    """An upstream that answers what it received, the way a router's worker would see it."""

    def __init__(self) -> None:
        self.seen: list[tuple[httpx.Request, bytes]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request, request.content))
        body = json.dumps({"path": request.url.path,
                           "tracestate": request.headers.get("tracestate")}).encode()
        return httpx.Response(200, headers={"content-type": "application/json"},
                              stream=Chunks(body))


@pytest.fixture
def front(monkeypatch):
    rec = Recorder()

    def client(**kw):  # the front's client, sending to the recorder instead of a socket
        return REAL_CLIENT(transport=httpx.MockTransport(rec), **kw)

    monkeypatch.setattr(httpx, "AsyncClient", client)
    return app("http://router.invalid"), rec


def test_the_front_carries_the_slo_and_refuses_bad_shapes(front):
    asyncio.run(_through_the_front(*front))


async def _through_the_front(asgi, rec: Recorder) -> None:
    async with REAL_CLIENT(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://front") as c:
        r = await c.post("/generate?x=1", json={"text": "hi", "slo": {"class": "urgent"}})
        assert r.status_code == 200
        assert r.json() == {"path": "/generate", "tracestate": "adaserve=class:urgent"}
        sent, content = rec.seen[-1]
        assert sent.url.params["x"] == "1"
        assert json.loads(content)["slo"] == {"class": "urgent"}  # the body is unchanged
        r = await c.post("/generate", json={"text": "hi", "slo": {"class": "urgent",
                                                                  "ttft_ms": 800}})
        assert r.json()["tracestate"] == "adaserve=class:urgent;ttft-ms:800"
        r = await c.post("/v1/chat/completions", json={"messages": [], "slo": {"x": 1}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "slo"
        assert len(rec.seen) == 2  # refused before the router
        r = await c.get("/readiness")
        assert r.status_code == 200 and r.json()["tracestate"] is None


@pytest.fixture
def fleet_classes(monkeypatch):
    """The front holding a replica's classes (as `--classes-from` gives them), undone
    after the test."""
    from adaserve.sglang.front import adopt_classes
    from adaserve.sglang.slo import configured_classes

    for name in ("ADASERVE_SLO_CLASSES", "ADASERVE_DEFAULT_CLASS", "ADASERVE_BASELINE_MS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("os.environ", dict(__import__("os").environ))
    adopt_classes({"slo_classes": [{"name": "urgent", "tpot_ms": 30.0, "spec": "x1"},
                                   {"name": "best-effort", "tpot_ms": None, "spec": ""}],
                   "default_slo_class": "urgent"})
    yield configured_classes()
    configured_classes.cache_clear()


def test_the_front_refuses_at_the_door_naming_the_field_as_sent(fleet_classes):
    from adaserve.sglang.front import door_refusal

    classes, default = fleet_classes
    assert set(classes) == {"urgent", "best-effort"} and default == "urgent"
    assert classes["urgent"].tpot_ms == 30.0
    js = {"content-type": "application/json"}
    chat = lambda **kw: json.dumps({"messages": [{"role": "user", "content": "hi"}],  # noqa: E731
                                    **kw}).encode()
    cases = [
        (chat(slo={"tpot_ms": -1}), js, 400, "slo.tpot_ms"),  # a replica could only say the header
        (chat(slo={"class": "gold"}), js, 400, "slo.class"),
        (chat(custom_params={"slo_class": "gold"}), js, 400, "custom_params.slo_class"),
        (chat(), {**js, "X-SLO-TPOT-MS": "fast"}, 400, "X-SLO-TPOT-MS"),
        (chat(slo={"class": "urgent", "ttft_ms": -1}), js, 400, "slo.ttft_ms"),
        (chat(slo={"ttft_ms": 4e6}), js, 400, "slo.ttft_ms"),
        (chat(), {**js, "x-slo-ttft-ms": "fast"}, 400, "X-SLO-TTFT-MS"),
        (chat(temperature=-1), js, 400, "temperature"),
        (b'{"messages": [', js, 400, None),
        (chat(), {"content-type": "text/plain"}, 415, None),
    ]

    def door(body, headers):
        return door_refusal(Incoming.of("POST", "/v1/chat/completions", body, headers))

    for body, headers, status, param in cases:
        err = door(body, headers)
        assert err is not None and (err.status, err.param) == (status, param), (body, err)
    assert "line 1 column 15" in door(b'{"messages": [', js).message
    # what a replica must judge, or nothing to judge: passed on
    assert door(chat(slo={"class": "urgent"}), js) is None
    assert door_refusal(Incoming.of("GET", "/v1/models", b"", {})) is None
    assert door(chat(max_tokens=10 ** 6), js) is None


def test_an_openai_body_without_a_model_gets_one_for_the_router():
    from adaserve.sglang.front import with_model

    sent = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    model = lambda path, body: with_model(Incoming.of("POST", path, body, {}))  # noqa: E731
    assert json.loads(model("/v1/chat/completions", sent))["model"]
    named = json.dumps({"model": "m", "prompt": "hi"}).encode()
    assert model("/v1/completions", named) == named  # the client's own is kept
    assert model("/generate", sent) == sent  # SGLang's native route has no model
    assert model("/v1/completions", b"{not json") == b"{not json"  # the gate's to refuse


def test_the_routers_plain_text_errors_leave_in_openais_shape():
    from adaserve.sglang.front import router_error

    body = json.loads(router_error(422, "text/plain", b"missing field `model`"))
    assert body == {"error": {"message": "the router: missing field `model`",
                              "type": "invalid_request_error", "param": None, "code": None}}
    assert router_error(503, None, b"")  # an empty body still says something
    assert router_error(400, "application/json", b"{}") is None  # shaped upstream
    assert router_error(200, "text/plain", b"ok") is None
    # a replica's own error relayed as text passes as the replica wrote it
    relayed = {"error": {"message": "m", "type": "server_overloaded", "param": None,
                         "code": None}}
    assert json.loads(router_error(503, "text/plain", json.dumps(relayed).encode())) == relayed


def test_a_replicas_refusal_the_router_relays_as_text_keeps_its_shape_and_retry_after(
        monkeypatch):
    """sglang-router relays a replica's 503 for a stream as plain text and drops its
    Retry-After (seen with a refuse=on fleet, 2026-11-28): the front answers the replica's
    own error and its Retry-After again."""
    from adaserve.scheduler.admission import late_reason
    from adaserve.server.errors import at_capacity, error_body

    refusal = error_body(503, at_capacity(late_reason(15.7, 1.0)))

    def router(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"content-type": "text/plain"},
                              content=json.dumps(refusal).encode())

    monkeypatch.setattr(httpx, "AsyncClient",
                        lambda **kw: REAL_CLIENT(transport=httpx.MockTransport(router), **kw))
    asgi = app("http://router.invalid")

    async def send():
        async with REAL_CLIENT(transport=httpx.ASGITransport(app=asgi),
                               base_url="http://front") as c:
            return await c.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "stream": True})

    r = asyncio.run(send())
    assert r.status_code == 503 and r.json() == refusal
    assert r.headers["retry-after"] == "16"


def test_the_front_parses_a_body_once(front, fleet_classes, monkeypatch):
    """The door's check, the SLO put on tracestate and the model name added all read the
    one parse (front.Incoming); a request's JSON used to be parsed three times."""
    real, calls = json.loads, []

    def counting(text, *a, **kw):
        if "parse-me-once" in (text.decode() if isinstance(text, bytes) else text):
            calls.append(1)
        return real(text, *a, **kw)

    monkeypatch.setattr(json, "loads", counting)
    asgi, rec = front

    async def send():
        async with REAL_CLIENT(transport=httpx.ASGITransport(app=asgi),
                               base_url="http://front") as c:
            return await c.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "parse-me-once"}],
                "slo": {"class": "urgent"}})

    r = asyncio.run(send())
    assert r.status_code == 200 and r.json()["tracestate"] == "adaserve=class:urgent"
    sent = real(rec.seen[-1][1])
    assert sent["model"] and sent["slo"] == {"class": "urgent"}  # the model added, body kept
    assert len(calls) == 1


def test_server_info_is_a_replicas_not_the_routers(monkeypatch):
    """The router answers /server_info with an error of its own, so a client reading the
    fleet's classes through the front (the load generator does) got none; the front asks
    the first replica that answers."""
    info = {"slo_classes": [{"name": "urgent", "tpot_ms": 30.0}], "baseline_latency_ms": 30}

    def upstream(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.invalid":
            raise httpx.ConnectError("refused", request=request)
        if request.url.host == "replica.invalid":
            return httpx.Response(200, json=info)
        return httpx.Response(404, text="Not Found")  # the router

    monkeypatch.setattr(httpx, "AsyncClient",
                        lambda **kw: REAL_CLIENT(transport=httpx.MockTransport(upstream), **kw))

    async def get(asgi):
        async with REAL_CLIENT(transport=httpx.ASGITransport(app=asgi),
                               base_url="http://front") as c:
            return await c.get("/server_info")

    r = asyncio.run(get(app("http://router.invalid",
                            replicas=["http://down.invalid", "http://replica.invalid"])))
    assert r.status_code == 200 and r.json() == info
    r = asyncio.run(get(app("http://router.invalid", replicas=["http://down.invalid"])))
    assert r.status_code == 502 and r.json()["error"]["code"] == "bad_gateway"

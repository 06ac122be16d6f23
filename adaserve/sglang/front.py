"""The fleet's front door (issue 28): keeps the SLO contract across SGLang's router.

sglang-router 0.3.2 drops every way a client states an SLO (tracestate.py says how), so a
fleet behind it would serve every request at the default class without a word. The front
listens where clients connect, finds the request's SLO by the contract's precedence
(body ``slo``, then ``custom_params``, then ``X-SLO-TPOT-MS``, then ``X-SLO-Class``) and
its TTFT SLO (body ``slo.ttft_ms``, then ``X-SLO-TTFT-MS``), puts them on ``tracestate``
as our member, and passes the request, unchanged otherwise, to the
router, streaming the answer back. It refuses at the door what a replica's contract gate
would (``door_refusal``), in the same shape and naming the field as the client sent it,
since past the router the body's SLO is a ``tracestate`` member; the lengths, which need
the tokenizer, are judged by the replica that serves the request, whose 400 the router
returns. Routing stays the router's, unless ``--pick`` gives the replicas: then the
SLO-aware picker (picking.py) names each SLO request's replica to the router. Given
the replicas, it serves the fleet view at /fleet (fleet_page.py).

    python -m adaserve.sglang.front --router http://127.0.0.1:30010 --port 30000 \
        [--classes-from http://127.0.0.1:30001] [--replicas URL ...] [--pick URL ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adaserve.server.slo_classes import SLOError
from adaserve.sglang.error_shape import retry_after
from adaserve.sglang.tracestate import member, with_member

SLO_ROUTES = ("/generate", "/v1/chat/completions", "/v1/completions")
# hop-by-hop headers (RFC 9110 7.6.1) and the ones the HTTP client sets itself
_NOT_FORWARDED = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                  "trailer", "upgrade", "host", "content-length"}
_CUSTOM = {"tpot_slo_ms": "tpot-ms", "slo_class": "class"}
_BODY = {"tpot_ms": "tpot-ms", "class": "class"}


def _one(given: Mapping, names: Mapping[str, str], param: str) -> tuple[str, str] | None:
    """The one SLO field of ``given`` as (kind, text); SLOError for both at once."""
    found = [(kind, given[k]) for k, kind in names.items() if given.get(k) is not None]
    if len(found) > 1:
        raise SLOError(f"{param} gives both {' and '.join(names)}; give one", param)
    if not found:
        return None
    kind, value = found[0]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SLOError(f"{param}: {value!r} is neither a number nor a name", param)
    return kind, str(value)


def slo_source(body: object, headers: Mapping[str, str]) -> tuple[str, str] | None:
    """The request's SLO as (tracestate kind, value text), by the contract's precedence,
    or None (the replica's default class). SLOError for a shape the contract refuses."""
    if isinstance(body, Mapping):
        if body.get("slo") is not None:
            found = _one(_body_slo(body), _BODY, "slo")
            if found is not None:
                return found
        params = body.get("sampling_params")
        custom = params.get("custom_params") if isinstance(params, Mapping) \
            else body.get("custom_params")
        if custom is not None:
            if not isinstance(custom, Mapping):
                raise SLOError("custom_params must be an object", "custom_params")
            found = _one(custom, _CUSTOM, "custom_params")
            if found is not None:
                return found
    h = {k.lower(): v for k, v in headers.items()}
    if "x-slo-tpot-ms" in h:
        return "tpot-ms", h["x-slo-tpot-ms"]
    if "x-slo-class" in h:
        return "class", h["x-slo-class"]
    return None


def ttft_source(body: object, headers: Mapping[str, str]) -> tuple[str, str] | None:
    """The request's TTFT SLO as ("ttft-ms", value text): the body's ``slo.ttft_ms``, else
    the header ``X-SLO-TTFT-MS``; None (the class's default, on the replica)."""
    if isinstance(body, Mapping) and body.get("slo") is not None:
        found = _one(_body_slo(body), {"ttft_ms": "ttft-ms"}, "slo")
        if found is not None:
            return found
    sent = [v for k, v in headers.items() if k.lower() == "x-slo-ttft-ms"]
    return ("ttft-ms", sent[0]) if sent else None


def _body_slo(body: Mapping) -> Mapping:
    slo = body["slo"]
    if not isinstance(slo, Mapping) or set(slo) - set(_BODY) - {"ttft_ms"}:
        raise SLOError('slo must be an object: {"tpot_ms": 30} or {"class": "urgent"}, '
                       'and ttft_ms', "slo")
    return slo


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request at the front, its body parsed once: the door's check, the SLO put on
    ``tracestate`` and the model name added all read ``doc``."""

    method: str
    path: str
    body: bytes
    headers: Mapping[str, str]
    doc: object = None  # an SLO route's JSON body; None: another route, or not JSON
    bad: object = None  # contract.ContractError: why an SLO route's body is not JSON

    @classmethod
    def of(cls, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Incoming:
        if path not in SLO_ROUTES:
            return cls(method, path, body, headers)
        from adaserve.sglang.contract import parsed

        doc, bad = parsed(body)
        return cls(method, path, body, headers, doc, bad)


def forwarded_headers(req: Incoming) -> dict[str, str]:
    """What the front sends the router: the client's headers, with the SLO on tracestate
    for an SLO route. SLOError for a bad SLO shape."""
    headers = req.headers
    out = {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
    if req.path not in SLO_ROUTES:
        return out
    # a body that is not JSON (req.doc None) has no SLO of its own: the replica's 4xx says why
    parts = [p for p in (slo_source(req.doc, headers), ttft_source(req.doc, headers)) if p]
    if parts:
        old = {k.lower(): v for k, v in out.items()}.get("tracestate")
        out = {k: v for k, v in out.items() if k.lower() != "tracestate"}
        out["tracestate"] = with_member(old, member(*parts))
    return out


# the model name put in an OpenAI body that names none (``with_model``)
_MODEL = {"name": "default"}
OPENAI_ROUTES = ("/v1/chat/completions", "/v1/completions")


def with_model(req: Incoming) -> bytes:
    """The body with ``"model"`` added where an OpenAI route's JSON object lacks it:
    the contract makes it optional (both backends serve without it), but sglang-router
    0.3.2 answers "missing field `model`" in plain text before any replica sees it."""
    doc = req.doc
    if req.path not in OPENAI_ROUTES or not isinstance(doc, dict) or "model" in doc:
        return req.body
    return json.dumps({**doc, "model": _MODEL["name"]}).encode()


def router_error(status: int, content_type: str | None, body: bytes) -> bytes | None:
    """OpenAI's error shape for an error the router answered in its own (plain text, as
    "missing field `model`"); None for a JSON body, which a replica's gate and
    ``error_shape.OpenAIErrors`` have shaped already. A replica's own error that the router
    relays as text (it does so for a stream the replica refused, a 503 at its door) is
    already in that shape and passes as the replica wrote it."""
    if status < 400 or "json" in (content_type or "").lower():
        return None
    from adaserve.server.errors import error_body

    text = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    try:
        relayed = json.loads(text)
    except ValueError:
        relayed = None
    if isinstance(relayed, dict) and isinstance(relayed.get("error"), dict) and \
            isinstance(relayed["error"].get("message"), str):
        return json.dumps(relayed, separators=(",", ":")).encode()
    return json.dumps(error_body(status, f"the router: {text}")).encode()


def adopt_classes(server_info: Mapping) -> None:
    """Take a replica's SLO classes (its /server_info) as this process's, in milliseconds,
    so the front judges an SLO as the replicas do (``configured_classes``)."""
    import os

    from adaserve.sglang.slo import configured_classes

    classes = server_info.get("slo_classes") or []
    os.environ["ADASERVE_SLO_CLASSES"] = ",".join(
        c["name"] if c.get("tpot_ms") is None else f"{c['name']}={c['tpot_ms']!r}ms"
        for c in classes)
    if server_info.get("default_slo_class"):
        os.environ["ADASERVE_DEFAULT_CLASS"] = server_info["default_slo_class"]
    configured_classes.cache_clear()
    configured_classes()  # a bad report fails the start, not a request
    if server_info.get("served_model_name"):
        _MODEL["name"] = str(server_info["served_model_name"])


def door_refusal(req: Incoming):
    """The contract's refusal of a request at the fleet's door, as a replica's gate would
    answer it (``contract.checked``: a body not said to be JSON, malformed JSON, a contract
    field, an SLO, all naming the field as the client sent it), or None. Past the router
    the body's ``slo`` and ``custom_params`` are gone and the SLO rides on ``tracestate``,
    so a replica could only name the header; and the router would answer a body it cannot
    parse in its own shape. Lengths need the tokenizer and stay the replica's. Without the
    fleet's classes in the environment (a front started by hand), only the shapes the
    tracestate member needs are checked (``forwarded_headers``)."""
    if req.method != "POST" or req.path not in SLO_ROUTES:
        return None
    from adaserve.sglang.contract import media_type_error, refusal
    from adaserve.sglang.slo import configured_classes

    err = media_type_error(req.headers.get("content-type"))
    if err is not None:
        return err
    try:
        configured_classes()
    except ValueError:
        return None
    return req.bad if req.bad is not None else refusal(req.path, req.doc, req.headers)


def app(router: str, view=None, pick_log=None, replicas: list[str] | None = None):
    """The ASGI app in front of ``router`` (its base URL); with ``view``
    (picking.FleetView) it names each SLO request's replica to the router, and writes
    each pick to ``pick_log`` (picking.PickLog) when given. With ``replicas`` (their
    URLs) it serves the fleet view, /fleet (fleet_page.py), and a replica's /server_info."""
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse

    from adaserve.server.errors import error_response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=router, timeout=None)

    async def proxy(request: Request):
        req = Incoming.of(request.method, request.url.path, await request.body(),
                          request.headers)
        err = door_refusal(req)
        if err is not None:
            return error_response(err.status, err.message, err.param, code=err.code)
        try:
            headers = forwarded_headers(req)
        except SLOError as e:
            return error_response(400, str(e), e.param)
        target = ask = got = None
        if view is not None and request.url.path in SLO_ROUTES:
            from adaserve.sglang.picking import HEADER, ask_of

            ask = ask_of(headers)
            if ask is not None:
                target, got = view.choose(ask)
            if target is not None:
                headers = {**headers, HEADER: target}
        retried = False

        content = with_model(req)

        def upstream(h):
            return client.build_request(request.method, request.url.path,
                                        params=request.query_params,
                                        content=content, headers=h)
        try:
            resp = await client.send(upstream(headers), stream=True)
            if target is not None and resp.status_code == 503:
                # the named worker left the router's healthy set since /workers was read:
                # the router's own policy chooses, as without a pick
                await resp.aclose()
                from adaserve.sglang.picking import HEADER

                retried = True
                resp = await client.send(upstream({k: v for k, v in headers.items()
                                                   if k != HEADER}), stream=True)
        except httpx.HTTPError as e:
            return error_response(502, f"the router did not answer: {e!r}",
                                  code="bad_gateway")
        finally:
            if pick_log is not None and got is not None:
                pick_log.write(request.headers.get("x-request-id"), ask, got,
                               target is not None, retried)
        kept = {k: v for k, v in resp.headers.items() if k.lower() not in _NOT_FORWARDED}
        if resp.status_code >= 400 and "json" not in resp.headers.get("content-type", ""):
            shaped = router_error(resp.status_code, resp.headers.get("content-type"),
                                  await resp.aread())
            await resp.aclose()
            # a replica's refusal keeps its Retry-After, which the router's relay dropped
            retry = retry_after(resp.status_code, json.loads(shaped))
            return Response(shaped, status_code=resp.status_code, media_type="application/json",
                            headers=None if retry is None else {"Retry-After": retry})
        return StreamingResponse(resp.aiter_raw(), status_code=resp.status_code,
                                 headers=kept, background=BackgroundTask(resp.aclose))

    @contextlib.asynccontextmanager
    async def lifespan(_):
        import asyncio

        polling = None if view is None else asyncio.create_task(
            view.poll_forever(client, router))
        yield
        if polling is not None:
            polling.cancel()
        if pick_log is not None:
            pick_log.close()
        await client.aclose()

    async def server_info(request: Request):
        """A replica's /server_info (the first that answers): the fleet's SLO classes,
        baseline and model, which a client (the load generator) reads; sglang-router
        0.3.2 answers the route with an error of its own."""
        for url in replicas:
            try:
                r = await client.get(url.rstrip("/") + "/server_info", timeout=30)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                return Response(r.content, media_type="application/json")
        return error_response(502, "no replica answered /server_info", code="bad_gateway")

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
    own = []
    if replicas:
        from adaserve.sglang.fleet_page import routes

        own = [*routes(client, [u.rstrip("/") for u in replicas], view),
               Route("/server_info", server_info, methods=["GET"])]
    return Starlette(routes=[*own, Route("/{path:path}", proxy, methods=methods)],
                     lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--router", required=True, help="the router's base URL")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--classes-from", default=None, metavar="URL",
                   help="a replica whose /server_info gives the fleet's SLO classes, so the "
                   "front refuses a bad SLO as the replicas would, naming the field the "
                   "client sent (fleet-cpu passes its first replica)")
    p.add_argument("--pick", nargs="+", default=None, metavar="URL",
                   help="the replicas' URLs: name each SLO request's replica to the router "
                        "(X-SMG-Target-Worker; the router must run sglang-router's "
                        "consistent_hashing policy: docs/fleet.md) by the SLO-aware picker")
    p.add_argument("--picker-capacity", type=float, default=None,
                   help="the demand one replica serves within its SLOs, in tokens per "
                        "baseline iteration (default: the replicas' --budget)")
    p.add_argument("--replicas", nargs="+", default=None, metavar="URL",
                   help="the replicas' URLs, for the fleet view at /fleet (per-class "
                        "attainment for the fleet and each replica; default: --pick's)")
    p.add_argument("--pick-log", type=Path, default=None, metavar="PATH",
                   help="with --pick: a JSON line per request placed, with its X-Request-Id, "
                        "the replica named and the picker's predictions (picking.PickLog)")
    p.add_argument("--picker-stale-s", type=float, default=2.0,
                   help="reports older than this: leave the choice to the router's policy")
    p.add_argument("--picker-poll-s", type=float, default=0.25,
                   help="seconds between reads of the replicas' reports")
    args = p.parse_args(argv)
    info = None
    if args.classes_from:
        import httpx

        info = httpx.get(args.classes_from.rstrip("/") + "/server_info", timeout=60).json()
        adopt_classes(info)  # and the served model's name
    view = log = None
    if args.pick:
        from adaserve.sglang.picking import FleetView, PickLog, config_of

        if info is None:
            p.error("--pick needs --classes-from (the replicas' classes and baseline)")
        view = FleetView(args.pick, config_of(info, args.picker_capacity, args.picker_stale_s),
                         args.picker_poll_s)
        log = None if args.pick_log is None else PickLog(args.pick_log)
    uvicorn.run(app(args.router.rstrip("/"), view, log, args.replicas or args.pick),
                host=args.host, port=args.port,
                log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The fleet's front door (issue 28): keeps the SLO contract across SGLang's router.

sglang-router 0.3.2 drops every way a client states an SLO (tracestate.py says how), so a
fleet behind it would serve every request at the default class without a word. The front
listens where clients connect, finds the request's SLO by the contract's precedence
(body ``slo``, then ``custom_params``, then ``X-SLO-TPOT-MS``, then ``X-SLO-Class``), puts
it on ``tracestate`` as our member, and passes the request, unchanged otherwise, to the
router, streaming the answer back. It validates only what the member needs (an object
where the contract wants one, one source at a time, text a header can carry); the value
itself (range, known class) is judged by the replica that serves the request, whose 400
the router returns. Routing stays the router's.

    python -m adaserve.sglang.front --router http://127.0.0.1:30010 --port 30000
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping

from adaserve.server.slo_classes import SLOError
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
            slo = body["slo"]
            if not isinstance(slo, Mapping) or set(slo) - set(_BODY):
                raise SLOError('slo must be an object: {"tpot_ms": 30} or {"class": '
                               '"urgent"}', "slo")
            found = _one(slo, _BODY, "slo")
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


def forwarded_headers(path: str, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
    """What the front sends the router: the client's headers, with the SLO on tracestate
    for an SLO route. SLOError for a bad SLO shape."""
    out = {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
    if path not in SLO_ROUTES:
        return out
    try:
        parsed = json.loads(body) if body else None
    except ValueError:  # not JSON: the replica's 4xx says so
        parsed = None
    found = slo_source(parsed, headers)
    if found is not None:
        old = {k.lower(): v for k, v in out.items()}.get("tracestate")
        out = {k: v for k, v in out.items() if k.lower() != "tracestate"}
        out["tracestate"] = with_member(old, member(*found))
    return out


def app(router: str):
    """The ASGI app in front of ``router`` (its base URL)."""
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=router, timeout=None)

    async def proxy(request: Request):
        body = await request.body()
        try:
            headers = forwarded_headers(request.url.path, body, request.headers)
        except SLOError as e:
            return JSONResponse(status_code=400, content={"error": {
                "message": str(e), "type": "invalid_request_error", "param": e.param,
                "code": 400}})
        upstream = client.build_request(request.method, request.url.path,
                                        params=request.query_params, content=body,
                                        headers=headers)
        try:
            resp = await client.send(upstream, stream=True)
        except httpx.HTTPError as e:
            return JSONResponse(status_code=502, content={"error": {
                "message": f"the router did not answer: {e!r}", "type": "bad_gateway",
                "code": 502}})
        kept = {k: v for k, v in resp.headers.items() if k.lower() not in _NOT_FORWARDED}
        return StreamingResponse(resp.aiter_raw(), status_code=resp.status_code,
                                 headers=kept, background=BackgroundTask(resp.aclose))

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        await client.aclose()

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
    return Starlette(routes=[Route("/{path:path}", proxy, methods=methods)], lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--router", required=True, help="the router's base URL")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    args = p.parse_args(argv)
    uvicorn.run(app(args.router.rstrip("/")), host=args.host, port=args.port,
                log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

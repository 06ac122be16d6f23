"""OpenAI-shaped errors ({"error": {"message", "type", "param", "code"}}) for every failure
the server answers, and the guards on what a request may be: its size, its headers, and a
JSON body that says it is JSON."""

from __future__ import annotations

import json
from email.message import Message as MIMEHeader

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adaserve.server.slo_value import SLOError

_TYPES = {404: "not_found_error", 503: "server_overloaded", 500: "internal_error"}
INVALID = "invalid_request_error"  # the type of every other status


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.headers, self.code = headers, code


def at_capacity(reason: str) -> str:
    """The message of a 503 for a server at capacity (a full queue, or a first token
    predicted past its TTFT SLO), on every route and in both servers."""
    return f"the server is at capacity ({reason}); retry later"


def error_body(status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, INVALID),
                      "param": param, "code": code}}


class _ASCIIJSON(JSONResponse):
    """An error may quote the client's input (a field name, a value); escaping everything
    outside ASCII writes even text UTF-8 cannot (a lone surrogate) instead of failing."""

    def render(self, content: object) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


def error_response(status: int, message: str, param: str | None = None,
                   headers: dict[str, str] | None = None, code: str | None = None) -> JSONResponse:
    return _ASCIIJSON(error_body(status, message, param, code), status_code=status,
                      headers=headers)


def not_json(content_type: str | None) -> str | None:
    """Why a body sent with this Content-Type is not JSON, or None when it says JSON
    (application/json, or any +json type). The SGLang plugin answers with it too."""
    header = MIMEHeader()
    header["content-type"] = content_type or ""
    subtype = header.get_content_subtype()
    if header.get_content_maintype() == "application" and (
            subtype == "json" or subtype.endswith("+json")):
        return None
    return ("the body must be JSON: send Content-Type: application/json "
            f"({'no Content-Type was sent' if not content_type else f'got {content_type!r}'})")


def require_json(request: Request) -> None:
    """A route dependency: 415 unless the request says its body is JSON. Without the
    header FastAPI hands the model the raw bytes, and pydantic's "Input should be a valid
    dictionary" does not tell the client what to change."""
    why = not_json(request.headers.get("content-type"))
    if why is not None:
        raise APIError(415, why, code="unsupported_media_type")


def _loc(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or None


def _message(err: dict) -> str:
    """One pydantic error as "field: what is wrong". A validator's own ValueError speaks
    for itself (pydantic prefixes it "Value error, "); an SLOError names its field already."""
    where = _loc(tuple(err.get("loc", ()))) or "body"
    cause = (err.get("ctx") or {}).get("error")
    if err.get("type") == "value_error" and isinstance(cause, Exception):
        return str(cause) if isinstance(cause, SLOError) else f"{where}: {cause}"
    return f"{where}: {err.get('msg')}"


def describe(errs: list[dict]) -> tuple[str, str | None]:
    """(message, param) of a body that failed validation: its first five errors as
    "field: what is wrong", and the first one's field. The SGLang plugin describes its
    contract checks with it too, so both backends word a refusal alike."""
    first = errs[0] if errs else {}
    return "; ".join(_message(x) for x in errs[:5]), _loc(tuple(first.get("loc", ())))


def _json_error(err: dict, doc: object) -> str:
    """Where the JSON breaks: FastAPI gives the character offset (loc ("body", pos)) and
    the decoder's reason."""
    reason = (err.get("ctx") or {}).get("error") or err.get("msg")
    loc = err.get("loc", ())
    pos = loc[-1] if loc and isinstance(loc[-1], int) else None
    return malformed_json(str(reason), pos, doc)


def malformed_json(reason: str, pos: int | None, doc: object) -> str:
    """The message for a body that is not valid JSON: the decoder's reason and where, the
    line and column counted from the document. The SGLang plugin answers with it too."""
    if pos is None or not isinstance(doc, str):
        return f"the body is not valid JSON: {reason}"
    line = doc.count("\n", 0, pos) + 1
    column = pos - (doc.rfind("\n", 0, pos) + 1) + 1
    return (f"the body is not valid JSON: {reason} at line {line} column {column} "
            f"(offset {pos})")


def not_utf8(e: UnicodeDecodeError) -> str:
    return (f"the body is not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset "
            f"{e.start} ({e.reason}); send JSON encoded as UTF-8")


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, e: APIError) -> JSONResponse:
        return error_response(e.status, e.message, e.param, e.headers, e.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        first = errs[0] if errs else {}
        if first.get("type") == "json_invalid":
            return error_response(400, _json_error(first, e.body), code="json_invalid")
        message, param = describe(errs)
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        message = str(e.detail)
        if isinstance(e.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
            message = not_utf8(e.__cause__)
        return error_response(e.status_code, message, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(_: Request, e: Exception) -> JSONResponse:  # a bug answers 500, never hangs
        return error_response(500, f"internal error: {type(e).__name__}: {e}")


MAX_HEADERS = 256
MAX_HEADER_BYTES = 64 * 1024
# uvicorn's h11 parser gives up on a header block over 16 KiB that arrives in more than one
# read (a 400, or a closed connection, depending on timing), before RequestLimits sees it.
# Letting it buffer up to this much per connection makes oversized headers a clear 431.
PARSER_HEADER_BYTES = 1 << 20


class RequestLimits:
    """431 for more than MAX_HEADERS headers or MAX_HEADER_BYTES of them (the HTTP parser
    may accept far more); 413 for a body over ``limit`` bytes, whether it announces its
    length or streams it chunked. Nothing past a limit is buffered."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        size = sum(len(k) + len(v) for k, v in headers)
        if len(headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            resp = error_response(431, f"{len(headers)} headers of {size} bytes: at most "
                                  f"{MAX_HEADERS} headers and {MAX_HEADER_BYTES} bytes")
            await resp(scope, receive, send)
            return
        for k, v in headers:
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                await self._reject(scope, receive, send)
                return
        seen = 0

        async def guarded() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return msg

        try:
            await self.app(scope, guarded, send)
        except _TooLarge:
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        resp = error_response(413, f"the request body is over {self.limit} bytes")
        await resp(scope, receive, send)


class _TooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing lets it through as a 413 (it turns any
    other exception met while reading the body into a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")

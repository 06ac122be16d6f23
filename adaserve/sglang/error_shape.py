"""OpenAI's error shape on SGLang's OpenAI routes (issue 39).

SGLang 0.5.23 answers an error on /v1/* with a flat body, ``{"object": "error", "message",
"type", "param", "code"}``; the openai client reads ``body["error"]["message"]`` and, finding
no ``error`` key, raises with the raw body as its message instead of the server's words.
``OpenAIErrors`` is ASGI middleware on ADASERVE servers that rewrites such a body, whoever
made it (SGLang's own checks, its handlers, our hooks), into the shape the embedded server
answers, ``{"error": {"message", "type", "param", "code"}}``, keeping the status. SGLang's
native /generate answers the same flat shape for an HTTP error (its 503s) and is rewritten
too (its own ``{"error": {"message"}}`` already reads as OpenAI's). Only a complete JSON
error of the flat shape is rewritten; a stream, a success and the other routes pass through
byte for byte.

A stream SGLang refuses before its first token (a 503 abort: its full queue, or the
policy's door) it answers 200 and then an error event, which no OpenAI client reads as a
refusal. ``stream_refusal`` finds that first event; the stream hooks (report.py, http.py)
answer the 503 instead, before the stream starts, as the embedded server does.

A 503 on any route whose message is a refusal at the door (``refuse=on``: refusal.py) also
gets the Retry-After the embedded server sends with it. SGLang's scheduler can hand its
HTTP process only the message, so the header is read back from it
(``admission.late_of``, ``retry_after_s``: the same seconds the embedded server sends).
"""

from __future__ import annotations

import json

from adaserve.scheduler.admission import late_of, retry_after_s
from adaserve.server.errors import error_body

PREFIX = "/v1/"
NATIVE = "/generate"


def stream_refusal(chunk: str | bytes) -> str | None:
    """The message of a stream's first event if it is a 503 abort, else None: an OpenAI
    route's ``data: {"error": {..., "code": 503}}``, or /generate's ``data: {...,
    "meta_info": {"finish_reason": {"type": "abort", "status_code": 503, ...}}}``."""
    text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk
    if not isinstance(text, str) or not text.startswith("data: "):
        return None
    try:
        event = json.loads(text[len("data: "):].split("\n\n", 1)[0])
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    err = event.get("error")
    if isinstance(err, dict) and err.get("code") == 503:
        return str(err.get("message") or "")
    reason = (event.get("meta_info") or {}).get("finish_reason") if isinstance(
        event.get("meta_info"), dict) else None
    if isinstance(reason, dict) and reason.get("type") == "abort" and \
            reason.get("status_code") == 503:
        return str(reason.get("message") or "")
    return None


def openai_shape(flat: object, status: int) -> dict | None:
    """The OpenAI-shaped body for SGLang's flat error ``flat``; None if it is not one. The
    type follows the status as the embedded server's does; ``code`` is a string or null
    (SGLang puts the status there, which the status line already carries)."""
    if not (isinstance(flat, dict) and flat.get("object") == "error"
            and isinstance(flat.get("message"), str)):
        return None
    code = flat.get("code")
    return error_body(status, flat["message"], flat.get("param"),
                      code if isinstance(code, str) else None)


class OpenAIErrors:
    """ASGI middleware: a 4xx/5xx JSON answer on /v1/* or /generate in SGLang's flat shape
    leaves in OpenAI's, and a refusal's 503 on any route with its Retry-After. The answer
    is held only when its status says so (a few hundred bytes); everything else is sent as
    it comes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        openai = path.startswith(PREFIX) or path == NATIVE
        held: dict | None = None  # the response start of an error, until its body is whole
        chunks: list[bytes] = []

        async def shaped(message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and _is_json(
                    message.get("headers") or []) and (
                    message["status"] == 503 or (openai and message["status"] >= 400)):
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await _send_rewritten(send, held, b"".join(chunks), openai)

        await self.app(scope, receive, shaped)


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and b"json" in v.lower() for k, v in headers)


def _message(body: object) -> str | None:
    """An error body's message: SGLang's flat ``message``, or ``error.message``."""
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    m = inner.get("message") if isinstance(inner, dict) else body.get("message")
    return m if isinstance(m, str) else None


def retry_after(status: int, body: object) -> str | None:
    """The Retry-After of an error answer whose (parsed) body is a refusal at the door's
    503 (``late_reason``'s message, in either shape), else None."""
    late = late_of(_message(body) or "") if status == 503 else None
    return None if late is None else str(retry_after_s(late))


async def _send_rewritten(send, start: dict, body: bytes, openai: bool) -> None:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    new = openai_shape(parsed, start["status"]) if openai else None
    headers = list(start.get("headers") or [])
    retry = retry_after(start["status"], parsed)
    if retry is not None and not any(k.lower() == b"retry-after" for k, _ in headers):
        headers.append((b"retry-after", retry.encode()))
    if new is not None:
        body = json.dumps(new, separators=(",", ":")).encode("ascii")
        headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

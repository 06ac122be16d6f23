"""OpenAI's error shape on SGLang's OpenAI routes (issue 39).

SGLang 0.5.23 answers an error on /v1/* with a flat body, ``{"object": "error", "message",
"type", "param", "code"}``; the openai client reads ``body["error"]["message"]`` and, finding
no ``error`` key, raises with the raw body as its message instead of the server's words.
``OpenAIErrors`` is ASGI middleware on ADASERVE servers that rewrites such a body, whoever
made it (SGLang's own checks, its handlers, our hooks), into the shape the embedded server
answers, ``{"error": {"message", "type", "param", "code"}}``, keeping the status. Only a
complete JSON error of the flat shape is rewritten; a stream, a success and the native
routes (/generate keeps SGLang's own ``{"error": {"message"}}``) pass through byte for
byte.
"""

from __future__ import annotations

import json

from adaserve.server.errors import error_body

PREFIX = "/v1/"


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
    """ASGI middleware: a 4xx/5xx JSON answer on /v1/* in SGLang's flat shape leaves in
    OpenAI's. The answer is held only when its status says error (a few hundred bytes);
    everything else is sent as it comes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        held: dict | None = None  # the response start of an error, until its body is whole
        chunks: list[bytes] = []

        async def shaped(message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400 \
                    and _is_json(message.get("headers") or []):
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await _send_rewritten(send, held, b"".join(chunks))

        await self.app(scope, receive, shaped)


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and b"json" in v.lower() for k, v in headers)


async def _send_rewritten(send, start: dict, body: bytes) -> None:
    try:
        new = openai_shape(json.loads(body), start["status"])
    except ValueError:
        new = None
    if new is not None:
        body = json.dumps(new, separators=(",", ":")).encode("ascii")
        headers = [(k, v) for k, v in start.get("headers") or []
                   if k.lower() != b"content-length"]
        start = {**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    await send(start)
    await send({"type": "http.response.body", "body": body, "more_body": False})

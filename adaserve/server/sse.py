"""Server-sent events as OpenAI and SGLang clients read them: ``data: <json>`` frames,
ending with ``data: [DONE]``; headers that keep proxies from buffering the stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

DONE = "data: [DONE]\n\n"


def event(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def response(frames: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

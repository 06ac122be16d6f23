"""Reading server-sent events the way an OpenAI client does."""

from __future__ import annotations

import json

import httpx


def events(resp: httpx.Response) -> list:
    """The JSON payloads of a finished SSE response, then the string "[DONE]" if sent."""
    out = []
    for line in resp.iter_lines():
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream(client: httpx.Client, path: str, body: dict, headers: dict | None = None) -> list:
    with client.stream("POST", path, json=body, headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return events(r)

"""OpenAI's error shape on SGLang's OpenAI routes (adaserve/sglang/error_shape.py): an
ASGI app standing in for SGLang answers in its flat shape; behind the middleware a client
gets {"error": {...}} with the same status, and nothing else changes."""

from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.testclient import TestClient

from adaserve.sglang.error_shape import OpenAIErrors, openai_shape

FLAT = {"object": "error", "message": "n > 1 is not supported", "type": "BadRequestError",
        "param": "n", "code": 400}


def _sglang_like() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def chat(fail: str = ""):
        if fail == "flat":
            return JSONResponse(FLAT, status_code=400)
        if fail == "server":
            return JSONResponse({**FLAT, "message": "boom", "code": 500}, status_code=500)
        if fail == "other":  # an error body that is not SGLang's flat shape: kept
            return JSONResponse({"detail": "x"}, status_code=422)
        return {"object": "chat.completion", "choices": []}

    @app.post("/v1/completions")
    def stream():
        return StreamingResponse(iter([b"data: 1\n\n", b"data: [DONE]\n\n"]),
                                 media_type="text/event-stream")

    @app.post("/generate")
    def generate():  # a native route keeps SGLang's own shape
        return JSONResponse(FLAT, status_code=400)

    return app


def test_a_flat_error_leaves_in_openais_shape_with_its_status():
    c = TestClient(OpenAIErrors(_sglang_like()))
    r = c.post("/v1/chat/completions?fail=flat")
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "n > 1 is not supported",
                                  "type": "invalid_request_error", "param": "n", "code": None}}
    assert int(r.headers["content-length"]) == len(r.content)
    r = c.post("/v1/chat/completions?fail=server")
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"


def test_everything_else_passes_as_it_came():
    c = TestClient(OpenAIErrors(_sglang_like()))
    assert c.post("/v1/chat/completions").json()["object"] == "chat.completion"
    assert c.post("/v1/chat/completions?fail=other").json() == {"detail": "x"}
    assert c.post("/v1/completions").text == "data: 1\n\ndata: [DONE]\n\n"
    assert c.post("/generate").json() == FLAT


def test_openai_shape_reads_only_sglangs_flat_error():
    assert openai_shape({"error": {"message": "x"}}, 400) is None
    assert openai_shape([1], 400) is None
    assert openai_shape({**FLAT, "code": "too_long"}, 400)["error"]["code"] == "too_long"
    assert json.dumps(openai_shape(FLAT, 404)).startswith('{"error"')

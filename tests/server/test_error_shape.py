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
    def generate(fail: str = ""):
        if fail == "flat":  # SGLang's HTTP errors (its 503s) are flat here too
            return JSONResponse(FLAT, status_code=400)
        if fail == "own":  # its own {"error": {"message"}} already reads as OpenAI's
            return JSONResponse({"error": {"message": "x"}}, status_code=400)
        return {"text": "ok"}

    @app.post("/health_generate")
    def other():  # any other route keeps what SGLang answers
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
    assert c.post("/generate?fail=own").json() == {"error": {"message": "x"}}
    assert c.post("/health_generate").json() == FLAT
    assert c.post("/generate").json() == {"text": "ok"}


def test_generate_answers_its_flat_errors_in_openais_shape_too():
    r = TestClient(OpenAIErrors(_sglang_like())).post("/generate?fail=flat")
    assert r.status_code == 400 and r.json()["error"]["message"] == FLAT["message"]


def test_openai_shape_reads_only_sglangs_flat_error():
    assert openai_shape({"error": {"message": "x"}}, 400) is None
    assert openai_shape([1], 400) is None
    assert openai_shape({**FLAT, "code": "too_long"}, 400)["error"]["code"] == "too_long"
    assert json.dumps(openai_shape(FLAT, 404)).startswith('{"error"')


REFUSAL = ("the server is at capacity (its first token is predicted 2.2 s past the TTFT SLO "
           "of 1 s); retry later")


def _refusing() -> FastAPI:
    """SGLang's 503s: an HTTPException answered flat on either route, and a full queue."""
    app = FastAPI()
    flat = {"object": "error", "message": REFUSAL, "type": "503", "param": None, "code": 503}

    @app.post("/v1/chat/completions")
    def chat(full: bool = False):
        if full:
            return JSONResponse({**flat, "message": "The request queue is full."}, 503)
        return JSONResponse(flat, status_code=503)

    @app.post("/generate")
    def generate():
        return JSONResponse(flat, status_code=503)

    return app


def test_a_refusal_at_the_door_gets_its_retry_after_on_every_route():
    c = TestClient(OpenAIErrors(_refusing()))
    for path in ("/v1/chat/completions", "/generate"):
        r = c.post(path)
        assert r.status_code == 503 and r.headers["retry-after"] == "3"
        assert r.json()["error"] == {"message": REFUSAL, "type": "server_overloaded",
                                     "param": None, "code": None}
    # SGLang's own full queue says no time: no Retry-After is made up for it
    r = c.post("/v1/chat/completions?full=true")
    assert r.status_code == 503 and "retry-after" not in r.headers


def test_a_streams_first_event_is_read_as_a_refusal_only_if_it_is_a_503_abort():
    from adaserve.sglang.error_shape import stream_refusal

    chat = 'data: {"error": {"object": "error", "message": "m", "code": 503}}\n\n'
    generate = (b'data: {"text": "", "meta_info": {"finish_reason": {"type": "abort", '
                b'"status_code": 503, "message": "g"}}}\n\n')
    assert stream_refusal(chat) == "m" and stream_refusal(generate) == "g"
    for other in ('data: {"error": {"message": "bad", "code": 400}}\n\n',
                  b'data: {"text": ",", "meta_info": {"finish_reason": null}}\n\n',
                  'data: {"choices": []}\n\n', "data: [DONE]\n\n", b"", ": ping\n\n"):
        assert stream_refusal(other) is None

"""SLOs from headers and custom_params reach ``custom_params`` through SGLang's real
/generate route and request objects; bad values get a 400 and nothing is queued.

SGLang's app is driven in-process (FastAPI TestClient) with the plugin's hooks applied by
SGLang's own loader; the tokenizer manager, which would need a running model, is replaced
by a recorder of what the route hands it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sglang.srt.entrypoints import http_server
from sglang.srt.plugins import load_plugins

from adaserve.sglang.slo import configured_classes, scheduled_slo


class Recorder:
    """What the route gives the tokenizer manager (the request object), one reply. Its
    ``server_args`` names the server's algorithm: the hooks act on ADASERVE's only."""

    def __init__(self, algorithm: str | None = "ADASERVE") -> None:
        self.seen = []
        self.server_args = SimpleNamespace(speculative_algorithm=algorithm)

    async def generate_request(self, obj, request):
        self.seen.append(obj)
        yield {"text": "ok", "meta_info": {"id": "x", "finish_reason": None}}

    def create_abort_task(self, obj):
        return None


@pytest.fixture()
def client(monkeypatch):
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "20")
    configured_classes.cache_clear()
    load_plugins()
    rec = Recorder()
    monkeypatch.setattr(http_server, "_global_state",
                        http_server._GlobalState(rec, None, {}))
    yield TestClient(http_server.app), rec
    configured_classes.cache_clear()


def post(c, body, **headers):
    return c.post("/generate", json={"text": "hi", **body}, headers=headers)


@pytest.mark.parametrize("body, headers, want", [
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": 30}}}, {},
     {"slo_class": "custom", "tpot_slo_ms": 30.0}),
    ({"sampling_params": {"custom_params": {"slo_class": "urgent"}}}, {},
     {"slo_class": "urgent", "tpot_slo_ms": 20.0}),
    ({}, {"X-SLO-TPOT-MS": "45"}, {"slo_class": "custom", "tpot_slo_ms": 45.0}),
    ({}, {"X-SLO-Class": "moderate"}, {"slo_class": "moderate", "tpot_slo_ms": 48.0}),
    ({}, {}, {"slo_class": "relaxed", "tpot_slo_ms": 160.0}),
    ({}, {"X-SLO-Class": "best-effort"}, {"slo_class": "best-effort"}),
    # the body wins over a header
    ({"sampling_params": {"custom_params": {"slo_class": "urgent"}}}, {"X-SLO-TPOT-MS": "99"},
     {"slo_class": "urgent", "tpot_slo_ms": 20.0}),
])
def test_slo_reaches_custom_params(client, body, headers, want):
    c, rec = client
    r = post(c, body, **headers)
    assert r.status_code == 200, r.text
    (obj,) = rec.seen
    assert obj.sampling_params["custom_params"] == want
    # and the scheduler process reads back the SLO the route resolved (this caught the
    # worker refusing the resolved form, class and milliseconds both written)
    classes, default = configured_classes()
    got = scheduled_slo(obj.sampling_params["custom_params"], classes, default)
    assert got.tpot_s == (None if "tpot_slo_ms" not in want else want["tpot_slo_ms"] / 1e3)


@pytest.mark.parametrize("custom", [None, {}, {"slo_class": "platinum"}, {"tpot_slo_ms": -5},
                                    {"slo_class": "urgent", "tpot_slo_ms": "x"}, "text"])
def test_the_scheduler_gives_unresolvable_fields_the_default_class(custom, monkeypatch):
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "20")
    configured_classes.cache_clear()
    classes, default = configured_classes()
    assert scheduled_slo(custom, classes, default).tpot_s == pytest.approx(0.160)  # relaxed
    configured_classes.cache_clear()


@pytest.mark.parametrize("body, headers, param", [
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": -1}}}, {}, "custom_params.tpot_slo_ms"),
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": "fast"}}}, {}, "custom_params.tpot_slo_ms"),
    ({"sampling_params": {"custom_params": {"slo_class": "platinum"}}}, {}, "custom_params.slo_class"),
    ({}, {"X-SLO-TPOT-MS": "nan"}, "X-SLO-TPOT-MS"),
    ({}, {"X-SLO-TPOT-MS": "0"}, "X-SLO-TPOT-MS"),
    ({}, {"X-SLO-Class": "gold"}, "X-SLO-Class"),
])
def test_bad_slo_is_a_400_and_nothing_is_queued(client, body, headers, param):
    c, rec = client
    r = post(c, body, **headers)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param and err["message"]
    assert rec.seen == []
    assert post(c, {}).status_code == 200  # and the server keeps serving


class RecordingServing:
    """An OpenAI serving class on SGLang's real OpenAIServingBase.handle_request: the
    conversion, which needs a tokenizer and a chat template, just hands the request on."""

    @staticmethod
    def make(algorithm: str | None = "ADASERVE"):
        from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase

        class Serving(OpenAIServingBase):
            def _request_id_prefix(self):
                return "chatcmpl-"

            def _convert_to_internal_request(self, request, raw_request=None):
                return None, request

            async def _handle_non_streaming_request(self, adapted, request, raw_request):
                return {"custom_params": request.custom_params}

        class TM:
            server_args = SimpleNamespace(speculative_algorithm=algorithm)
            request_logger = type("L", (), {"log_requests": False})()

        return Serving(TM())


def raw(headers: dict):
    from starlette.requests import Request

    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions",
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]})


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_openai_routes_get_the_slo(client, kind):
    import asyncio

    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

    serving = RecordingServing.make()

    def request(**kw):
        if kind == "chat":
            return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **kw)
        return CompletionRequest(model="m", prompt="hi", **kw)

    run = asyncio.run
    got = run(serving.handle_request(request(), raw({"X-SLO-Class": "urgent"})))
    assert got == {"custom_params": {"slo_class": "urgent", "tpot_slo_ms": 20.0}}
    got = run(serving.handle_request(request(custom_params={"tpot_slo_ms": 33}),
                                     raw({"X-SLO-Class": "urgent"})))
    assert got == {"custom_params": {"slo_class": "custom", "tpot_slo_ms": 33.0}}
    bad = run(serving.handle_request(request(), raw({"X-SLO-TPOT-MS": "-3"})))
    assert bad.status_code == 400
    err = json.loads(bad.body)
    assert err["param"] == "X-SLO-TPOT-MS"
    assert err["message"] == "X-SLO-TPOT-MS must be finite and > 0 milliseconds, got -3.0"

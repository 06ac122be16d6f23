"""The contract on SGLang's routes: SLOs from the body's slo object, custom_params and
headers reach ``custom_params`` through SGLang's real routes and request objects; what the
embedded server refuses gets the same 4xx naming the same field, and nothing is queued.

SGLang's app is driven in-process (FastAPI TestClient) with the plugin's hooks applied by
SGLang's own loader and the plugin's contract gate in front of it, as an ADASERVE server
runs it; the tokenizer manager and the OpenAI serving objects, which would need a running
model, are replaced by recorders of what the routes hand them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sglang.srt.entrypoints import http_server
from sglang.srt.plugins import load_plugins

from adaserve.sglang.slo import configured_classes, configured_prefill, scheduled_slo


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
    monkeypatch.delenv("ADASERVE_PREFILL_CHUNK_MS", raising=False)
    configured_classes.cache_clear()
    configured_prefill.cache_clear()
    load_plugins()
    from adaserve.sglang.contract import ContractGate

    rec = Recorder()
    monkeypatch.setattr(http_server, "_global_state",
                        http_server._GlobalState(rec, None, {}))
    monkeypatch.setattr(http_server.app.state, "openai_serving_chat",
                        RecordingServing.make(), raising=False)
    monkeypatch.setattr(http_server.app.state, "openai_serving_completion",
                        RecordingServing.make(), raising=False)
    yield TestClient(ContractGate(http_server.app)), rec
    configured_classes.cache_clear()
    configured_prefill.cache_clear()


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
    # a TTFT SLO, its own objective beside the class or the TPOT
    ({"slo": {"class": "urgent", "ttft_ms": 800}}, {"X-SLO-TTFT-MS": "9"},
     {"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 800.0}),
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": 30}}}, {"x-slo-ttft-ms": "1.5"},
     {"slo_class": "custom", "tpot_slo_ms": 30.0, "ttft_slo_ms": 1.5}),
    ({}, {"X-SLO-TTFT-MS": "700ms", "X-SLO-Class": "best-effort"},
     {"slo_class": "best-effort", "ttft_slo_ms": 700.0}),
    # past a router: the member's TTFT part, beside its class
    ({}, {"tracestate": "adaserve=class:urgent;ttft-ms:650"},
     {"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 650.0}),
    # a client's own ttft_slo_ms in custom_params is not a source: the contract's are
    ({"sampling_params": {"custom_params": {"slo_class": "urgent", "ttft_slo_ms": 1}}}, {},
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


@pytest.mark.parametrize("body, headers, param", [
    ({"slo": {"ttft_ms": -1}}, {}, "slo.ttft_ms"),
    ({"slo": {"class": "urgent", "ttft_ms": 4e6}}, {}, "slo.ttft_ms"),
    ({}, {"X-SLO-TTFT-MS": "fast"}, "X-SLO-TTFT-MS"),
    ({}, {"tracestate": "adaserve=class:urgent;ttft-ms:0"}, "X-SLO-TTFT-MS"),
])
def test_a_bad_ttft_slo_is_a_400(client, body, headers, param):
    c, rec = client
    r = post(c, body, **headers)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert rec.seen == []


@pytest.mark.parametrize("custom", [None, {}, {"slo_class": "platinum"}, {"tpot_slo_ms": -5},
                                    {"slo_class": "urgent", "tpot_slo_ms": "x"}, "text"])
def test_the_scheduler_gives_unresolvable_fields_the_default_class(custom, monkeypatch):
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "20")
    configured_classes.cache_clear()
    classes, default = configured_classes()
    assert scheduled_slo(custom, classes, default).tpot_s == pytest.approx(0.160)  # relaxed
    configured_classes.cache_clear()


@pytest.mark.parametrize("body, headers, param", [
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": -1}}}, {},
     "sampling_params.custom_params.tpot_slo_ms"),
    ({"sampling_params": {"custom_params": {"tpot_slo_ms": "fast"}}}, {},
     "sampling_params.custom_params.tpot_slo_ms"),
    ({"sampling_params": {"custom_params": {"slo_class": "platinum"}}}, {},
     "sampling_params.custom_params.slo_class"),
    ({"slo": {"tpot_ms": 0}}, {}, "slo.tpot_ms"),
    ({"slo": {"class": "platinum"}}, {}, "slo.class"),
    ({"slo": "urgent"}, {}, "slo"),
    ({"slo": {"tpot": 30}}, {}, "slo.tpot"),
    ({"sampling_params": {"max_new_tokens": 0}}, {}, "sampling_params.max_new_tokens"),
    ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": -1}]},
     {}, "sampling_params.1.max_new_tokens"),
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


def raw(headers: dict, body: dict | None = None):
    """The route's starlette Request: its headers, and the JSON body FastAPI parsed."""
    from starlette.requests import Request

    data = json.dumps(body if body is not None else {}).encode()

    async def receive():
        return {"type": "http.request", "body": data, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions",
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]},
                   receive)


def openai_call(serving, kind, headers, **fields):
    """SGLang's request object and the raw request, from one body, as FastAPI makes them."""
    import asyncio

    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

    body = ({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
            if kind == "chat" else {"model": "m", "prompt": "hi", **fields})
    cls = ChatCompletionRequest if kind == "chat" else CompletionRequest
    return asyncio.run(serving.handle_request(cls.model_validate(body), raw(headers, body)))


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_openai_routes_get_the_slo(client, kind):
    serving = RecordingServing.make()
    got = openai_call(serving, kind, {"X-SLO-Class": "urgent"})
    assert got == {"custom_params": {"slo_class": "urgent", "tpot_slo_ms": 20.0}}
    got = openai_call(serving, kind, {"X-SLO-Class": "urgent"}, custom_params={"tpot_slo_ms": 33})
    assert got == {"custom_params": {"slo_class": "custom", "tpot_slo_ms": 33.0}}
    # the body's slo object (ignored with a 200 before), first of all sources
    got = openai_call(serving, kind, {"X-SLO-TPOT-MS": "99"}, slo={"class": "moderate"},
                      custom_params={"tpot_slo_ms": 33})
    assert got == {"custom_params": {"slo_class": "moderate", "tpot_slo_ms": 48.0}}
    got = openai_call(serving, kind, {"X-SLO-TTFT-MS": "99"},
                      slo={"class": "moderate", "ttft_ms": 900})
    assert got == {"custom_params": {"slo_class": "moderate", "tpot_slo_ms": 48.0,
                                     "ttft_slo_ms": 900.0}}
    bad = openai_call(serving, kind, {"X-SLO-TPOT-MS": "-3"})
    assert bad.status_code == 400
    err = json.loads(bad.body)["error"]  # OpenAI's shape, as the embedded server's
    assert err["param"] == "X-SLO-TPOT-MS" and err["type"] == "invalid_request_error"
    assert err["message"] == "X-SLO-TPOT-MS must be finite and > 0 milliseconds, got -3.0"


OPENAI = {"chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
          "completion": ("/v1/completions", {"prompt": "hi"})}


@pytest.mark.parametrize("fields, param", [
    (dict(slo={"tpot_ms": -1}), "slo.tpot_ms"),
    (dict(slo={"class": "platinum"}), "slo.class"),
    (dict(slo="urgent"), "slo"),
    (dict(slo={"tpot_ms": 30, "class": "urgent"}), "slo"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=2.5), "max_tokens"),
    (dict(max_tokens="8"), "max_tokens"),
    (dict(custom_params={"slo_class": "gold"}), "custom_params.slo_class"),
])
@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_openai_routes_refuse_what_the_embedded_server_refuses(client, kind, fields, param):
    """The contract's fields, checked by the embedded server's own models and worded by its
    error description: the same param and message, in OpenAI's error shape. (SGLang's own
    models took max_tokens 0 on chat and refused it on completions naming no field.)"""
    from adaserve.server.errors import describe
    from adaserve.server.protocol import ChatCompletionRequest, CompletionRequest

    c, rec = client
    path, base = OPENAI[kind]
    r = c.post(path, json={"model": "m", **base, **fields})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    try:
        model.model_validate({**base, **fields})
    except ValueError as e:  # pydantic's: worded as the embedded server words it
        assert (err["message"], err["param"]) == describe(e.errors())
    else:  # refused when the SLO is resolved
        assert "slo" in param or "custom_params" in param
    assert rec.seen == []
    assert c.post(path, json={"model": "m", **base}).status_code == 200


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
def test_a_body_not_sent_as_json_is_a_415(client, path):
    c, rec = client
    r = c.post(path, content=b'{"text": "hi"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 415, r.text
    assert "Content-Type: application/json" in r.text
    assert rec.seen == []


def test_openai_routes_get_the_slo_over_http(client):
    c, _ = client
    r = c.post("/v1/chat/completions", headers={"X-SLO-TPOT-MS": "99"}, json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "slo": {"tpot_ms": "30ms"}})
    assert r.status_code == 200, r.text
    assert r.json() == {"custom_params": {"slo_class": "custom", "tpot_slo_ms": 30.0}}


class CharTokenizer:
    """One token per character, a chat template of role + content: enough to count."""

    def encode(self, text, add_special_tokens=False):
        return list(range(len(text)))

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(sum(len(m["role"]) + len(m["content"]) for m in messages)))


@pytest.mark.parametrize("path, body, param", [
    ("/generate", {"text": "x" * 40}, "text"),
    ("/generate", {"input_ids": list(range(32))}, "input_ids"),
    ("/generate", {"text": "x" * 10, "sampling_params": {"max_new_tokens": 30}},
     "sampling_params.max_new_tokens"),
    ("/v1/completions", {"model": "m", "prompt": "x" * 40}, "prompt"),
    ("/v1/completions", {"model": "m", "prompt": "x" * 10, "max_tokens": 23}, "max_tokens"),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x" * 30}]},
     "messages"),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}],
                              "max_completion_tokens": 40}, "max_completion_tokens"),
])
def test_lengths_over_the_context_are_refused_as_the_embedded_server_refuses(
        client, path, body, param):
    """A context of 32 tokens: the embedded server's length rule over SGLang's served
    tokenizer, naming the field (SGLang's own check named none)."""
    from adaserve.sglang.contract import ContractGate, Served

    _, rec = client
    c = TestClient(ContractGate(http_server.app, Served(CharTokenizer(), 32)))
    r = c.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json().get("error", r.json())  # /generate's shape, or SGLang's OpenAI one
    assert err["param"] == param, err
    assert "context limit is 32" in err["message"], err
    assert rec.seen == []
    short = {**body, "text": "x"} if path == "/generate" and "text" in body else None
    if short is not None and "sampling_params" not in body:  # what fits goes through
        assert c.post(path, json=short).status_code == 200


def test_server_info_lists_the_classes_as_the_embedded_server_does(client, monkeypatch):
    """The load generator reads slo_classes from /server_info on either backend."""
    from sglang.srt.entrypoints.http_server import build_server_info

    from adaserve.sglang.http import server_info_hook

    monkeypatch.setenv("ADASERVE_BUDGET", "8")
    args = SimpleNamespace(speculative_algorithm="ADASERVE")
    info = server_info_hook(lambda a, s: {"sglang": "its own"}, args, {})
    assert info["sglang"] == "its own" and info["budget"] == 8
    assert {c["name"]: c["tpot_ms"] for c in info["slo_classes"]} == {
        "urgent": 20.0, "moderate": 48.0, "relaxed": 160.0, "best-effort": None}
    assert info["default_slo_class"] == "relaxed" and info["baseline_latency_ms"] == 20.0
    # no prefill rate configured: no default TTFT SLO, as on an embedded server without a
    # profile
    assert info["ttft_default"] is None
    assert all(c["ttft_ms"] is None for c in info["slo_classes"])
    plain = server_info_hook(lambda a, s: {"sglang": "its own"},
                             SimpleNamespace(speculative_algorithm=None), {})
    assert plain == {"sglang": "its own"}
    assert getattr(build_server_info, "__wrapped__", None) is not None  # hooked where used


def test_server_info_lists_the_default_ttft_from_the_configured_prefill_rate(client,
                                                                             monkeypatch):
    """With ADASERVE_PREFILL_CHUNK_MS, each class's default TTFT SLO for the nominal
    prompt, by the embedded server's rule over SGLang's chunk, under its keys."""
    from adaserve.server.slo_ttft import PrefillRate, default_ttft_ms
    from adaserve.sglang.http import server_info_hook

    monkeypatch.setenv("ADASERVE_PREFILL_CHUNK_MS", "300")
    configured_prefill.cache_clear()
    try:
        args = SimpleNamespace(speculative_algorithm="ADASERVE", chunked_prefill_size=256)
        info = server_info_hook(lambda a, s: {}, args, {})
        want = default_ttft_ms(20.0, 20.0, 64, PrefillRate(256, 0.3))  # urgent: x1
        assert want == pytest.approx(2 * (300 + 64 * 300 / 256))
        got = {c["name"]: c["ttft_ms"] for c in info["slo_classes"]}
        assert got["urgent"] == pytest.approx(want) and got["best-effort"] is None
        assert got["relaxed"] == pytest.approx(8 * want)
        assert info["ttft_default"]["prefill_chunk"] == 256
        assert info["ttft_default"]["chunk_ms"] == 300.0
        off = server_info_hook(lambda a, s: {}, SimpleNamespace(
            speculative_algorithm="ADASERVE", chunked_prefill_size=-1), {})
        assert off["ttft_default"] is None  # chunked prefill off: nothing to reason from
    finally:
        configured_prefill.cache_clear()

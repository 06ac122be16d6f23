"""The HTTP contract on SGLang's routes (``contract.py``), and the SLO each request carries
to the scheduler (body ``slo``, ``custom_params``, X-SLO-* headers or, behind a router,
their ``tracestate`` member: tracestate.py): resolved once at the edge by the embedded
server's rules, written into
``custom_params`` (which SGLang carries to ``req.sampling_params.custom_params`` in the
scheduler unchanged). A refused request gets its 4xx before anything is queued.

AROUND hooks (plugin.register): ``http_server.serve_generate_request`` for /generate,
``OpenAIServingBase.handle_request`` for /v1/chat/completions and /v1/completions,
``http_server._wait_and_warmup``, whose requests the metrics leave out,
``http_server._setup_and_run_http_server``, which puts ``contract.ContractGate`` and
``error_shape.OpenAIErrors`` in front of SGLang's app before it starts and adds the
picker's ``GET /adaserve/load`` (load.py), and
``build_server_info`` for /server_info. The classes are ``slo.configured_classes()``,
which the worker reads too, so both sides agree. On a server not running ADASERVE every
hook passes the request through untouched: installing adaserve must not change plain
SGLang.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from adaserve.server.errors import error_body
from adaserve.server.slo_classes import request_slo
from adaserve.server.slo_value import SLOError
from adaserve.sglang import contract
from adaserve.sglang.contract import ContractError
from adaserve.sglang.error_shape import OpenAIErrors, stream_refusal
from adaserve.sglang.slo import (PREFILL_ENV, adaserve_selected, chunk_of,
                                 configured_classes, default_ttft, prefill_rate)
from adaserve.sglang.tracestate import slo_headers


def resolved(body_slo: Mapping | None, custom_params: Mapping | None,
             headers: Mapping[str, str], custom_at: str) -> dict:
    """custom_params with the request's SLO resolved into it (class and milliseconds; best
    effort: no tpot_slo_ms; ttft_slo_ms only where the request named a TTFT SLO, whose
    default needs the prompt's length and is the report's: report.py). The headers include
    the SLO a router carried on ``tracestate`` (tracestate.py). ContractError for bad
    input."""
    classes, default = configured_classes()
    try:
        label, slo = request_slo(body_slo, custom_params, slo_headers(headers), classes,
                                 default, custom_at)
    except SLOError as e:
        raise ContractError.of(e) from None
    out = dict(custom_params or {})
    out["slo_class"] = label
    out.pop("tpot_slo_ms", None)
    out.pop("ttft_slo_ms", None)  # only the contract's sources name a TTFT SLO
    if slo.tpot_s is not None:
        out["tpot_slo_ms"] = slo.tpot_s * 1e3
    if slo.ttft_s is not None:
        out["ttft_slo_ms"] = slo.ttft_s * 1e3
    return out


def _slo_mapping(checked) -> dict | None:
    return None if checked.slo is None else checked.slo.as_mapping()


# set while SGLang's start-up warm-up runs (``warmup_hook``): its /generate is the server's
# own, not a client's
_WARMING = threading.Event()


def warmup_hook(original, *args, **kwargs):
    """``_wait_and_warmup`` (the thread that warms the server up once it listens): the
    requests sent while it runs are marked as the server's own. Hooked there, not on
    ``_execute_server_warmup``, which it takes as a default argument bound at import."""
    _WARMING.set()
    try:
        return original(*args, **kwargs)
    finally:
        _WARMING.clear()


async def generate_hook(original, obj, request):
    """/generate: the contract on the body, then every sampling_params of the (possibly
    batched) request gets its SLO. During the start-up warm-up a request is the server's
    own and is not logged in the metrics (``log_metrics``, as SGLang marks its health
    checks), so a fresh server's per-class counters start at zero."""
    from fastapi.responses import ORJSONResponse
    from sglang.srt.entrypoints.http_server import get_global_state

    if not adaserve_selected(getattr(get_global_state().tokenizer_manager, "server_args", None)):
        return await original(obj, request)
    if _WARMING.is_set():
        obj.log_metrics = False
    try:
        top, items = contract.generate(await request.json())
        params = obj.sampling_params
        many = isinstance(params, list)
        body_slo = _slo_mapping(top)
        done = [{**(p or {}), "custom_params": resolved(body_slo, item.custom_params,
                                                        request.headers,
                                                        "sampling_params.custom_params")}
                for p, item in zip(params if many else [params], items)]
    except ContractError as e:
        return ORJSONResponse(status_code=e.status, content=e.body())
    obj.sampling_params = done if many else done[0]
    response = await original(obj, request)
    return await _refused_stream(response) if obj.stream else response


async def _refused_stream(response):
    """/generate streamed: SGLang answers 200 and streams even a request refused before its
    first token (its first event a 503 abort: error_shape.stream_refusal). Its first event
    is drawn before the answer starts, and a refusal is answered 503 in the contract's
    shape, as the embedded server refuses; otherwise the stream goes on from that event."""
    from fastapi.responses import ORJSONResponse

    events = getattr(response, "body_iterator", None)
    if events is None:
        return response
    try:
        first = await events.__anext__()
    except StopAsyncIteration:
        return response
    refused = stream_refusal(first)
    if refused is not None:
        await events.aclose()
        return ORJSONResponse(status_code=503, content=error_body(503, refused))

    async def resumed():
        yield first
        async for event in events:
            yield event

    response.body_iterator = resumed()
    return response


async def openai_hook(original, self, request, raw_request):
    """/v1/chat/completions and /v1/completions: the contract on the body, and its SLO in
    the request's custom_params."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

    chat = isinstance(request, ChatCompletionRequest)
    if not (adaserve_selected(self.tokenizer_manager.server_args)
            and (chat or isinstance(request, CompletionRequest))):
        return await original(self, request, raw_request)
    try:
        checked = contract.chat_or_completion(await raw_request.json(), chat)
        request.custom_params = resolved(_slo_mapping(checked), checked.custom_params,
                                         raw_request.headers, "custom_params")
    except ContractError as e:
        from fastapi.responses import ORJSONResponse

        return ORJSONResponse(status_code=e.status, content=e.body())
    return await original(self, request, raw_request)


def serve_hook(original, server_args, *args, **kwargs):
    """``_setup_and_run_http_server``: on an ADASERVE server, the contract gate joins
    SGLang's app before it serves (as SGLang adds its API-key middleware there)."""
    if adaserve_selected(server_args):
        from sglang.srt.entrypoints.http_server import app

        from adaserve.sglang.load import ROUTE, load_route

        app.add_middleware(contract.ContractGate)
        app.add_middleware(OpenAIErrors)  # outermost: SGLang's and the hooks' errors too
        app.add_api_route(ROUTE, load_route, methods=["GET"])  # the picker's report
    return original(server_args, *args, **kwargs)


def server_info_hook(original, server_args, *args, **kwargs):
    """``build_server_info`` (SGLang's /server_info): on an ADASERVE server, what the
    embedded server's /server_info says of SLOs and speculation, under the same keys, so a
    client (the load generator reads ``slo_classes``) needs no flag of its own."""
    info = original(server_args, *args, **kwargs)
    if not adaserve_selected(server_args):
        return info
    import os

    from adaserve.server.slo_ttft import NOMINAL_PROMPT_TOKENS, QUEUE_SLACK
    from adaserve.sglang.server_args import VERIFY_ENV

    classes, default = configured_classes()
    baseline = os.environ.get("ADASERVE_BASELINE_MS")
    chunk = chunk_of(server_args)
    rate = prefill_rate(chunk)

    def ttft_ms(tpot_ms):  # a class's default TTFT SLO for the nominal prompt
        ms = default_ttft(tpot_ms, NOMINAL_PROMPT_TOKENS, chunk)
        return None if ms is None else round(ms, 3)

    return {**info,
            "slo_classes": [{"name": c.name, "tpot_ms": c.tpot_ms, "spec": c.spec,
                             "ttft_ms": ttft_ms(c.tpot_ms)} for c in classes.values()],
            "default_slo_class": default,
            # what the defaults are reasoned from, under the embedded server's key
            "ttft_default": None if rate is None or not baseline else {
                "rule": "class multiple x queue_slack x (chunk_ms + prompt tokens x chunk_ms "
                        "/ prefill_chunk)", "queue_slack": QUEUE_SLACK,
                "prefill_chunk": rate.chunk_tokens, "chunk_ms": round(rate.chunk_s * 1e3, 3),
                "prompt_tokens": NOMINAL_PROMPT_TOKENS, "chunk_ms_from": PREFILL_ENV},
            "baseline_latency_ms": float(baseline) if baseline else None,
            "policy": os.environ.get("ADASERVE_POLICY", "adaserve"),
            "budget": int(os.environ.get("ADASERVE_BUDGET", 0)) or None,  # None: the layout
            "verify": os.environ.get(VERIFY_ENV) or "ragged where the target can"}

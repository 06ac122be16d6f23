"""SLOs on SGLang's HTTP routes: X-SLO-TPOT-MS / X-SLO-Class headers (or, behind a router,
their ``tracestate`` member: tracestate.py) and body ``custom_params`` (``tpot_slo_ms`` /
``slo_class``), resolved once at the edge by the
embedded server's rules, written back into ``custom_params`` (which SGLang carries to
``req.sampling_params.custom_params`` in the scheduler unchanged), and a bad value is a
400 before anything is queued.

Two AROUND hooks (plugin.register): ``http_server.serve_generate_request`` for /generate
and ``OpenAIServingBase.handle_request`` for /v1/chat/completions and /v1/completions.
The classes are ``slo.configured_classes()``, which the worker reads too, so both sides
agree. On a server not running ADASERVE both hooks pass the request through untouched:
installing adaserve must not change plain SGLang.
"""

from __future__ import annotations

from collections.abc import Mapping

from adaserve.server.slo_classes import SLOError
from adaserve.sglang.slo import adaserve_selected, configured_classes, request_slo
from adaserve.sglang.tracestate import slo_headers


def resolved(custom_params: Mapping | None, headers: Mapping[str, str]) -> dict:
    """custom_params with the request's SLO resolved into it (class and milliseconds;
    best effort: no tpot_slo_ms). The headers include the SLO a router carried on
    ``tracestate`` (tracestate.py). SLOError for bad input."""
    classes, default = configured_classes()
    label, slo = request_slo(custom_params, classes, default, slo_headers(headers))
    out = dict(custom_params or {})
    out["slo_class"] = label
    out.pop("tpot_slo_ms", None)
    if slo.tpot_s is not None:
        out["tpot_slo_ms"] = slo.tpot_s * 1e3
    return out


def _error_body(e: SLOError) -> dict:
    return {"error": {"message": str(e), "type": "invalid_request_error", "param": e.param,
                      "code": 400}}


async def generate_hook(original, obj, request):
    """/generate: every sampling_params of the (possibly batched) request gets its SLO."""
    from fastapi.responses import ORJSONResponse
    from sglang.srt.entrypoints.http_server import get_global_state

    if not adaserve_selected(getattr(get_global_state().tokenizer_manager, "server_args", None)):
        return await original(obj, request)
    params = obj.sampling_params
    many = isinstance(params, list)
    try:
        items = params if many else [params or {}]
        done = [{**p, "custom_params": resolved(p.get("custom_params"), request.headers)}
                for p in items]
    except SLOError as e:
        return ORJSONResponse(status_code=400, content=_error_body(e))
    obj.sampling_params = done if many else done[0]
    return await original(obj, request)


async def openai_hook(original, self, request, raw_request):
    """/v1/chat/completions and /v1/completions: custom_params of the OpenAI request."""
    if adaserve_selected(self.tokenizer_manager.server_args) and hasattr(request,
                                                                         "custom_params"):
        try:
            request.custom_params = resolved(request.custom_params, raw_request.headers)
        except SLOError as e:
            return self.create_error_response(str(e), param=e.param)
    return await original(self, request, raw_request)

"""The SLO report of a finished request in SGLang's response ``meta_info``: the same fields
the embedded server reports (``slo_class``, ``slo_tpot_ms``, ``slo_ttft_ms``, ``tpot_ms``,
``ttft_ms``, ``ttft_attained``, ``slo_attained``, ``accepted_tokens_per_step``), by its
definitions: ``slo_attained`` is every objective the request had (the TPOT within its SLO
and, where it had a TTFT SLO, the first token within it).

An AROUND hook on ``TokenizerManager._calculate_spec_decoding_metrics``, which SGLang
calls once per finished request of a speculative server, in the tokenizer manager, with
the request's state still registered: its ``custom_params`` (the SLO the HTTP hooks
resolved), its time stats (first token, finish) and the verify count.

On the OpenAI routes SGLang builds its own response from ``meta_info`` and leaves the
report out; ``openai_response_hook`` (AROUND the chat and completion builders) puts it at
the top level of a non-streaming body, where the embedded server puts it. Streamed,
``stream_report_hook`` (AROUND the chat and completion stream generators) puts it at the
top level of the chunk with the ``finish_reason`` and of the usage chunk, as the embedded
server does: the report is kept by request id when the request finishes (``report_hook``
runs before the stream sees its last output) and the chunk's ``id`` is that request id.
/generate's stream carries it in ``meta_info``. A stream refused before its first token is
answered 503 here, not streamed (``stream_report_hook``; /generate's in http.py).

With ``--enable-metrics`` the same hook records a client's request (not SGLang's health
checks or its start-up warm-up: ``log_metrics`` False) in the per-class SLO metrics
(``adaserve.server.slo_metrics``, DESIGN.md "Metrics"), which SGLang's ``/metrics`` then
shows beside its own: SGLang runs prometheus_client in multiprocess mode, and every
process's metrics land in its PROMETHEUS_MULTIPROC_DIR.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache

from adaserve.scheduler.slo import objectives_met
from adaserve.sglang.error_shape import stream_refusal
from adaserve.sglang.slo import adaserve_selected, chunk_of, default_ttft


def slo_report(custom_params: Mapping | None, completion_tokens: int, verify_ct: int,
               created_s: float, first_token_s: float, finished_s: float,
               default_ttft_ms: float | None = None) -> dict:
    """TPOT as the embedded server defines it: (finish - first token) / (tokens - 1); a
    request with one token has no gap to miss. TTFT: first token - arrival at the
    tokenizer manager; no first token misses a TTFT SLO. The TTFT SLO is the one the
    request named (``ttft_slo_ms``), else ``default_ttft_ms`` (its class's, slo.py)."""
    params = custom_params or {}
    slo_ms = params.get("tpot_slo_ms")
    tpot_ms = (1e3 * (finished_s - first_token_s) / (completion_tokens - 1)
               if completion_tokens > 1 and finished_s >= first_token_s > 0 else None)
    ttft_ms = 1e3 * (first_token_s - created_s) if first_token_s > 0 else None
    slo_ttft_ms = params.get("ttft_slo_ms", default_ttft_ms)
    _, ttft_met, met = objectives_met(tpot_ms, slo_ms, ttft_ms, slo_ttft_ms)
    return {
        "slo_class": params.get("slo_class"),
        "slo_tpot_ms": slo_ms,
        "slo_ttft_ms": slo_ttft_ms,
        "tpot_ms": tpot_ms,
        "ttft_ms": ttft_ms,
        "ttft_attained": ttft_met,
        "slo_attained": met,
        "accepted_tokens_per_step": completion_tokens / verify_ct if verify_ct > 0 else None,
    }


FIELDS = ("slo_class", "slo_tpot_ms", "slo_ttft_ms", "tpot_ms", "ttft_ms", "ttft_attained",
          "slo_attained", "accepted_tokens_per_step")


def openai_response_hook(original, self, request, ret, created):
    """SGLang's chat or completion body, with the SLO report of its (first) request."""
    response = original(self, request, ret, created)
    if not adaserve_selected(self.tokenizer_manager.server_args) or \
            not hasattr(response, "model_dump"):
        return response
    meta = (ret[0] if ret else {}).get("meta_info") or {}
    report = {k: meta[k] for k in FIELDS if k in meta}
    if not report:
        return response
    from fastapi.responses import ORJSONResponse

    return ORJSONResponse({**response.model_dump(), **report})


# the report of each finished request, by request id, for its stream's last chunks; a
# non-streamed request's is never taken, so the oldest go past the bound
_FINISHED: OrderedDict[str, dict] = OrderedDict()
_KEPT = 4096


def _keep(rid: str, report: dict) -> None:
    _FINISHED[rid] = report
    while len(_FINISHED) > _KEPT:
        _FINISHED.popitem(last=False)


def with_report(chunk: str) -> str:
    """An SSE chunk of SGLang's OpenAI stream, with the SLO report of its request at the
    top level when it is the finish chunk (a choice with a finish_reason) or the usage
    chunk (no choices); other chunks, and any chunk whose request left no report, as they
    came."""
    if not chunk.startswith("data: {"):
        return chunk
    try:
        doc = json.loads(chunk[len("data: "):])
    except ValueError:
        return chunk
    choices = doc.get("choices")
    last = choices == [] and doc.get("usage") is not None
    if not (last or any(isinstance(c, dict) and c.get("finish_reason") for c in choices or [])):
        return chunk
    report = _FINISHED.get(str(doc.get("id")))
    if report is None:
        return chunk
    if last:
        _FINISHED.pop(str(doc.get("id")), None)
    return f"data: {json.dumps({**doc, **report})}\n\n"


async def stream_report_hook(original, self, adapted_request, request, raw_request):
    """SGLang's chat or completion stream, its finish and usage chunks carrying the SLO
    report. A stream refused before its first token (its first event a 503 abort:
    error_shape.stream_refusal) raises the 503 instead: SGLang's streaming handler draws
    the first event before it answers 200 and answers an HTTPException as an error."""
    chunks = original(self, adapted_request, request, raw_request)
    ours = adaserve_selected(self.tokenizer_manager.server_args)
    first = ours
    async for chunk in chunks:
        if first:
            first = False
            refused = stream_refusal(chunk)
            if refused is not None:
                from fastapi import HTTPException

                raise HTTPException(status_code=503, detail=refused)
        yield with_report(chunk) if ours and isinstance(chunk, str) else chunk


def report_hook(original, self, meta_info, recv_obj, i):
    original(self, meta_info, recv_obj, i)
    if not adaserve_selected(self.server_args):  # another algorithm's server: not ours
        return
    state = self.rid_to_state.get(recv_obj.rids[i])
    if state is None:
        return
    params = state.obj.sampling_params if isinstance(state.obj.sampling_params, Mapping) else {}
    verify = getattr(recv_obj, "spec_verify_ct", None)
    ts = state.time_stats
    tokens = int(recv_obj.completion_tokens[i])
    custom = params.get("custom_params")
    report = slo_report(custom, tokens,
                        int(verify[i]) if verify is not None and len(verify) > i else 0,
                        ts.created_time, ts.first_token_time, ts.finished_time,
                        _default_ttft(custom, recv_obj, i, self.server_args))
    meta_info.update(report)
    _keep(str(recv_obj.rids[i]), report)
    # SGLang's own rule for its metrics: health checks (and, marked by http.generate_hook,
    # the start-up warm-up) are not clients' requests
    if not getattr(state.obj, "log_metrics", True):
        return
    from adaserve.sglang import load
    from adaserve.sglang.slo import configured_classes

    # what the picker reads of this replica's recent requests (GET /adaserve/load)
    tpot_met = objectives_met(report["tpot_ms"], report["slo_tpot_ms"], None, None)[0]
    load.finished(report["slo_class"] or configured_classes()[1], report["tpot_ms"],
                  report["ttft_ms"], (tpot_met, report["ttft_attained"], report["slo_attained"]))
    if getattr(self, "enable_metrics", False):
        metrics, default_class = _metrics()
        ms = lambda v: None if v is None else v / 1e3  # noqa: E731
        metrics.observe(report["slo_class"] or default_class, report["slo_attained"], tokens,
                        ms(report["tpot_ms"]), ms(report["ttft_ms"]), report["ttft_attained"])


def _default_ttft(custom_params: Mapping | None, recv_obj, i: int, server_args) -> float | None:
    """The TTFT SLO of a request that named none: its class's default for its own prompt
    (slo.default_ttft); None where it named one, or nothing gives a default."""
    if not isinstance(custom_params, Mapping) or custom_params.get("ttft_slo_ms") is not None:
        return None
    prompts = getattr(recv_obj, "prompt_tokens", None)
    if prompts is None or len(prompts) <= i:
        return None
    return default_ttft(custom_params.get("tpot_slo_ms"), int(prompts[i]),
                        chunk_of(server_args))


@lru_cache(maxsize=1)
def _metrics():
    """Made on the first finished request, not when the plugin loads: prometheus_client
    picks multiprocess mode when it is first imported, and SGLang sets
    PROMETHEUS_MULTIPROC_DIR after plugins load. (Its own collectors import late too.)"""
    from adaserve.server.slo_metrics import SloMetrics
    from adaserve.sglang.slo import configured_classes

    classes, default_class = configured_classes()
    return SloMetrics(list(classes)), default_class

"""The OpenAI-compatible routes: /v1/chat/completions and /v1/completions, whole answers or
SSE chunks (``stream: true``); both carry the SLO report (when streaming, the chunk with the
finish_reason and, with ``stream_options.include_usage``, the usage chunk after it, as
OpenAI streams usage: only when asked)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from adaserve.server import errors, sse
from adaserve.server.admission import admit, check_model, params_for, slo_for
from adaserve.server.jobs import Job
from adaserve.server.protocol import ChatCompletionRequest, CompletionRequest
from adaserve.server.state import ServerDep

router = APIRouter(dependencies=[Depends(errors.require_json)])

# (delta, finish_reason) -> one chunk of the route's streaming shape
Chunk = Callable[[dict, str | None], dict]


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           srv: ServerDep) -> Response:
    check_model(srv, body.model)
    slo_class, slo = slo_for(srv, request, body.slo, body.custom_params)
    ids = srv.engine.encode_chat([m.model_dump() for m in body.messages])
    params = params_for(srv, len(ids), "messages",
                        max_tokens=body.max_completion_tokens or body.max_tokens,
                        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                        seed=body.seed, stop=body.stop, ignore_eos=body.ignore_eos,
                        max_param="max_completion_tokens" if body.max_completion_tokens
                        else "max_tokens")
    job = admit(srv, ids, params, slo_class, slo)
    created, rid, model = int(time.time()), f"chatcmpl-{job.rid}", srv.settings.model_name
    if body.stream:
        def chunk(delta: dict, finish: str | None) -> dict:
            return {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return sse.response(_stream(job, request, chunk, first={"role": "assistant"},
                                    delta=lambda t: {"content": t},
                                    usage=_include_usage(body)))
    text, last = await job.collect(request)
    return JSONResponse({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": last.finish_reason}],
        "usage": job.usage(last.stats), **job.finished(last)})


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request, srv: ServerDep) -> Response:
    check_model(srv, body.model)
    slo_class, slo = slo_for(srv, request, body.slo, body.custom_params)
    text_prompt = isinstance(body.prompt, str)
    ids = srv.engine.encode(body.prompt) if text_prompt else list(body.prompt)
    params = params_for(srv, len(ids), "prompt", max_tokens=body.max_tokens,
                        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                        seed=body.seed, stop=body.stop, ignore_eos=body.ignore_eos)
    job = admit(srv, ids, params, slo_class, slo)
    created, rid, model = int(time.time()), f"cmpl-{job.rid}", srv.settings.model_name
    echo = body.prompt if body.echo and text_prompt else ""
    if body.stream:
        def chunk(delta: dict, finish: str | None) -> dict:
            return {"id": rid, "object": "text_completion", "created": created,
                    "model": model,
                    "choices": [{"index": 0, "text": delta.get("text", ""),
                                 "finish_reason": finish}]}
        return sse.response(_stream(job, request, chunk, first={"text": echo} if echo else None,
                                    delta=lambda t: {"text": t},
                                    usage=_include_usage(body)))
    text, last = await job.collect(request)
    return JSONResponse({
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": echo + text, "finish_reason": last.finish_reason}],
        "usage": job.usage(last.stats), **job.finished(last)})


def _include_usage(body) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


async def _stream(job: Job, request: Request, chunk: Chunk, first: dict | None,
                  delta: Callable[[str], dict], usage: bool) -> AsyncIterator[str]:
    """An optional first chunk, one chunk per output with text, then the chunk with the
    finish_reason and the SLO report, then [DONE]. With ``usage`` (stream_options.
    include_usage), as OpenAI does: every chunk has ``"usage": null`` and one more chunk,
    with no choices, carries the usage, and the SLO report again, so the stream still ends
    with it."""
    def event(c: dict) -> str:
        return sse.event({**c, "usage": None} if usage else c)

    with job.aborted_unless_done():
        if first is not None:
            yield event(chunk(first, None))
        while True:
            out = await job.next_output(request)
            if out is None:
                return
            if out.text:
                yield event(chunk(delta(out.text), None))
            if out.finished:
                if out.finish_reason == "error":
                    yield sse.event(errors.error_body(500, f"generation failed: {out.error}"))
                else:
                    report = job.finished(out)
                    yield event({**chunk(delta(""), out.finish_reason), **report})
                    if usage:
                        yield sse.event({**chunk({}, None), "choices": [],
                                         "usage": job.usage(out.stats), **report})
                yield sse.DONE
                return

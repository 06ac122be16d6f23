"""The HTTP contract (DESIGN.md) over an `Engine`: OpenAI-compatible chat and text
completions, SGLang's /generate, SLOs per request, SSE streaming, metrics, dashboard.

The engine loop runs on its own thread; each request hands it a callback that moves
outputs onto the event loop (call_soon_threadsafe), so no handler ever blocks the loop.
A request whose client goes away is aborted: its KV is freed at the next iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from adaserve import __version__
from adaserve.engine import Engine, SamplingParams
from adaserve.engine.core import QueueFull
from adaserve.engine.request import Output, RequestStats
from adaserve.server import errors
from adaserve.server.errors import APIError
from adaserve.server.metrics import ServerMetrics
from adaserve.server.protocol import (ChatCompletionRequest, CompletionRequest,
                                      GenerateRequest, SLOField)
from adaserve.server.slo_classes import SLOClass, SLOError, resolve
from adaserve.scheduler import SLO

DEFAULT_MAX_TOKENS = 256  # when a request names none (capped by the context left)
MAX_STOP = 16


@dataclass
class ServerSettings:
    model_name: str
    classes: dict[str, SLOClass]
    default_class: str
    baseline_ms: float | None
    max_body_bytes: int = 1 << 20
    retry_after_s: int = 1
    extra_info: dict = field(default_factory=dict)  # shown on /server_info


@dataclass(slots=True)
class _Job:
    """One admitted request, as the handlers see it."""

    rid: str
    slo_class: str
    prompt_tokens: int
    queue: asyncio.Queue
    done: bool = False  # its finished output was read


def create_app(engine: Engine, settings: ServerSettings) -> FastAPI:
    if settings.default_class not in settings.classes:
        raise ValueError(f"default class {settings.default_class!r} is not one of "
                         f"{', '.join(settings.classes)}")
    app = FastAPI(title="AdaServe", version=__version__,
                  description="SLO-customized LLM serving: every request may carry its own "
                  "TPOT SLO (body `slo`, or headers X-SLO-TPOT-MS / X-SLO-Class).")
    errors.install(app)
    app.add_middleware(errors.RequestLimits, limit=settings.max_body_bytes)
    metrics = ServerMetrics(list(settings.classes))
    app.state.engine, app.state.settings, app.state.metrics = engine, settings, metrics
    max_context = engine.config.max_context

    def on_iteration(s) -> None:
        try:
            metrics.on_iteration(s)
        except Exception:  # metrics must never fail an engine iteration
            pass

    engine.core.on_iteration = on_iteration

    # ---- admission --------------------------------------------------------------------

    def params_for(n_prompt: int, max_tokens: int | None, temperature: float, top_p: float,
                   top_k: int, seed: int | None, stop, ignore_eos: bool,
                   prompt_param: str) -> SamplingParams:
        if n_prompt == 0:
            raise APIError(400, "the prompt is empty", prompt_param)
        if n_prompt >= max_context:
            raise APIError(400, f"the prompt is {n_prompt} tokens; this server's context limit "
                           f"is {max_context} tokens (prompt + output)", prompt_param,
                           code="context_length_exceeded")
        room = max_context - n_prompt
        if max_tokens is None:
            max_tokens = min(DEFAULT_MAX_TOKENS, room)
        elif max_tokens > room:
            raise APIError(400, f"max_tokens={max_tokens} does not fit: the prompt is {n_prompt} "
                           f"tokens and the context limit is {max_context}, so at most {room}",
                           "max_tokens", code="context_length_exceeded")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if len(stops) > MAX_STOP or any(not s or len(s) > 256 for s in stops):
            raise APIError(400, f"stop takes at most {MAX_STOP} non-empty strings of at most "
                           "256 characters", "stop")
        return SamplingParams(max_tokens=max_tokens, temperature=float(temperature),
                              top_p=float(top_p), top_k=max(0, top_k), seed=seed, stop=stops,
                              ignore_eos=ignore_eos)

    def slo_for(request: Request, body_slo: SLOField | dict | None) -> tuple[str, SLO]:
        mapping = body_slo.as_mapping() if isinstance(body_slo, SLOField) else body_slo
        try:
            return resolve(mapping, request.headers, settings.classes, settings.default_class)
        except SLOError as e:
            raise APIError(400, str(e), e.param) from None

    def check_model(name: str | None) -> None:
        if name is not None and name not in (settings.model_name, engine.config.model):
            raise APIError(404, f"model {name!r} is not served here; GET /v1/models lists "
                           f"{settings.model_name!r}", "model", code="model_not_found")

    def admit(ids: list[int], params: SamplingParams, slo_class: str, slo: SLO,
              rid: str | None = None) -> _Job:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()

        def deliver(out: Output) -> None:  # engine thread -> event loop
            loop.call_soon_threadsafe(q.put_nowait, out)

        try:
            rid = engine.submit(ids, params, slo=slo, request_id=rid, on_output=deliver)
        except QueueFull as e:
            metrics.rejected.labels("queue_full").inc()
            raise APIError(503, f"the server is at capacity ({e}); retry later",
                           headers={"Retry-After": str(settings.retry_after_s)}) from None
        except ValueError as e:
            metrics.rejected.labels("invalid").inc()
            raise APIError(400, str(e)) from None
        return _Job(rid, slo_class, len(ids), q)

    async def next_output(job: _Job, request: Request) -> Output | None:
        """The job's next output; None once the client has gone."""
        while True:
            try:
                out = await asyncio.wait_for(job.queue.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return None
                continue
            job.done = out.finished
            return out

    @contextlib.contextmanager
    def aborted_unless_done(job: _Job) -> Iterator[None]:
        """Whatever ends a handler or stream before the job finished (the client left, the
        server stops, an error), the engine aborts the job and frees its KV."""
        try:
            yield
        finally:
            if not job.done:
                engine.abort(job.rid)

    def finished(job: _Job, out: Output) -> dict:
        """Record a finished request; its SLO report (DESIGN.md: every response)."""
        st = out.stats
        if st is not None:
            metrics.on_finished(job.slo_class, st)
        return slo_report(job.slo_class, st)

    # ---- OpenAI endpoints ---------------------------------------------------------------

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        check_model(body.model)
        slo_class, slo = slo_for(request, body.slo)
        ids = engine.encode_chat([m.model_dump() for m in body.messages])
        params = params_for(len(ids), body.max_completion_tokens or body.max_tokens,
                            body.temperature, body.top_p, body.top_k, body.seed, body.stop,
                            body.ignore_eos, "messages")
        job = admit(ids, params, slo_class, slo)
        created = int(time.time())
        rid = f"chatcmpl-{job.rid}"
        if body.stream:
            def chunk(delta: dict, finish: str | None) -> dict:
                return {"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": settings.model_name,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return _sse(stream_openai(job, request, chunk, first={"role": "assistant"},
                                      delta=lambda t: {"content": t}))
        out_text, last = await collect(job, request)
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": created,
            "model": settings.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out_text},
                         "finish_reason": last.finish_reason}],
            "usage": usage(job, last.stats), **finished(job, last)})

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        check_model(body.model)
        slo_class, slo = slo_for(request, body.slo)
        ids = engine.encode(body.prompt) if isinstance(body.prompt, str) else list(body.prompt)
        params = params_for(len(ids), body.max_tokens, body.temperature, body.top_p, body.top_k,
                            body.seed, body.stop, body.ignore_eos, "prompt")
        job = admit(ids, params, slo_class, slo)
        created = int(time.time())
        rid = f"cmpl-{job.rid}"
        echo = body.prompt if body.echo and isinstance(body.prompt, str) else ""
        if body.stream:
            def chunk(delta: dict, finish: str | None) -> dict:
                return {"id": rid, "object": "text_completion", "created": created,
                        "model": settings.model_name,
                        "choices": [{"index": 0, "text": delta.get("text", ""),
                                     "finish_reason": finish}]}
            return _sse(stream_openai(job, request, chunk, first={"text": echo} if echo else None,
                                      delta=lambda t: {"text": t}))
        out_text, last = await collect(job, request)
        return JSONResponse({
            "id": rid, "object": "text_completion", "created": created,
            "model": settings.model_name,
            "choices": [{"index": 0, "text": echo + out_text, "finish_reason": last.finish_reason}],
            "usage": usage(job, last.stats), **finished(job, last)})

    async def collect(job: _Job, request: Request) -> tuple[str, Output]:
        parts = []
        with aborted_unless_done(job):
            while True:
                out = await next_output(job, request)
                if out is None:  # the client left; nobody reads this answer
                    raise APIError(499, "client closed the request")
                parts.append(out.text)
                if out.finished:
                    if out.finish_reason == "error":
                        raise APIError(500, f"generation failed: {out.error}")
                    return "".join(parts), out

    async def stream_openai(job: _Job, request: Request, chunk, first: dict | None,
                            delta) -> AsyncIterator[str]:
        with aborted_unless_done(job):
            if first is not None:
                yield _event(chunk(first, None))
            while True:
                out = await next_output(job, request)
                if out is None:
                    return
                if out.text:
                    yield _event(chunk(delta(out.text), None))
                if out.finished:
                    if out.finish_reason == "error":
                        yield _event(errors.error_body(500, f"generation failed: {out.error}"))
                    else:
                        final = chunk(delta(""), out.finish_reason)
                        final["usage"] = usage(job, out.stats)
                        final.update(finished(job, out))
                        yield _event(final)
                    yield "data: [DONE]\n\n"
                    return

    # ---- SGLang-native ------------------------------------------------------------------

    @app.post("/generate")
    async def generate(body: GenerateRequest, request: Request) -> Response:
        sp = body.sampling_params
        body_slo = body.slo.as_mapping() if body.slo is not None else _custom_slo(sp.custom_params)
        slo_class, slo = slo_for(request, body_slo)
        ids = engine.encode(body.text) if body.text is not None else list(body.input_ids)
        params = params_for(len(ids), sp.max_new_tokens, sp.temperature, sp.top_p, sp.top_k,
                            sp.sampling_seed, sp.stop, sp.ignore_eos,
                            "text" if body.text is not None else "input_ids")
        job = admit(ids, params, slo_class, slo, rid=body.rid)

        def meta(out: Output | None, n_out: int) -> dict:
            m = {"id": job.rid, "prompt_tokens": job.prompt_tokens, "completion_tokens": n_out,
                 "finish_reason": None if out is None or not out.finished
                 else {"type": out.finish_reason}}
            if out is not None and out.finished:
                m.update(finished(job, out))
            return m

        if not body.stream:
            text, last = await collect(job, request)
            n = last.stats.output_tokens if last.stats else 0
            return JSONResponse({"text": text, "meta_info": meta(last, n)})

        async def events() -> AsyncIterator[str]:
            text, n = "", 0
            with aborted_unless_done(job):
                while True:
                    out = await next_output(job, request)
                    if out is None:
                        return
                    text += out.text
                    n += len(out.token_ids)
                    if out.finished and out.finish_reason == "error":
                        yield _event(errors.error_body(500, f"generation failed: {out.error}"))
                        yield "data: [DONE]\n\n"
                        return
                    if out.text or out.finished:  # SGLang streams the text so far
                        yield _event({"text": text, "meta_info": meta(out, n)})
                    if out.finished:
                        yield "data: [DONE]\n\n"
                        return

        return _sse(events())

    # ---- information ----------------------------------------------------------------------

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model",
                                            "created": 0, "owned_by": "adaserve"}]}

    @app.get("/health")
    async def health() -> Response:
        if not engine.alive:
            return errors.error_response(503, "the engine loop has stopped")
        return JSONResponse({"status": "ok"})

    @app.get("/server_info")
    async def server_info() -> dict:
        pol = engine.core.policy.config
        cfg = engine.config
        return {
            "version": __version__, "model": settings.model_name, "draft": cfg.draft,
            "policy": cfg.policy, "budget": pol.budget, "max_depth": pol.max_depth,
            "max_width": pol.max_width, "cost_aware_depth": pol.cost_aware_depth,
            "device": engine.models.device, "max_context": max_context,
            "max_batch": engine.core.kv.n_slots, "max_waiting": cfg.max_waiting,
            "baseline_latency_ms": settings.baseline_ms,
            "slo_classes": [{"name": c.name, "tpot_ms": c.tpot_ms, "spec": c.spec}
                            for c in settings.classes.values()],
            "default_slo_class": settings.default_class,
            "profile": None if engine.profile is None else {
                "date": engine.profile.date, "knee_found": engine.profile.knee_found},
            **settings.extra_info,
        }

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.running.set(engine.core.n_decode)
        metrics.waiting.set(len(engine.core.waiting))
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    static = Path(__file__).parent / "static"

    @app.get("/dashboard", response_class=HTMLResponse)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse((static / "dashboard.html").read_text())

    @app.get("/dashboard/data")
    async def dashboard_data(seconds: float = 300.0) -> dict:
        snap = metrics.snapshot(min(max(seconds, 10.0), 600.0))
        snap["classes"] = [{"name": c.name, "tpot_ms": c.tpot_ms}
                           for c in settings.classes.values()] + [{"name": "custom",
                                                                    "tpot_ms": None}]
        snap["running"], snap["waiting"] = engine.core.n_decode, len(engine.core.waiting)
        snap["budget"] = engine.core.policy.config.budget
        snap["policy"], snap["model"] = engine.config.policy, settings.model_name
        return snap

    return app


def slo_report(slo_class: str, st: RequestStats | None) -> dict:
    """The fields every response carries (DESIGN.md "HTTP contract")."""
    def ms(x):
        return None if x is None else round(x * 1e3, 3)

    if st is None:
        return {"slo_class": slo_class, "slo_tpot_ms": None, "tpot_ms": None, "ttft_ms": None,
                "slo_attained": None, "accepted_tokens_per_step": None}
    return {"slo_class": slo_class, "slo_tpot_ms": ms(st.slo_tpot_s), "tpot_ms": ms(st.tpot_s),
            "ttft_ms": ms(st.ttft_s), "slo_attained": st.slo_attained,
            "accepted_tokens_per_step": round(st.accepted_tokens_per_step, 4)}


def usage(job: _Job, st: RequestStats | None) -> dict:
    n = st.output_tokens if st else 0
    return {"prompt_tokens": job.prompt_tokens, "completion_tokens": n,
            "total_tokens": job.prompt_tokens + n}


def _custom_slo(custom: dict | None) -> dict | None:
    """SGLang-style custom_params {tpot_slo_ms, slo_class} as a body slo mapping."""
    if not custom:
        return None
    ms, cls = custom.get("tpot_slo_ms"), custom.get("slo_class")
    if ms is None and cls is None:
        return None
    return {"tpot_ms": ms, "class": cls}


def _event(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _sse(gen: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(gen, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


"""Admission, shared by every generating route: from a validated body to a running engine
job. The model it names, its SLO (first match wins, slo_classes.resolve; the TTFT SLO the
class gives when the request names none, once its prompt's length is known: slo_ttft.py),
its sampling parameters checked against the context limit, then submission: 503 with
Retry-After when the queue is full, 400 for what the engine refuses. Nothing is queued
before every check has passed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

from fastapi import Request

from adaserve.engine import SamplingParams
from adaserve.engine.core import QueueFull
from adaserve.engine.request import Output
from adaserve.scheduler import SLO
from adaserve.scheduler.admission import retry_after_s
from adaserve.server.errors import APIError, at_capacity
from adaserve.server.jobs import Job
from adaserve.server.lengths import LengthError, output_limit
from adaserve.server.protocol import SLOField
from adaserve.server.slo_classes import SLOError, request_slo
from adaserve.server.state import Server

MAX_STOP = 16


def check_model(srv: Server, name: str | None) -> None:
    if name is not None and name not in (srv.settings.model_name, srv.engine.config.model):
        raise APIError(404, f"model {name!r} is not served here; GET /v1/models lists "
                       f"{srv.settings.model_name!r}", "model", code="model_not_found")


def slo_for(srv: Server, request: Request, body_slo: SLOField | Mapping | None,
            custom_params: object = None,
            custom_at: str = "custom_params") -> tuple[str, SLO]:
    """(class label, SLO) from the body's slo, else custom_params, else the headers, else
    the default class (slo_classes.request_slo, as SGLang with the plugin resolves it)."""
    mapping = body_slo.as_mapping() if isinstance(body_slo, SLOField) else body_slo
    try:
        return request_slo(mapping, custom_params, request.headers, srv.settings.classes,
                           srv.settings.default_class, custom_at)
    except SLOError as e:
        raise APIError(400, str(e), e.param) from None


def params_for(srv: Server, n_prompt: int, prompt_param: str, *, max_tokens: int | None,
               temperature: float, top_p: float, top_k: int, seed: int | None,
               stop: str | list[str] | None, ignore_eos: bool,
               max_param: str = "max_tokens") -> SamplingParams:
    """The engine's sampling parameters; APIError naming the field when the prompt is empty
    or does not leave room for max_tokens, or stop is unusable."""
    try:
        max_tokens = output_limit(n_prompt, max_tokens, srv.engine.config.max_context,
                                  prompt_param, max_param)
    except LengthError as e:
        raise APIError(400, str(e), e.param, code=e.code) from None
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOP or any(not s or len(s) > 256 for s in stops):
        raise APIError(400, f"stop takes at most {MAX_STOP} non-empty strings of at most "
                       "256 characters", "stop")
    return SamplingParams(max_tokens=max_tokens, temperature=float(temperature),
                          top_p=float(top_p), top_k=max(0, top_k), seed=seed, stop=stops,
                          ignore_eos=ignore_eos)


def with_default_ttft(srv: Server, slo: SLO, prompt_tokens: int) -> SLO:
    """``slo`` with the TTFT SLO its TPOT and prompt give by default (slo_ttft.py), unless
    the request named one."""
    if slo.ttft_s is not None:
        return slo
    ms = srv.default_ttft_ms(None if slo.tpot_s is None else slo.tpot_s * 1e3, prompt_tokens)
    return slo if ms is None else replace(slo, ttft_s=ms / 1e3)


def admit(srv: Server, ids: list[int], params: SamplingParams, slo_class: str, slo: SLO,
          rid: str | None = None) -> Job:
    """Submit to the engine, with the default TTFT SLO filled in; its outputs reach the
    job's queue on the event loop."""
    slo = with_default_ttft(srv, slo, len(ids))
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()

    def deliver(out: Output) -> None:  # engine thread -> event loop
        loop.call_soon_threadsafe(q.put_nowait, out)

    try:
        rid = srv.engine.submit(ids, params, slo=slo, request_id=rid, on_output=deliver)
    except QueueFull as e:
        # refused at the door for its TTFT or TPOT (a policy with refuse or refuse_tpot
        # on), or a full queue
        srv.metrics.rejected.labels(e.reason).inc()
        retry = (retry_after_s(e.retry_after_s) if e.retry_after_s is not None
                 else max(1, srv.settings.retry_after_s))
        raise APIError(503, at_capacity(str(e)), headers={"Retry-After": str(retry)}) from None
    except ValueError as e:
        srv.metrics.rejected.labels("invalid").inc()
        raise APIError(400, str(e)) from None
    return Job(srv, rid, slo_class, len(ids), q)

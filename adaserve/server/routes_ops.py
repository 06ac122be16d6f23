"""Operations: /health, /v1/models, /server_info, Prometheus /metrics, and the dashboard
page with the data it polls."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse, Response

from adaserve import __version__
from adaserve.scheduler import budget_table
from adaserve.server import errors
from adaserve.server.slo_ttft import NOMINAL_PROMPT_TOKENS, QUEUE_SLACK
from adaserve.server.state import Server, ServerDep

router = APIRouter()
STATIC = Path(__file__).parent / "static"


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "adaserve"}


@router.get("/v1/models")
async def models(srv: ServerDep) -> dict:
    return {"object": "list", "data": [_model(srv.settings.model_name)]}


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, srv: ServerDep) -> Response:
    """One model (the OpenAI client's ``models.retrieve``); 404 in OpenAI's error shape for
    a model that is not served here. Ids may hold slashes (org/name), hence ``:path``."""
    if model_id != srv.settings.model_name:
        return errors.error_response(404, f"model {model_id!r} is not served here; GET "
                                     f"/v1/models lists {srv.settings.model_name!r}",
                                     "model", code="model_not_found")
    return JSONResponse(_model(model_id))


@router.get("/health")
async def health(srv: ServerDep) -> Response:
    if not srv.engine.alive:
        return errors.error_response(503, "the engine loop has stopped")
    return JSONResponse({"status": "ok"})


@router.get("/server_info")
async def server_info(srv: ServerDep) -> dict:
    engine, settings = srv.engine, srv.settings
    pol, cfg = engine.core.policy.config, engine.config
    return {
        "version": __version__, "model": settings.model_name, "draft": cfg.draft,
        "policy": cfg.policy, "budget": pol.budget, "max_depth": pol.max_depth,
        "max_width": pol.max_width, "min_depth": pol.min_depth,
        "draft_budget": pol.spec_budget, "cost_aware_depth": pol.cost_aware_depth,
        "device": engine.models.device, "max_context": cfg.max_context,
        "max_batch": engine.core.n_slots, "max_waiting": cfg.max_waiting,
        "kv_cache": _kv_cache(engine),
        # None when off; else its interval (docs/draft.md "Online adaptation")
        "online_draft": None if cfg.online_draft is None else {
            "interval": cfg.online_draft.interval},
        "baseline_latency_ms": settings.baseline_ms,
        "slo_classes": [{"name": c.name, "tpot_ms": c.tpot_ms, "spec": c.spec,
                         "ttft_ms": _rounded(srv.default_ttft_ms(c.tpot_ms))}
                        for c in settings.classes.values()],
        "default_slo_class": settings.default_class,
        "ttft_default": _ttft_default(srv),
        "profile": None if engine.profile is None else {
            "date": engine.profile.date, "budget": engine.profile.budget,
            "budget_rule": engine.profile.budget_rule,
            "budget_ratio": engine.profile.samples.get("budget_ratio"),
            "knee_found": engine.profile.knee_found,
            # B at each measured context by the same rule (context_cost.budget_table); None
            # for a profile without a context table
            "budget_by_context": _budget_by_context(engine.profile)},
        **settings.extra_info,
    }


def _budget_by_context(profile) -> dict[str, int] | None:
    budgets = None if profile.target_table is None else budget_table(profile.target_table)
    return None if budgets is None else {str(c): b.tokens for c, b in budgets.items()}


def _kv_cache(engine) -> dict | None:
    """The KV pool as sized at start-up (engine/kv_pool.py); None off the torch executor."""
    pool = getattr(engine.core.executor, "pool", None)
    if pool is None:
        return None
    cfg = engine.config
    return {"slots": pool.n_slots, "mib": round(pool.nbytes / 2**20, 1),
            "slot_mib": round(pool.slot_bytes / 2**20, 2), "kv_cache_mb": cfg.kv_cache_mb,
            "sized_from": pool.source, "draft_window": cfg.draft_window,
            "draft_sinks": cfg.draft_sinks if cfg.draft_window is not None else None}


def _rounded(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 3)


def _ttft_default(srv: Server) -> dict | None:
    """What the classes' default TTFT SLOs are reasoned from (slo_ttft.py); their
    ``ttft_ms`` are for a prompt of ``prompt_tokens``, a request's for its own prompt."""
    rate = srv.prefill
    if rate is None or srv.settings.baseline_ms is None:
        return None
    return {"rule": "class multiple x queue_slack x (chunk_ms + prompt tokens x chunk_ms / "
                    "prefill_chunk)", "queue_slack": QUEUE_SLACK,
            "prefill_chunk": rate.chunk_tokens, "chunk_ms": round(rate.chunk_s * 1e3, 3),
            "prompt_tokens": NOMINAL_PROMPT_TOKENS}


@router.get("/metrics")
async def prometheus(srv: ServerDep) -> Response:
    srv.metrics.running.set(srv.engine.core.n_decode)
    srv.metrics.waiting.set(len(srv.engine.core.waiting))
    if srv.engine.online is not None:
        srv.metrics.on_online_draft(srv.engine.online.state())
    return Response(srv.metrics.exposition(), media_type="text/plain; version=0.0.4")


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    return HTMLResponse((STATIC / "dashboard.html").read_text())


@router.get("/dashboard/data")
async def dashboard_data(srv: ServerDep, seconds: float = 300.0) -> dict:
    core = srv.engine.core
    snap = srv.metrics.snapshot(min(max(seconds, 10.0), 600.0))
    snap["classes"] = [{"name": c.name, "tpot_ms": c.tpot_ms,
                        "ttft_ms": _rounded(srv.default_ttft_ms(c.tpot_ms))}
                       for c in srv.settings.classes.values()] + [{"name": "custom",
                                                                   "tpot_ms": None,
                                                                   "ttft_ms": None}]
    snap["running"], snap["waiting"] = core.n_decode, len(core.waiting)
    snap["budget"] = core.policy.config.budget
    snap["policy"], snap["model"] = srv.engine.config.policy, srv.settings.model_name
    return snap

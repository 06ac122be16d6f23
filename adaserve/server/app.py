"""The HTTP contract (DESIGN.md) over an `Engine`: one FastAPI app made of three routers —
OpenAI-compatible completions (routes_openai), SGLang's /generate (routes_generate) and
operations (routes_ops) — sharing admission (admission.py, jobs.py) and reaching the
engine, settings and metrics through ``app.state.server`` (state.py).

The engine loop runs on its own thread; each request hands it a callback that moves
outputs onto the event loop (call_soon_threadsafe), so no handler ever blocks the loop.
A request whose client goes away is aborted: its KV is freed at the next iteration.
"""

from __future__ import annotations

from fastapi import FastAPI

from adaserve import __version__
from adaserve.engine import Engine
from adaserve.engine.core import IterationStats
from adaserve.server import errors, routes_generate, routes_openai, routes_ops
from adaserve.server.metrics import ServerMetrics
from adaserve.server.state import Server, ServerSettings

__all__ = ["ServerSettings", "create_app"]


def create_app(engine: Engine, settings: ServerSettings) -> FastAPI:
    """The app serving ``engine``; ValueError for settings it cannot serve."""
    server = Server.of(engine, settings)
    app = FastAPI(title="AdaServe", version=__version__,
                  description="SLO-customized LLM serving: every request may carry its own "
                  "TPOT SLO (body `slo`, or headers X-SLO-TPOT-MS / X-SLO-Class) and TTFT "
                  "SLO (body `slo.ttft_ms`, or header X-SLO-TTFT-MS).")
    errors.install(app)
    app.add_middleware(errors.RequestLimits, limit=settings.max_body_bytes)
    app.state.server = server
    engine.core.on_iteration = _recorder(server.metrics)
    for router in (routes_openai.router, routes_generate.router, routes_ops.router):
        app.include_router(router)
    return app


def _recorder(metrics: ServerMetrics):
    def on_iteration(s: IterationStats) -> None:
        try:
            metrics.on_iteration(s)
        except Exception:  # metrics must never fail an engine iteration
            pass
    return on_iteration

"""Each router of the server stands alone: mounted on a bare app with the typed carrier on
app.state.server, it serves its routes and only those."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from live_server import BASELINE_MS

from adaserve.server import errors, routes_generate, routes_openai, routes_ops
from adaserve.server.app import create_app
from adaserve.server.slo_classes import parse_classes
from adaserve.server.state import Server, ServerSettings

SETTINGS = ServerSettings(model_name="alone", default_class="free", baseline_ms=BASELINE_MS,
                          classes=parse_classes("urgent=x1,free", BASELINE_MS))


def _alone(engine, router) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.state.server = Server.of(engine, SETTINGS)
    app.include_router(router)
    return TestClient(app)


def _paths(router) -> set[str]:
    return {r.path for r in router.routes}


def test_each_surface_has_its_own_routes():
    assert _paths(routes_openai.router) == {"/v1/chat/completions", "/v1/completions"}
    assert _paths(routes_generate.router) == {"/generate"}
    assert _paths(routes_ops.router) == {"/v1/models", "/v1/models/{model_id:path}", "/health",
                                         "/server_info", "/metrics", "/dashboard",
                                         "/dashboard/data"}


def test_operations_router_alone(live):
    with _alone(live.engine, routes_ops.router) as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "alone"
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/server_info").json()["default_slo_class"] == "free"
        assert c.post("/v1/completions", json={"prompt": "x"}).status_code == 404


def test_generate_router_alone(live):
    with _alone(live.engine, routes_generate.router) as c:
        r = c.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}},
                   headers={"X-SLO-Class": "urgent"})
        assert r.status_code == 200, r.text
        assert r.json()["meta_info"]["slo_class"] == "urgent"
        assert r.json()["meta_info"]["slo_tpot_ms"] == BASELINE_MS
        assert c.get("/health").status_code == 404
    assert live.pool_whole()


def test_create_app_refuses_a_default_class_it_does_not_have(live):
    bad = ServerSettings(model_name="m", classes=SETTINGS.classes, default_class="gold",
                         baseline_ms=None)
    with pytest.raises(ValueError, match="'gold' is not one of urgent, free"):
        create_app(live.engine, bad)

"""What every route reaches: the engine, the server's settings and its metrics, one typed
carrier on ``app.state.server``, handed to a route by the ``ServerDep`` dependency. The
routers hold no globals, so each can be mounted on its own app (tests/server/test_routers.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from adaserve.engine import Engine
from adaserve.server.metrics import ServerMetrics
from adaserve.server.slo_classes import SLOClass


@dataclass
class ServerSettings:
    model_name: str
    classes: dict[str, SLOClass]
    default_class: str
    baseline_ms: float | None
    max_body_bytes: int = 1 << 20
    retry_after_s: int = 1
    extra_info: dict = field(default_factory=dict)  # shown on /server_info


@dataclass(frozen=True, slots=True)
class Server:
    engine: Engine
    settings: ServerSettings
    metrics: ServerMetrics

    @classmethod
    def of(cls, engine: Engine, settings: ServerSettings) -> Server:
        """The carrier for ``settings``, with fresh metrics; ValueError for settings that
        cannot serve."""
        if settings.default_class not in settings.classes:
            raise ValueError(f"default class {settings.default_class!r} is not one of "
                             f"{', '.join(settings.classes)}")
        best_effort = [c.name for c in settings.classes.values() if c.tpot_ms is None]
        return cls(engine, settings, ServerMetrics(list(settings.classes), best_effort))


def _server(request: Request) -> Server:
    return request.app.state.server


ServerDep = Annotated[Server, Depends(_server)]

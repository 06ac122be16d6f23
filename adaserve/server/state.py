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
from adaserve.server.slo_ttft import NOMINAL_PROMPT_TOKENS, PrefillRate, default_ttft_ms


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
    # the engine's profiled prefill speed, which the default TTFT SLOs are reasoned from
    # (slo_ttft.py); None: no profile, so no default TTFT SLO
    prefill: PrefillRate | None = None

    @classmethod
    def of(cls, engine: Engine, settings: ServerSettings) -> Server:
        """The carrier for ``settings``, with fresh metrics; ValueError for settings that
        cannot serve."""
        if settings.default_class not in settings.classes:
            raise ValueError(f"default class {settings.default_class!r} is not one of "
                             f"{', '.join(settings.classes)}")
        best_effort = [c.name for c in settings.classes.values() if c.tpot_ms is None]
        profile = engine.profile
        rate = PrefillRate.of(None if profile is None else profile.target,
                              engine.config.prefill_chunk)
        return cls(engine, settings, ServerMetrics(list(settings.classes), best_effort), rate)

    def default_ttft_ms(self, tpot_ms: float | None,
                        prompt_tokens: int = NOMINAL_PROMPT_TOKENS) -> float | None:
        """The TTFT SLO in ms a request with this TPOT SLO and prompt gets when it names
        none (slo_ttft.default_ttft_ms); None: no default."""
        return default_ttft_ms(tpot_ms, self.settings.baseline_ms, prompt_tokens, self.prefill)


def _server(request: Request) -> Server:
    return request.app.state.server


ServerDep = Annotated[Server, Depends(_server)]

"""`adaserve serve`: the embedded engine behind the HTTP contract, on uvicorn."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from adaserve.engine import Engine, EngineConfig
from adaserve.engine.config import names_a_draft
from adaserve.engine.loader import load_models
from adaserve.engine.engine import load_profile
from adaserve.server.app import ServerSettings, create_app
from adaserve.server.errors import PARSER_HEADER_BYTES
from adaserve.server.slo_classes import parse_classes

log = logging.getLogger("adaserve.serve")


@dataclass(frozen=True, slots=True)
class Built:
    engine: Engine
    settings: ServerSettings


def build(args: argparse.Namespace) -> Built:
    """Load the models, find the baseline, validate the SLO classes, make the engine (its
    loop is not started: ``main`` runs it on the main thread)."""
    policy = args.policy or ("adaserve" if names_a_draft(args.model, args.draft) else "incremental")
    cfg = EngineConfig(model=args.model, draft=args.draft, policy=policy, budget=args.budget,
                       max_depth=args.max_depth, max_width=args.max_width,
                       cost_aware_depth=not args.eq8_depth, kv_cache_mb=args.kv_cache_mb,
                       max_batch=args.max_batch, max_context=args.max_context,
                       max_waiting=args.max_waiting, profile=args.profile, device=args.device)
    models = load_models(cfg)
    profile = load_profile(cfg)
    baseline = args.baseline_ms
    if baseline is None and profile is not None:
        baseline = profile.baseline_latency_s * 1e3
    if baseline is None:
        from adaserve.engine.profiler import baseline_latency

        log.info("no profile: measuring the baseline latency (incremental, batch 8)...")
        baseline = baseline_latency(cfg, models, output=16) * 1e3
    classes = parse_classes(args.slo_classes, baseline)
    if args.default_class not in classes:
        raise ValueError(f"--default-class {args.default_class!r} is not one of {', '.join(classes)}")
    engine = Engine(cfg, models=models, profile=profile, start=False)  # main() runs it
    name = args.served_model_name or Path(args.model).name
    settings = ServerSettings(model_name=name, classes=classes, default_class=args.default_class,
                              baseline_ms=baseline, max_body_bytes=args.max_body_bytes)
    return Built(engine, settings)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    built = build(args)
    app = create_app(built.engine, built.settings)
    s = built.settings
    log.info("serving %s with policy %s on http://%s:%d (dashboard: /dashboard); SLO classes: %s",
             s.model_name, built.engine.config.policy, args.host, args.port,
             ", ".join(f"{c.name}={'best effort' if c.tpot_ms is None else f'{c.tpot_ms:.1f} ms'}"
                       for c in s.classes.values()))
    return serve(built.engine, app, args.host, args.port, args.log_level.lower())


def serve(engine: Engine, app, host: str, port: int, log_level: str) -> int:
    """uvicorn on a second thread, the engine loop on this (the main) one.

    The engine gets the main thread because torch's CPU ops run ~2x slower from any other
    thread here (Engine.run). uvicorn installs no signal handlers off the main thread, so
    SIGINT/SIGTERM are caught here and only ask it to exit (a handler must not take the
    engine's lock, which the loop may hold); its graceful shutdown finishes open requests
    with the engine still running, then closes the engine, which ends the loop.
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           h11_max_incomplete_event_size=PARSER_HEADER_BYTES))
    failed: list[BaseException] = []

    def http() -> None:
        try:
            server.run()
        except BaseException as e:  # e.g. the port is taken: stop the engine, report it
            failed.append(e)
        finally:
            engine.close()

    def on_signal(sig, frame) -> None:
        server.force_exit = server.should_exit  # a second Ctrl-C: stop waiting
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    thread = threading.Thread(target=http, name="adaserve-http", daemon=True)
    thread.start()
    try:
        engine.run()
    finally:  # the loop ended (closed, or broken): the HTTP side must not outlive it
        server.should_exit = True
        thread.join(timeout=60)
    if failed:
        raise failed[0]
    return 0 if server.started else 1

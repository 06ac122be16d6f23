"""`adaserve serve`: the embedded engine behind the HTTP contract, on uvicorn."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from adaserve.engine import Engine, EngineConfig
from adaserve.engine.config import names_a_draft
from adaserve.engine.loader import load_models
from adaserve.engine.online_config import OnlineDraftConfig, online_config
from adaserve.engine.engine import load_profile
from adaserve.server.app import ServerSettings, create_app
from adaserve.server.errors import PARSER_HEADER_BYTES
from adaserve.server.slo_classes import parse_classes
from adaserve.server.slo_ttft import NOMINAL_PROMPT_TOKENS
from adaserve.server.startup_profile import startup_profile

log = logging.getLogger("adaserve.serve")


@dataclass(frozen=True, slots=True)
class Built:
    engine: Engine
    settings: ServerSettings


def build(args: argparse.Namespace) -> Built:
    """Load the models, find the profile (saved, kept from an earlier start, or measured
    now: startup_profile.py), validate the SLO classes, make
    the engine (its loop is not started: ``main`` runs it on the main thread)."""
    check_classes(args)  # a typo is refused before the models load (a minute on a cold cache)
    policy = args.policy or ("adaserve" if names_a_draft(args.model, args.draft) else "incremental")
    cfg = EngineConfig(model=args.model, draft=args.draft, policy=policy, budget=args.budget,
                       max_depth=args.max_depth, max_width=args.max_width,
                       min_depth=args.min_depth, draft_budget=args.draft_budget,
                       cost_aware_depth=not args.eq8_depth, kv_cache_mb=args.kv_cache_mb,
                       max_batch=args.max_batch, max_context=args.max_context,
                       draft_window=args.draft_window, draft_sinks=args.draft_sinks,
                       context_table=args.context_table,
                       max_waiting=args.max_waiting, prefill_mode=args.prefill_mode,
                       profile=args.profile, device=args.device,
                       online_draft=online_draft_config(args))
    models = load_models(cfg)
    profile = load_profile(cfg)
    if profile is None or not profile.budget_trusted:
        profile = startup_profile(cfg, models)
    baseline = args.baseline_ms if args.baseline_ms is not None \
        else profile.baseline_latency_s * 1e3
    classes = parse_classes(args.slo_classes, baseline)
    engine = Engine(cfg, models=models, profile=profile, start=False)  # main() runs it
    name = args.served_model_name or Path(args.model).name
    settings = ServerSettings(model_name=name, classes=classes, default_class=args.default_class,
                              baseline_ms=baseline, max_body_bytes=args.max_body_bytes)
    return Built(engine, settings)


def check_classes(args: argparse.Namespace) -> None:
    """ValueError on an --slo-classes spec that cannot parse or a --default-class it lacks.
    A nominal baseline stands in for the profile's: a multiple's value is checked again,
    against the real baseline, once the profile is known."""
    baseline = args.baseline_ms if args.baseline_ms is not None else 1.0
    classes = parse_classes(args.slo_classes, baseline)
    if args.default_class not in classes:
        raise ValueError(f"--default-class {args.default_class!r} is not one of "
                         f"{', '.join(classes)}")


def online_draft_config(args: argparse.Namespace) -> OnlineDraftConfig | None:
    """--online-draft's settings (None without it); unset flags keep the config's defaults."""
    if not args.online_draft:
        return None
    return online_config(interval=args.online_draft_interval,
                         head_rows=args.online_draft_head_rows,
                         replay_share=args.online_draft_replay_share,
                         anchor_weight=args.online_draft_anchor_weight,
                         steps=args.online_draft_steps)


def main(args: argparse.Namespace, sock: socket.socket) -> int:
    """Serve on ``sock``, which the CLI bound before importing this module."""
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        built = build(args)
    except ValueError as e:  # a setting that cannot run: one line, as the parser's errors
        sock.close()
        print(f"adaserve serve: error: {e}", file=sys.stderr)
        return 2
    except BaseException:
        sock.close()
        raise
    app = create_app(built.engine, built.settings)
    if args.iteration_log is not None:
        from adaserve.server.iteration_log import chain_iteration_log
        core = built.engine.core
        core.on_iteration = chain_iteration_log(args.iteration_log, core.on_iteration)
    s, srv = built.settings, app.state.server
    log.info("serving %s with policy %s, B = %d, on http://%s:%d (dashboard: /dashboard); "
             "SLO classes: %s", s.model_name, built.engine.config.policy,
             built.engine.core.policy.config.budget, args.host, args.port,
             ", ".join(f"{c.name}={_class_text(c.tpot_ms, srv.default_ttft_ms(c.tpot_ms))}"
                       for c in s.classes.values()))
    return serve(built.engine, app, sock, args.log_level.lower())


def _class_text(tpot_ms: float | None, ttft_ms: float | None) -> str:
    if tpot_ms is None:
        return "best effort"
    ttft = "" if ttft_ms is None else \
        f" (TTFT {ttft_ms / 1e3:.2f} s for a {NOMINAL_PROMPT_TOKENS}-token prompt)"
    return f"{tpot_ms:.1f} ms{ttft}"


def serve(engine: Engine, app, sock: socket.socket, log_level: str) -> int:
    """uvicorn on a second thread, the engine loop on this (the main) one.

    The engine gets the main thread because torch's CPU ops run ~2x slower from any other
    thread here (Engine.run). uvicorn installs no signal handlers off the main thread, so
    SIGINT/SIGTERM are caught here and only ask it to exit (a handler must not take the
    engine's lock, which the loop may hold); its graceful shutdown finishes open requests
    with the engine still running, then closes the engine, which ends the loop.
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level,
                                           h11_max_incomplete_event_size=PARSER_HEADER_BYTES))
    failed: list[BaseException] = []

    def http() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as e:  # stop the engine, report it
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

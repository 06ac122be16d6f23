"""`adaserve serve`: the embedded engine behind the HTTP contract, on uvicorn."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from adaserve.engine import Engine, EngineConfig
from adaserve.engine.config import names_a_draft
from adaserve.engine.loader import load_models
from adaserve.engine.engine import load_profile
from adaserve.server.app import ServerSettings, create_app
from adaserve.server.slo_classes import parse_classes

log = logging.getLogger("adaserve.serve")


@dataclass(frozen=True, slots=True)
class Built:
    engine: Engine
    settings: ServerSettings


def build(args: argparse.Namespace) -> Built:
    """Load the models, find the baseline, validate the SLO classes, start the engine."""
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
    engine = Engine(cfg, models=models, profile=profile)
    name = args.served_model_name or Path(args.model).name
    settings = ServerSettings(model_name=name, classes=classes, default_class=args.default_class,
                              baseline_ms=baseline, max_body_bytes=args.max_body_bytes)
    return Built(engine, settings)


def main(args: argparse.Namespace) -> int:
    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    built = build(args)
    app = create_app(built.engine, built.settings)
    s = built.settings
    log.info("serving %s with policy %s on http://%s:%d (dashboard: /dashboard); SLO classes: %s",
             s.model_name, built.engine.config.policy, args.host, args.port,
             ", ".join(f"{c.name}={'best effort' if c.tpot_ms is None else f'{c.tpot_ms:.1f} ms'}"
                       for c in s.classes.values()))
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower())
    finally:
        built.engine.close()
    return 0

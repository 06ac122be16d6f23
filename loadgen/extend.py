"""Extending a finished sweep (`adaserve bench --extend`): more seeds per point, or points
it did not have, added to results/<experiment>/summary.json without re-running what is
already there. A sweep costs tens of minutes of the machine per point set, and a repeat
must be comparable with the runs it joins, so the settings that define the experiment are
checked to be the same, and a mismatch is an error rather than a silently mixed table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# what a sweep recorded before these settings existed: it ran with these values
BEFORE = {"arms": None, "backend": "serve", "arrival": "poisson", "cv": None, "trace": None,
          "hardware": None, "acceptance": None, "prompt_tokens": None}


def settings(args: argparse.Namespace) -> dict:
    """What defines a sweep's experiment, as its summary.json records it; an extension must
    have all of it the same. A setting that plays no part is None (the CV of Poisson
    arrivals, the simulator's models on a server)."""
    sim = args.backend == "sim"
    return {"experiment": args.experiment, "requests_per_point": args.requests,
            "mix": args.mix, "prompts": args.prompts, "ttft_slo_ms": args.ttft_slo_ms,
            "max_tokens": args.max_tokens, "serve_args": args.serve_args,
            "arms": list(args.arm) or None,
            "backend": args.backend, "arrival": args.arrival,
            "cv": args.cv if args.arrival == "gamma" else None,
            "trace": None if args.trace is None else str(args.trace),
            "hardware": args.hardware if sim else None,
            "acceptance": str(args.acceptance) if sim else None,
            "prompt_tokens": args.prompt_tokens if sim and args.trace is None else None}


class ExtendError(ValueError):
    pass


def load_prior(out: Path, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """The earlier sweep's meta and runs, after checking it is the same experiment. Keys an
    older summary lacks are checked against what its runs recorded where they can be; the
    meta returned always names the sweep's class assignment (``mix_draw``)."""
    path = out / "summary.json"
    if not path.exists():
        raise ExtendError(f"--extend: {path} does not exist; run the sweep without --extend")
    data = json.loads(path.read_text())
    runs = data.pop("runs")
    for key, want in settings(args).items():
        # a key an older summary lacks and that has no known old value goes unchecked
        have = data.get(key, BEFORE.get(key, want))
        if have != want:
            raise ExtendError(f"--extend: {path} has {key}={have!r}, this command "
                              f"{want!r}; an extension must be the same experiment")
    # sweeps from before --mix-exact record no assignment: their classes were drawn i.i.d.
    recorded = data.setdefault("mix_draw", "iid")
    if args.mix_draw not in (None, recorded):
        raise ExtendError(f"--extend: {path} assigned classes with --mix-{recorded}, this "
                          f"command asks --mix-{args.mix_draw}; drop the flag to keep the "
                          "sweep's, or write the other assignment to a new --out")
    rate = getattr(args, "rate", None)
    if args.experiment != "rate":
        seen = {r["rate"] for r in runs}
        if seen and seen != {rate}:
            raise ExtendError(f"--extend: the earlier runs are at rate {sorted(seen)}, this "
                              f"command at {rate}")
    if args.baseline_ms is None:
        raise ExtendError("--extend needs --baseline-ms: every run must be held to the SLOs "
                          "the earlier runs had")
    seen = {round(r["server"]["baseline_latency_ms"], 6) for r in runs}
    if seen and seen != {round(args.baseline_ms, 6)}:
        raise ExtendError(f"--extend: the earlier runs had baseline {sorted(seen)} ms, this "
                          f"command {args.baseline_ms} ms")
    return data, runs


def done(runs: list[dict]) -> set[tuple[str, str, int]]:
    return {(r["policy"], r["point"], r["seed"]) for r in runs}


def ordered(runs: list[dict], policies: list[str], points: list[str]) -> list[dict]:
    """Runs in the order the tables read: policies and points as the command lists them
    (an earlier sweep's others after), then seed."""
    pol = {p: i for i, p in enumerate(policies)}
    pt = {p: i for i, p in enumerate(points)}
    big = len(policies) + len(points)
    return sorted(runs, key=lambda r: (pol.get(r["policy"], big), pt.get(r["point"], big),
                                       r["seed"]))

"""A sweep's load points and the SLO classes its servers take: what `adaserve bench`
varies, shared by the served sweep (bench.py) and the simulator's backend
(adaserve/sim/bench.py), which imports this rather than the command that drives it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Point:
    label: str  # what varies, e.g. "0.5" (rate) or "0.8" (scale)
    rate: float
    urgent: float  # -1: the mix's own
    urgent_scale: float  # urgent SLO as a multiple of the baseline


def points(args: argparse.Namespace) -> list[Point]:
    if args.experiment == "rate":
        return [Point(r, float(r), -1.0, 1.0) for r in args.rates.split(",")]
    if args.experiment == "urgent":
        return [Point(u, args.rate, float(u), 1.0) for u in args.urgent.split(",")]
    return [Point(s, args.rate, -1.0, float(s)) for s in args.scales.split(",")]


def slo_classes(urgent_scale: float) -> str:
    """The sweep's classes, as `adaserve serve --slo-classes` takes them."""
    return f"urgent=x{urgent_scale:g},moderate=x2.4,relaxed=x8,best-effort"

"""`adaserve serve`'s flags (kept free of torch, so `adaserve --help` stays instant)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from adaserve.server.slo_classes import DEFAULT_CLASS, DEFAULT_CLASSES


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None,
                   help="scheduling policy (default: adaserve with a draft, else incremental)")
    p.add_argument("--budget", type=int, default=None,
                   help="token budget B per iteration (default: the saved profile's, else "
                        "measured at start-up: the largest token count whose forward costs "
                        "<= 1.15x a one-token forward)")
    p.add_argument("--max-depth", type=int, default=8, help="D_max of Eq. 8")
    p.add_argument("--max-width", type=int, default=16, help="W_max of Eq. 9")
    p.add_argument("--min-depth", type=int, default=1, help="D_min of Eq. 8 (default 1)")
    p.add_argument("--draft-budget", type=int, default=None,
                   help="B2 of Eq. 9: draft tokens one draft step may decode (default: B)")
    p.add_argument("--eq8-depth", action="store_true",
                   help="Eq. 8's depth as published (no cut for the draft's cost)")
    p.add_argument("--prefill-mode", default="chunked", choices=("chunked", "first"),
                   help="chunked (default): every iteration prefills a chunk, then the running "
                        "requests decode (Sarathi-Serve); first: an iteration with prompt work "
                        "only prefills (vLLM 0.8's prefill-first)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000,
                   help="port to listen on (default 8000); taken before the model loads")
    p.add_argument("--max-batch", type=int, default=32, help="running requests at most")
    p.add_argument("--max-waiting", type=int, default=256,
                   help="queued requests beyond which new ones get 503 + Retry-After")
    p.add_argument("--max-context", type=int, default=1024,
                   help="prompt + output tokens per request, up to the model's context "
                        "(8192 for smollm2-135m)")
    p.add_argument("--kv-cache-mb", type=_mb, default="auto",
                   help="KV memory in MiB (target + draft), allocated at start-up; auto "
                        "(default): half the memory available after the weights load. The "
                        "KV slots (running requests) are this / a slot's size, at most "
                        "--max-batch; the start-up log and /server_info say how many")
    p.add_argument("--draft-window", type=int, default=None,
                   help="bound the draft's KV to --draft-sinks first tokens + this many recent "
                        "ones per request (StreamingLLM): a draft step's cost stays flat in "
                        "the context; default: the draft keeps the whole context")
    p.add_argument("--context-table", action="store_true",
                   help="price each iteration by the profile's context table (requests x "
                        "tokens x context, measured by `adaserve profile`) instead of the "
                        "linear models refitted online; off by default (docs/engine.md)")
    p.add_argument("--draft-sinks", type=int, default=4,
                   help="attention-sink tokens the bounded draft KV keeps (default 4)")
    p.add_argument("--profile", type=Path, default=None,
                   help="profile file (default: the one `adaserve profile` saved for model + "
                        "draft; without one, a quick profile is measured at start-up)")
    p.add_argument("--slo-classes", default=DEFAULT_CLASSES,
                   help="name=x<multiple of baseline> | name=<ms> | name (best effort), "
                        f"comma separated (default {DEFAULT_CLASSES})")
    p.add_argument("--default-class", default=DEFAULT_CLASS,
                   help="the class of requests that name no SLO")
    p.add_argument("--baseline-ms", type=float, default=None,
                   help="baseline latency for x-multiples (default: the profile's, else "
                        "measured at start-up, so the classes' milliseconds vary between "
                        "starts)")
    p.add_argument("--iteration-log", type=Path, default=None, metavar="FILE",
                   help="append one JSON line per decoding iteration (tokens, depth, width, "
                        "seconds) to FILE: the simulator's validation reads it")
    p.add_argument("--online-draft", action="store_true",
                   help="distil the draft again from served traffic every "
                        "--online-draft-interval requests, in a low-priority process, and swap "
                        "it in when a held-back slice says it is no worse (docs/draft.md); "
                        "state in /metrics (adaserve_online_draft_*)")
    p.add_argument("--online-draft-interval", type=at_least(1), default=32, metavar="I",
                   help="served requests between online draft updates (default 32)")
    p.add_argument("--online-draft-head-rows", type=at_least(0), default=0, metavar="N",
                   help="draft head rows that may pass, per update, to served tokens outside "
                        "the head (default 0: the head stays as distilled; docs/draft.md)")
    p.add_argument("--online-draft-replay-share", type=share, default=None, metavar="F",
                   help="fraction of each update's training sequences replayed from earlier "
                        "traffic, against forgetting (default 0.5)")
    p.add_argument("--online-draft-anchor-weight", type=weight, default=None, metavar="W",
                   help="weight of the served token at output positions the draft got right, "
                        "as a training target beside the buffered misses (default 0.25; 0: "
                        "misses only, as seed 004; docs/draft.md)")
    p.add_argument("--online-draft-steps", type=at_least(0), default=None, metavar="N",
                   help="optimizer steps per online draft update (default 16; docs/draft.md)")
    p.add_argument("--served-model-name", default=None, help="the model id clients send")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20,
                   help="larger request bodies get 413 (default 1 MiB)")
    p.add_argument("--log-level", default="info", type=str.lower,
                   choices=("debug", "info", "warning", "error"), help="(default info)")


def _number(value: str, ok, expected: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return v


def share(value: str) -> float:
    """A fraction in [0, 1): the replay share of an online draft update."""
    return _number(value, lambda v: 0 <= v < 1, "a fraction in [0, 1)")


def seconds(value: str) -> float:
    """Seconds, finite and >= 0: how long a sweep settles the machine (adaserve bench)."""
    return _number(value, lambda v: math.isfinite(v) and v >= 0, "seconds >= 0")


def weight(value: str) -> float:
    """A weight >= 0: the anchor weight of an online draft update."""
    return _number(value, lambda v: v >= 0, "a weight >= 0")


def at_least(low: int):
    """An argparse type: an integer >= ``low`` (a count among the online draft's settings,
    refused by the parser, naming its flag, rather than by the config after it is built)."""
    def count(value: str) -> int:
        try:
            v = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value!r}")
        return v
    return count


def _mb(value: str) -> int | str:
    """--kv-cache-mb: "auto" or a whole number of MiB."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or MiB, got {value!r}") from None

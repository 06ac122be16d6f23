"""A request's SLO inside SGLang: ``custom_params`` carries it from HTTP to the scheduler
and back to the tokenizer manager unchanged (``slo_class``, ``tpot_slo_ms`` and, where the
request named one, ``ttft_slo_ms``), resolved at the edge by the embedded server's own
``slo_classes.request_slo`` (``http.py``); the classes come from the environment, read the
same way in every process.

A request that names no TTFT SLO gets its class's default by the embedded server's rule
(``adaserve.server.slo_ttft.default_ttft_ms``) when the request finishes, once its prompt's
length is known (``report.py``). The rule reads a baseline and a prefill rate. SGLang has
no profile of ours and measures no prefill rate, so both are configured:
ADASERVE_BASELINE_MS, and ADASERVE_PREFILL_CHUNK_MS, the milliseconds of one target forward
that prefills a chunk of SGLang's ``--chunked-prefill-size`` tokens. Without either, or
with chunked prefill off, a request has no default TTFT SLO (``default_ttft``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import lru_cache

from adaserve.scheduler import SLO
from adaserve.sglang.names import ALGORITHM
from adaserve.server.slo_classes import (
    DEFAULT_CLASS,
    DEFAULT_CLASSES,
    SLOClass,
    SLOError,
    parse_classes,
    request_slo,
)
from adaserve.server.slo_ttft import PrefillRate, default_ttft_ms


def scheduled_slo(custom_params: Mapping | None, classes: Mapping[str, SLOClass],
                  default_class: str) -> SLO:
    """The SLO the scheduler process applies to a request. The HTTP hooks leave
    ``custom_params`` resolved: the class as a label and ``tpot_slo_ms`` as the SLO, both
    written, which ``request_slo`` (an input check: "give one") would refuse; here the
    resolved milliseconds win. A request that came in without the hooks (SGLang's offline
    Engine) is resolved by the HTTP rules, and one they would refuse gets the default
    class: the scheduler loop must not die on one request's fields."""
    if (isinstance(custom_params, Mapping) and custom_params.get("slo_class") is not None
            and custom_params.get("tpot_slo_ms") is not None):
        try:
            return SLO.from_ms(float(custom_params["tpot_slo_ms"]))
        except (TypeError, ValueError):
            pass
    try:
        return request_slo(None, custom_params, {}, classes, default_class)[1]
    except SLOError:
        return classes[default_class].slo


BASELINE_FROM = ("set ADASERVE_BASELINE_MS to the target's plain decode step in ms, "
                 "or give ADASERVE_SLO_CLASSES in ms, e.g. urgent=60,relaxed=400,best-effort")


@lru_cache(maxsize=1)
def configured_classes() -> tuple[dict[str, SLOClass], str]:
    """(classes, default class) from ADASERVE_SLO_CLASSES / ADASERVE_BASELINE_MS /
    ADASERVE_DEFAULT_CLASS (as `adaserve serve`'s flags), read once per process: the HTTP
    side and the scheduler process see the same environment, so they agree. ValueError
    naming the environment variables (SGLang has no flags of ours): checked when SGLang
    resolves ADASERVE's server arguments, so a bad setting stops the launch, not a
    request."""
    baseline = os.environ.get("ADASERVE_BASELINE_MS")
    try:
        ms = float(baseline) if baseline else None
    except ValueError:
        raise ValueError(f"ADASERVE_BASELINE_MS={baseline!r} is not a number of "
                         "milliseconds") from None
    classes = parse_classes(os.environ.get("ADASERVE_SLO_CLASSES", DEFAULT_CLASSES), ms,
                            BASELINE_FROM)
    default = os.environ.get("ADASERVE_DEFAULT_CLASS", DEFAULT_CLASS)
    if default not in classes:
        raise ValueError(f"ADASERVE_DEFAULT_CLASS={default!r} is not one of the classes "
                         f"({', '.join(classes)})")
    return classes, default


PREFILL_ENV = "ADASERVE_PREFILL_CHUNK_MS"


def _ms_env(name: str) -> float | None:
    """A positive number of milliseconds from the environment, None when unset; ValueError
    naming the variable otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        ms = float(text)
    except ValueError:
        ms = float("nan")
    if not (math.isfinite(ms) and ms > 0):
        raise ValueError(f"{name}={text!r} is not a positive number of milliseconds")
    return ms


@lru_cache(maxsize=1)
def configured_prefill() -> tuple[float | None, float | None]:
    """(ADASERVE_BASELINE_MS, ADASERVE_PREFILL_CHUNK_MS), read once per process; ValueError
    naming the variable (checked at launch with the classes)."""
    return _ms_env("ADASERVE_BASELINE_MS"), _ms_env(PREFILL_ENV)


def prefill_rate(chunked_prefill_size: int | None) -> PrefillRate | None:
    """The prefill rate the default TTFT is reasoned from: ADASERVE_PREFILL_CHUNK_MS per
    chunk of SGLang's ``chunked_prefill_size`` tokens; None without the variable, or with
    chunked prefill off (-1: a prompt is one forward, whatever its length)."""
    chunk_ms = configured_prefill()[1]
    if chunk_ms is None or not chunked_prefill_size or chunked_prefill_size < 1:
        return None
    return PrefillRate(int(chunked_prefill_size), chunk_ms / 1e3)


def chunk_of(server_args) -> int | None:
    """SGLang's chunked-prefill size as it resolved it. SGLang 0.5.23 keeps the input on
    ServerArgs (None where not given) and its resolution's decisions beside it, read with
    ``resolution_result`` (as its /server_info does); a stand-in with plain fields (tests)
    is read as it is."""
    if getattr(server_args, "_resolved_overrides", None) is None:
        return getattr(server_args, "chunked_prefill_size", None)
    from sglang.srt.arg_groups.overrides import resolution_result  # names.RESOLVED

    return resolution_result(server_args, "chunked_prefill_size")


def default_ttft(tpot_ms: float | None, prompt_tokens: int,
                 chunked_prefill_size: int | None) -> float | None:
    """The TTFT SLO in ms of a request that named none: the embedded server's rule
    (``slo_ttft.default_ttft_ms``) over the configured baseline and prefill rate; None
    for best effort, or without both settings."""
    return default_ttft_ms(tpot_ms, configured_prefill()[0], prompt_tokens,
                           prefill_rate(chunked_prefill_size))


def adaserve_selected(server_args) -> bool:
    """Is this SGLang server running ADASERVE? The plugin loads into every SGLang server
    in its environment; its HTTP and report hooks must do nothing for the others."""
    algo = getattr(server_args, "speculative_algorithm", None)
    return str(algo or "").upper() == ALGORITHM

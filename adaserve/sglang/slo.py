"""A request's TPOT SLO inside SGLang: ``custom_params`` carries it from HTTP to the
scheduler unchanged (``tpot_slo_ms`` or ``slo_class``), resolved at the edge by the
embedded server's own ``slo_classes.request_slo`` (``http.py``); the classes come from the
environment, read the same way in every process."""

from __future__ import annotations

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


def adaserve_selected(server_args) -> bool:
    """Is this SGLang server running ADASERVE? The plugin loads into every SGLang server
    in its environment; its HTTP and report hooks must do nothing for the others."""
    algo = getattr(server_args, "speculative_algorithm", None)
    return str(algo or "").upper() == ALGORITHM

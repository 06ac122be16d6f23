"""SLO classes and the per-request SLO (DESIGN.md "HTTP contract").

A class is a TPOT in milliseconds, or a multiple of the machine's profiled baseline latency
(seed 002's categories: baseline x1, x2.4, x8), or best effort. A request's SLO comes from
the first of: body ``slo`` ({"tpot_ms": ...} or {"class": ...}), SGLang's ``custom_params``
({"tpot_slo_ms": ...} or {"slo_class": ...}), header ``X-SLO-TPOT-MS``, header
``X-SLO-Class``, the server's default class (``request_slo``: one function for every route
of both backends, the embedded server and SGLang with the plugin). A TTFT SLO is an
objective of its own beside it, from the body's ``slo.ttft_ms``, else the header
``X-SLO-TTFT-MS``; without one the embedded server derives it from the class
(slo_ttft.py). Every millisecond value, wherever it is written, is read by
``slo_value.parse_tpot_ms`` (its docstring states the rule; ``parse_ttft_ms`` for a TTFT).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from adaserve.scheduler import SLO
from adaserve.server.slo_value import DECIMAL, SLOError, in_range, parse_tpot_ms, parse_ttft_ms

DEFAULT_CLASSES = "urgent=x1,moderate=x2.4,relaxed=x8,best-effort"
DEFAULT_CLASS = "relaxed"
CUSTOM = "custom"  # the class label of a request that names its own TPOT in milliseconds
TTFT_HEADER = "X-SLO-TTFT-MS"  # as errors name it; headers match in any case


@dataclass(frozen=True, slots=True)
class SLOClass:
    name: str
    tpot_ms: float | None  # None: best effort
    spec: str  # as configured, e.g. "x2.4" or "30ms"

    @property
    def relative(self) -> bool:
        """Stated as a multiple of the baseline latency (``x2.4``)."""
        return self.spec[:1] in ("x", "X")

    @property
    def slo(self) -> SLO:
        return SLO.from_ms(self.tpot_ms, self.relative)


def parse_classes(spec: str, baseline_ms: float | None,
                  baseline_from: str = "profile, or --baseline-ms") -> dict[str, SLOClass]:
    """``name=x<multiple>``, ``name=<ms>[ms]`` or a bare ``name`` (best effort), comma
    separated. ValueError on anything else, so a typo fails at start-up. ``baseline_from``
    names where the user can give the baseline in the error (a flag, an env variable)."""
    classes: dict[str, SLOClass] = {}
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        name, _, value = (x.strip() for x in item.partition("="))
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ValueError(f"SLO class name {name!r} must be letters, digits, '-' or '_'")
        if name in classes or name == CUSTOM:
            raise ValueError(f"SLO class {name!r} is defined twice or reserved")
        if not value or value.lower() in ("none", "best-effort"):
            classes[name] = SLOClass(name, None, "best effort")
            continue
        param = f"SLO class {name!r}"
        if value[0] in "xX":
            if baseline_ms is None:
                raise ValueError(f"class {name!r} is a multiple of the baseline latency, "
                                 f"but no baseline is known ({baseline_from})")
            ms = in_range(_multiple(value[1:], param) * baseline_ms, param)
        else:
            ms = parse_tpot_ms(value, param)
        classes[name] = SLOClass(name, ms, value)
    if not classes:
        raise ValueError("no SLO classes configured")
    return classes


def _multiple(text: str, param: str) -> float:
    if re.fullmatch(DECIMAL, text.strip()) is None:
        raise SLOError(f"{param}: {'x' + text!r} is not a multiple; write e.g. x2.4", param)
    return float(text)


def resolve(body_slo: Mapping | None, headers: Mapping[str, str],
            classes: Mapping[str, SLOClass], default_class: str) -> tuple[str, SLO]:
    """(class label, SLO) of one request, first match wins, with the request's own TTFT SLO
    (``with_ttft``); SLOError for bad input."""
    label, slo = _tpot(body_slo, headers, classes, default_class)
    return label, with_ttft(slo, body_slo, headers)


def with_ttft(slo: SLO, body_slo: Mapping | None, headers: Mapping[str, str]) -> SLO:
    """``slo`` with the TTFT SLO the request names: the body's ``slo.ttft_ms``, else the
    header ``X-SLO-TTFT-MS`` (any case: ``x-slo-ttft-ms`` is the ecosystem's spelling),
    read by the TPOT's rule; unchanged when it names none. SLOError naming the field."""
    if isinstance(body_slo, Mapping) and body_slo.get("ttft_ms") is not None:
        ms = parse_ttft_ms(body_slo["ttft_ms"], "slo.ttft_ms")
    else:
        sent = [v for k, v in headers.items() if k.lower() == TTFT_HEADER.lower()]
        if not sent:
            return slo
        ms = parse_ttft_ms(sent[0], TTFT_HEADER)
    return replace(slo, ttft_s=ms / 1e3)


def _tpot(body_slo: Mapping | None, headers: Mapping[str, str],
          classes: Mapping[str, SLOClass], default_class: str) -> tuple[str, SLO]:
    """(class label, SLO) from the body's slo, else the headers, else the default class."""
    if body_slo is not None:
        if not isinstance(body_slo, Mapping):
            raise SLOError("slo must be an object: {\"tpot_ms\": 30} or {\"class\": \"urgent\"}",
                           "slo")
        unknown = set(body_slo) - {"tpot_ms", "class", "ttft_ms"}
        if unknown:
            raise SLOError(f"slo has unknown fields {sorted(unknown)}; use tpot_ms or class, "
                           "and ttft_ms", "slo")
        has_ms, has_class = body_slo.get("tpot_ms") is not None, body_slo.get("class") is not None
        if has_ms and has_class:
            raise SLOError("slo gives both tpot_ms and class; give one", "slo")
        if has_ms:
            return CUSTOM, SLO.from_ms(parse_tpot_ms(body_slo["tpot_ms"], "slo.tpot_ms"))
        if has_class:
            return _by_class(body_slo["class"], classes, "slo.class")
    h = {k.lower(): v for k, v in headers.items()}
    if "x-slo-tpot-ms" in h:
        return CUSTOM, SLO.from_ms(parse_tpot_ms(h["x-slo-tpot-ms"], "X-SLO-TPOT-MS"))
    if "x-slo-class" in h:
        return _by_class(h["x-slo-class"].strip(), classes, "X-SLO-Class")
    return _by_class(default_class, classes, "default class")


def request_slo(body_slo: Mapping | None, custom_params: object, headers: Mapping[str, str],
                classes: Mapping[str, SLOClass], default_class: str,
                custom_at: str = "custom_params") -> tuple[str, SLO]:
    """(class label, SLO) of one request, first match wins: the body's slo object (already
    validated: ``protocol.SLOField``), SGLang's custom_params ``{"tpot_slo_ms": ...}`` or
    ``{"slo_class": ...}`` (found at ``custom_at`` in the body: ``custom_params`` on the
    OpenAI routes, ``sampling_params.custom_params`` on /generate; other keys are SGLang's
    and left alone), the headers, the default class; with the TTFT SLO the body or the
    headers name (``with_ttft``). SLOError naming the field."""
    if body_slo is None and custom_params is not None:
        if not isinstance(custom_params, Mapping):
            raise SLOError(f"{custom_at} must be an object", custom_at)
        ms, name = custom_params.get("tpot_slo_ms"), custom_params.get("slo_class")
        if ms is not None and name is not None:
            raise SLOError(f"{custom_at} gives both tpot_slo_ms and slo_class; give one",
                           custom_at)
        if ms is not None:
            slo = SLO.from_ms(parse_tpot_ms(ms, f"{custom_at}.tpot_slo_ms"))
            return CUSTOM, with_ttft(slo, None, headers)
        if name is not None:
            label, slo = _by_class(name, classes, f"{custom_at}.slo_class")
            return label, with_ttft(slo, None, headers)
    return resolve(body_slo, headers, classes, default_class)


def _by_class(name: object, classes: Mapping[str, SLOClass], param: str) -> tuple[str, SLO]:
    if not isinstance(name, str) or name not in classes:
        raise SLOError(f"unknown SLO class {name!r}; this server has "
                       f"{', '.join(classes)}", param)
    return name, classes[name].slo

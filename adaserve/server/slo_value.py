"""A TPOT SLO value in milliseconds: one parser for every place one is written — the body's
``"slo": {"tpot_ms": ...}``, the ``X-SLO-TPOT-MS`` header, SGLang's
``custom_params.tpot_slo_ms`` and a class of ``--slo-classes`` (``chat=90ms``) — and for a
TTFT SLO (``"slo": {"ttft_ms": ...}``, ``X-SLO-TTFT-MS``), by the same rule.

The rule, as the user docs state it:

    A TPOT SLO is a number of milliseconds from 0.001 to 3600000 (one hour per token),
    both included. Write it as a number (``30``, ``12.5``, ``1e2``) or as text holding one,
    optionally followed by ``ms`` (``"30"``, ``"30ms"``, ``"30 ms"``); the same forms work in
    the JSON body (``"slo": {"tpot_ms": "30ms"}``), in the ``X-SLO-TPOT-MS`` header and in a
    class of ``--slo-classes`` (which also takes ``x<multiple>`` of the baseline latency and
    a bare name for best effort). Everything else is refused with HTTP 400 naming the field
    or header: text that is not a decimal number (``fast``, ``nan``, ``inf``, ``0x10``,
    ``1_000``), true/false, zero, negative numbers and numbers outside the range, however
    large (a huge SLO is not a way to say "no SLO": name a best-effort class, e.g.
    ``X-SLO-Class: best-effort``). In the body, ``"tpot_ms": null`` is the same as leaving
    the field out: the next source decides (the headers, then the server's default class),
    just as a request without the header falls through to the next source.

The lower bound keeps the SLO a positive number of seconds once divided by 1000 (5e-324 ms
is > 0 but 0.0 s; the fuzzer found it); the upper bound makes one rule for every source
instead of "whatever float() takes", and an hour per token is no deadline at all.
"""

from __future__ import annotations

import math
import re

MIN_TPOT_MS = 0.001
MAX_TPOT_MS = 3_600_000.0
FORMS = '30, "30" or "30ms"'
NO_TPOT = "for no SLO, name a best-effort class"
NO_TTFT = "for the class's default, leave it out"

# a decimal number, optionally signed (so "-5" is "out of range", not "not a number")
DECIMAL = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_MS_TEXT = re.compile(rf"\s*({DECIMAL})\s*(?:ms)?\s*", re.IGNORECASE)


class SLOError(ValueError):
    """A request's SLO is unusable; ``param`` names the field or header at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def parse_tpot_ms(value: object, param: str, no_slo: str = NO_TPOT) -> float:
    """The TPOT in milliseconds that ``value`` (a JSON number, or text as the module
    docstring says) stands for; SLOError naming ``param`` otherwise (``no_slo``: what to
    do instead of a huge value)."""
    if isinstance(value, str):
        m = _MS_TEXT.fullmatch(value)
        if m is None:
            raise SLOError(f"{param}: {_shown(value)} is not a number of milliseconds; write "
                           f"{FORMS}", param)
        number: int | float = float(m.group(1))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value
    else:
        raise SLOError(f"{param} must be a number of milliseconds ({FORMS}), got "
                       f"{_shown(value)}", param)
    return in_range(number, param, no_slo)


def parse_ttft_ms(value: object, param: str) -> float:
    """A TTFT SLO in milliseconds, by the TPOT's rule."""
    return parse_tpot_ms(value, param, NO_TTFT)


def in_range(ms: int | float, param: str, no_slo: str = NO_TPOT) -> float:
    """``ms`` as a float if the rule's range holds it; SLOError saying which bound it
    breaks otherwise. Compares before converting: a JSON integer may overflow a float."""
    if not ms > 0 or ms == math.inf:  # NaN compares False
        raise SLOError(f"{param} must be finite and > 0 milliseconds, got {ms!r}", param)
    if ms < MIN_TPOT_MS:
        raise SLOError(f"{param} must be at least {MIN_TPOT_MS:g} milliseconds, got {ms!r}",
                       param)
    if ms > MAX_TPOT_MS:
        raise SLOError(f"{param} must be at most {MAX_TPOT_MS:.0f} milliseconds (one hour), "
                       f"got {_shown(ms)}; {no_slo}", param)
    return float(ms)


def _shown(value: object) -> str:
    """The client's value for an error message, cut short: it may be a megabyte long."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"

"""The SLO on the W3C ``tracestate`` header: how it crosses SGLang's router (issue 28).

sglang-router 0.3.2 rebuilds every request it forwards: it forwards only a short list of
headers (authorization, x-request-id, x-correlation-id, traceparent, tracestate,
x-request-id-*, x-smg-routing-key) and re-serialises the body from its own request types,
which have neither ``custom_params`` nor ``slo``. So an ``X-SLO-Class`` header, a
``custom_params`` SLO and a body ``slo`` all vanish between the router and the replica
(tests/sglang_tier/test_fleet_cpu.py shows it). ``tracestate`` is the one header on that
list made to carry a vendor's own key=value through intermediaries, so the SLO rides there
as one list member of ours, its parts (the TPOT's source, the TTFT SLO) joined by ``;``::

    tracestate: adaserve=class:urgent
    tracestate: adaserve=tpot-ms:30
    tracestate: adaserve=class:urgent;ttft-ms:800

A replica reads it only when the request has no ``X-SLO-*`` header; `fleet-cpu`'s front
(``front.py``) writes it from whatever SLO the client gave, so clients keep the contract.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from adaserve.server.slo_classes import SLOError

KEY = "adaserve"
KINDS = {"class": "X-SLO-Class", "tpot-ms": "X-SLO-TPOT-MS", "ttft-ms": "X-SLO-TTFT-MS"}
SEP = ";"  # between the parts of our member's value
HEADERS = tuple(KINDS.values())
# a tracestate value: printable ASCII without ',' and '=', not ending in a space
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def member(*parts: tuple[str, str]) -> str:
    """Our tracestate member for the request's SLO sources, each (kind, value); SLOError (a
    400) for a value a tracestate cannot carry, naming the header it came from."""
    if not parts:
        raise ValueError("a member needs at least one part")
    out = []
    for kind, value in parts:
        value = str(value).strip()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if not value or SEP in value or not _VALUE.fullmatch(f"{kind}:{value}"):
            raise SLOError(f"{KINDS[kind]}: {value!r} cannot cross the router (printable "
                           f"ASCII without ',', '=' or '{SEP}')", KINDS[kind])
        out.append(f"{kind}:{value}")
    return f"{KEY}={SEP.join(out)}"


def with_member(tracestate: str | None, ours: str) -> str:
    """``tracestate`` with our member first and any earlier one of ours dropped (W3C: the
    member a vendor updates moves to the front)."""
    others = [m.strip() for m in (tracestate or "").split(",")
              if m.strip() and not m.strip().startswith(f"{KEY}=")]
    return ",".join([ours, *others])


def slo_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """The request's headers, with our tracestate member's parts turned into the X-SLO-*
    headers they stand for when the request has none of them; SLOError for a member of
    ours whose parts are not ``class:<name>``, ``tpot-ms:<value>`` or ``ttft-ms:<value>``."""
    h = {k.lower(): v for k, v in headers.items()}
    if any(name.lower() in h for name in HEADERS):
        return headers
    for m in (h.get("tracestate") or "").split(","):
        key, _, value = m.strip().partition("=")
        if key != KEY:
            continue
        out = dict(h)
        for part in value.split(SEP):
            kind, sep, v = part.partition(":")
            if not sep or kind not in KINDS or KINDS[kind].lower() in out:
                raise SLOError(f"tracestate: {m.strip()!r} is not {KEY}= and one of each "
                               f"of class:<name> or tpot-ms:<ms>, ttft-ms:<ms>, joined by "
                               f"'{SEP}'", "tracestate")
            out[KINDS[kind].lower()] = v
        return out
    return headers

"""A replica's report for the SLO-aware picker (issue 39): ``GET /adaserve/load``.

What the picker (adaserve/picker) reads of a replica, and what SGLang does not expose: its
``/v1/loads`` and ``/metrics`` count running and queued requests without their SLOs, and
its ``/metrics`` histograms cannot say what the last few requests of a class took. The
route answers from the tokenizer manager, in the HTTP server's process:

- ``in_flight``: the client requests it holds, by SLO class and TPOT SLO, ``waiting`` (no
  first token yet: queued or prefilling) or ``running`` (decoding). Each request's SLO is
  the one the HTTP hooks resolved into its ``custom_params``; SGLang's health checks and
  start-up warm-up (``log_metrics`` False) are not clients and are left out;
- ``recent``: per class, the count and median TPOT and TTFT of its last finished client
  requests (adaserve.picker.report: RECENT_FINISHED of the last RECENT_S seconds), which
  ``report.report_hook`` records as each one finishes (``finished``);
- ``totals``: per class, the client requests finished since the replica started and how
  many kept their TPOT SLO, their TTFT SLO and every objective (``ClassTally``): what
  the SLO front's fleet view adds up (fleet_page.py).

    {"in_flight": [{"slo_class": "urgent", "tpot_slo_ms": 60.0, "waiting": 1,
                    "running": 2}, ...],
     "recent": [{"slo_class": "urgent", "finished": 12, "tpot_ms": 41.2,
                 "ttft_ms": 310.0}, ...],
     "totals": [{"slo_class": "urgent", "finished": 40, "tpot_met": 31, "tpot_of": 40,
                 "ttft_met": 38, "ttft_of": 40, "met": 30, "met_of": 40}, ...]}
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping

from adaserve.picker.report import RECENT_FINISHED, RECENT_S, ClassTally, recent

ROUTE = "/adaserve/load"
# (monotonic s, class, TPOT ms, TTFT ms) of finished client requests, oldest first; enough
# for RECENT_FINISHED of a handful of classes
_FINISHED: collections.deque = collections.deque(maxlen=16 * RECENT_FINISHED)
_TOTALS: dict[str, ClassTally] = {}  # by class, since the replica started
_LOCK = threading.Lock()


def finished(slo_class: str, tpot_ms: float | None, ttft_ms: float | None,
             met: tuple[bool | None, bool | None, bool | None] = (None, None, None)) -> None:
    """One client request finished (``report.report_hook``); ``met``: whether it kept its
    TPOT SLO, its TTFT SLO and every objective (scheduler.slo.objectives_met; None: it had
    no such objective)."""
    with _LOCK:
        _FINISHED.append((time.monotonic(), slo_class, tpot_ms, ttft_ms))
        _TOTALS[slo_class] = _TOTALS.get(slo_class, ClassTally(slo_class)).with_finished(*met)


def total_rows() -> list[dict]:
    with _LOCK:
        return [t.to_json() for t in _TOTALS.values()]


def recent_rows(now: float | None = None) -> list[dict]:
    now = time.monotonic() if now is None else now
    with _LOCK:
        rows = [(c, tpot, ttft) for t, c, tpot, ttft in _FINISHED if t >= now - RECENT_S]
    return [{"slo_class": r.slo_class, "finished": r.finished, "tpot_ms": r.tpot_ms,
             "ttft_ms": r.ttft_ms} for r in recent(rows)]


def in_flight_rows(rid_to_state: Mapping, default_class: str) -> list[dict]:
    """The tokenizer manager's unfinished client requests, grouped by SLO."""
    groups: dict[tuple[str, float | None], list[int]] = {}
    for state in list(rid_to_state.values()):
        obj = getattr(state, "obj", None)
        if getattr(state, "finished", False) or not getattr(obj, "log_metrics", True):
            continue
        params = getattr(obj, "sampling_params", None)
        custom = (params.get("custom_params") if isinstance(params, Mapping) else None) or {}
        key = (str(custom.get("slo_class") or default_class), custom.get("tpot_slo_ms"))
        first = getattr(getattr(state, "time_stats", None), "first_token_time", 0.0) or 0.0
        groups.setdefault(key, [0, 0])[first > 0] += 1
    return [{"slo_class": c, "tpot_slo_ms": ms, "waiting": w, "running": r}
            for (c, ms), (w, r) in groups.items()]


async def load_route():
    """``GET /adaserve/load`` on an ADASERVE replica."""
    from sglang.srt.entrypoints.http_server import get_global_state

    from adaserve.sglang.slo import configured_classes

    _, default_class = configured_classes()
    tm = get_global_state().tokenizer_manager
    return {"in_flight": in_flight_rows(tm.rid_to_state, default_class),
            "recent": recent_rows(), "totals": total_rows()}

"""Prometheus metrics (DESIGN.md "Metrics") and the short history the dashboard draws.

Two writers: the engine thread reports every iteration (`on_iteration`), the event loop
reports every finished request (`on_finished`). prometheus_client is thread-safe; the
history takes a lock. Each server owns its registry, so several servers (tests) coexist.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from adaserve.engine.core import IterationStats
from adaserve.engine.request import RequestStats
from adaserve.server.slo_metrics import LATENCY_BUCKETS, SloMetrics, rejected_counter

HISTORY_S = 600  # seconds of per-second history the dashboard can show


@dataclass(frozen=True, slots=True)
class Finished:
    """One finished request, as the dashboard and the attainment window see it."""

    t: float  # wall time (time.time()) at finish
    slo_class: str
    slo_ms: float | None
    tpot_ms: float | None
    ttft_ms: float | None
    output_tokens: int
    attained: bool | None  # every objective met; None: best effort
    slo_ttft_ms: float | None = None
    ttft_attained: bool | None = None  # None: no TTFT SLO


class ServerMetrics:
    def __init__(self, classes: list[str], best_effort: Collection[str] = ()) -> None:
        self.registry = r = CollectorRegistry()
        self.slo = SloMetrics(classes, r, best_effort)
        self.rejected = rejected_counter(r)
        self.accepted = Gauge("adaserve_accepted_tokens_per_step", "tokens emitted per "
                              "request per iteration, last iteration", registry=r)
        self.iteration = Histogram("adaserve_iteration_seconds", "engine iteration latency",
                                   buckets=LATENCY_BUCKETS, registry=r)
        self.batch_tokens = Gauge("adaserve_batch_tokens", "tokens verified in the last "
                                  "iteration (budget used)", registry=r)
        self.depth = Gauge("adaserve_spec_depth", "draft depth d, last iteration", registry=r)
        self.width = Gauge("adaserve_spec_width", "draft width w, last iteration", registry=r)
        self.running = Gauge("adaserve_running_requests", "requests decoding", registry=r)
        self.waiting = Gauge("adaserve_waiting_requests", "requests queued", registry=r)
        self.online = {k: Gauge(f"adaserve_online_draft_{k}", doc, registry=r) for k, doc in (
            ("updates", "online draft updates swapped in"),
            ("rollbacks", "online draft updates rolled back (held-back agreement fell)"),
            ("agreement_before", "held-back greedy agreement of the served draft, last update"),
            ("agreement_after", "held-back greedy agreement of the updated draft, last update"),
            ("buffer_positions", "target distributions buffered for the next update"),
            ("training", "1 while an update is being trained"))}
        self._lock = threading.Lock()
        self.finished: collections.deque[Finished] = collections.deque(maxlen=4096)
        self.iterations: collections.deque[tuple[float, IterationStats]] = collections.deque(
            maxlen=20000)

    # ---- writers ------------------------------------------------------------------------

    def on_iteration(self, s: IterationStats) -> None:
        """Called on the engine thread after every iteration that decoded."""
        self.iteration.observe(s.seconds)
        self.batch_tokens.set(s.verify_tokens)
        self.depth.set(s.depth)
        self.width.set(s.width)
        self.running.set(s.running)
        self.waiting.set(s.waiting)
        if s.running:
            self.accepted.set(s.emitted_tokens / s.running)
        with self._lock:
            self.iterations.append((time.time(), s))

    def on_finished(self, slo_class: str, st: RequestStats) -> Finished:
        self.slo.observe(slo_class, st.slo_attained, st.output_tokens, st.tpot_s, st.ttft_s,
                         st.ttft_attained)
        f = Finished(time.time(), slo_class, _ms(st.slo_tpot_s), _ms(st.tpot_s), _ms(st.ttft_s),
                     st.output_tokens, st.slo_attained, _ms(st.slo_ttft_s), st.ttft_attained)
        with self._lock:
            self.finished.append(f)
        return f

    def on_online_draft(self, state: dict) -> None:
        """The online draft's state (OnlineDraft.state()), read when /metrics is scraped."""
        for k, g in self.online.items():
            v = state.get(k)
            if v is not None:
                g.set(float(v))

    # ---- readers ------------------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self, since_s: float = HISTORY_S) -> dict:
        """What the dashboard draws: finished requests and iterations of the last since_s."""
        now = time.time()
        lo = now - since_s
        with self._lock:
            fin = [f for f in self.finished if f.t >= lo]
            its = [(t, s) for t, s in self.iterations if t >= lo]
        return {
            "now": now,
            "attainment": self.slo.windows(),
            "ttft_attainment": self.slo.ttft_windows(),
            "finished": [{"t": f.t, "class": f.slo_class, "slo_ms": f.slo_ms,
                          "tpot_ms": f.tpot_ms, "ttft_ms": f.ttft_ms,
                          "slo_ttft_ms": f.slo_ttft_ms, "ttft_attained": f.ttft_attained,
                          "tokens": f.output_tokens, "attained": f.attained} for f in fin],
            "seconds": _per_second(its),
        }


def _per_second(its: list[tuple[float, IterationStats]]) -> list[dict]:
    """Iterations averaged per wall-clock second (a few hundred points for ten minutes)."""
    by: dict[int, list[IterationStats]] = collections.defaultdict(list)
    for t, s in its:
        by[int(t)].append(s)
    out = []
    for sec in sorted(by):
        ss = by[sec]
        n = len(ss)
        running = sum(s.running for s in ss)
        out.append({"t": sec, "iterations": n, "running": running / n,
                    "waiting": sum(s.waiting for s in ss) / n,
                    "depth": sum(s.depth for s in ss) / n, "width": sum(s.width for s in ss) / n,
                    "batch_tokens": sum(s.verify_tokens for s in ss) / n,
                    "accepted_per_step": sum(s.emitted_tokens for s in ss) / max(running, 1),
                    "tokens": sum(s.emitted_tokens for s in ss)})
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3

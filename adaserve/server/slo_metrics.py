"""Per-class SLO metrics of finished requests (DESIGN.md "Metrics"), one definition for both
servers: the embedded server's registry, and SGLang's tokenizer manager, where they join
SGLang's own metrics in its Prometheus multiprocess directory.

Only prometheus_client is imported here (no torch, no engine), so the SGLang plugin can
use it in any SGLang process.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                   1.0, 2.0, 5.0, 10.0, 30.0)
WINDOW = 200  # finished requests per class in the sliding attainment window


def rejected_counter(registry: CollectorRegistry | None = None) -> Counter:
    """``adaserve_rejected_requests{reason}``: requests a server refused before running them
    (the embedded server's registry; registry=None: the default one, which SGLang's
    multiprocess /metrics collects from its scheduler process, refusal.py)."""
    kw = {} if registry is None else {"registry": registry}
    return Counter("adaserve_rejected_requests", "requests refused before running",
                   ["reason"], **kw)


class SloMetrics:
    """requests{slo_class,attained}, TPOT and TTFT histograms, output and goodput tokens,
    and the sliding-window attainment ratio, per SLO class; and the same count and ratio of
    the TTFT SLO alone, over the requests that had one (``attained`` of the first counts
    every objective a request had, so a TTFT miss shows there too).

    registry=None registers in prometheus_client's default registry: what SGLang's
    /metrics collects from every process when it runs in multiprocess mode. There a
    gauge needs a rule for combining processes; the attainment window lives in one
    process (the tokenizer manager), so its latest value is the one to show.

    A class in ``best_effort`` has no SLO, so nothing to attain: it gets no attainment
    series at all (a 0 would read as failure on a dashboard). The others are listed from
    the first scrape (in multiprocess mode a gauge has no sample until it is set). The TTFT
    series appear with a class's first request that had a TTFT SLO: a class has one only
    where the server could reason one (a profile) or the client named one."""

    def __init__(self, classes: list[str], registry: CollectorRegistry | None = None,
                 best_effort: Collection[str] = ()) -> None:
        kw = {} if registry is None else {"registry": registry}
        label = ["slo_class"]
        self.requests = Counter("adaserve_requests", "finished requests",
                                ["slo_class", "attained"], **kw)
        self.tpot = Histogram("adaserve_tpot_seconds", "request TPOT", label,
                              buckets=LATENCY_BUCKETS, **kw)
        self.ttft = Histogram("adaserve_ttft_seconds", "request time to first token", label,
                              buckets=LATENCY_BUCKETS, **kw)
        self.attainment = Gauge("adaserve_slo_attainment_ratio", f"attained / finished over "
                                f"the last {WINDOW} finished requests of the class", label,
                                multiprocess_mode="mostrecent", **kw)
        self.goodput = Counter("adaserve_goodput_tokens", "output tokens of requests that "
                               "met their SLO", label, **kw)
        self.output_tokens = Counter("adaserve_output_tokens", "output tokens", label, **kw)
        self.ttft_requests = Counter("adaserve_ttft_slo_requests", "finished requests with a "
                                     "TTFT SLO, by whether the first token came within it",
                                     ["slo_class", "attained"], **kw)
        self.ttft_attainment = Gauge("adaserve_ttft_attainment_ratio", "first token within "
                                     f"the TTFT SLO / finished, over the last {WINDOW} finished "
                                     "requests of the class with a TTFT SLO", label,
                                     multiprocess_mode="mostrecent", **kw)
        for c in classes:  # every class shows up from the first scrape, not its first request
            if c not in best_effort:
                self.attainment.labels(c)
            self.goodput.labels(c)
        self._lock = threading.Lock()
        self._window: dict[str, collections.deque[bool]] = collections.defaultdict(
            lambda: collections.deque(maxlen=WINDOW))
        self._ttft_window: dict[str, collections.deque[bool]] = collections.defaultdict(
            lambda: collections.deque(maxlen=WINDOW))

    def observe(self, slo_class: str, attained: bool | None, output_tokens: int,
                tpot_s: float | None, ttft_s: float | None,
                ttft_attained: bool | None = None) -> None:
        """One finished request. attained None: best effort, which counts as served well
        in goodput and is left out of attainment. ttft_attained None: no TTFT SLO, left
        out of the TTFT series."""
        label = "none" if attained is None else str(bool(attained)).lower()
        self.requests.labels(slo_class, label).inc()
        self.output_tokens.labels(slo_class).inc(output_tokens)
        if tpot_s is not None:
            self.tpot.labels(slo_class).observe(tpot_s)
        if ttft_s is not None:
            self.ttft.labels(slo_class).observe(ttft_s)
        if attained is not False:
            self.goodput.labels(slo_class).inc(output_tokens)
        if attained is not None:
            with self._lock:
                w = self._window[slo_class]
                w.append(bool(attained))
                ratio = sum(w) / len(w)
            self.attainment.labels(slo_class).set(ratio)
        if ttft_attained is not None:
            self.ttft_requests.labels(slo_class, str(bool(ttft_attained)).lower()).inc()
            with self._lock:
                w = self._ttft_window[slo_class]
                w.append(bool(ttft_attained))
                ratio = sum(w) / len(w)
            self.ttft_attainment.labels(slo_class).set(ratio)

    def windows(self) -> dict[str, float | None]:
        with self._lock:
            return {c: (sum(w) / len(w) if w else None) for c, w in self._window.items()}

    def ttft_windows(self) -> dict[str, float | None]:
        """The TTFT attainment window of each class that has had a TTFT SLO."""
        with self._lock:
            return {c: sum(w) / len(w) for c, w in self._ttft_window.items() if w}

"""Mixed-SLO traffic for any server with AdaServe's HTTP contract (the embedded server, or
SGLang with the plugin), over the OpenAI streaming chat API, the SLO sent as a header.

Open loop: one dispatcher user fixes every send time before the run (Poisson, gamma, an
Azure trace or a paper trace, whose requests carry their own SLOs) and starts each request
at its time in its own greenlet, whatever is outstanding, so a slow server cannot thin the
offered load (no coordinated omission). Each request's scheduled and actual send times,
TTFT, TPOT, tokens and SLO are recorded from its stream (JSONL at --records) and reported
to Locust per class ("stream [urgent]", "TTFT [urgent]", "TPOT [urgent]").

    locust -f loadgen/locustfile.py --host http://127.0.0.1:8000            # web UI
    adaserve loadgen --host http://127.0.0.1:8000 --rate 1 --requests 100   # headless
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import gevent
import requests
from locust import HttpUser, constant, events, task
from locust.stats import CSV_STATS_INTERVAL_SEC

from adaserve.loadgen.arrivals import Arrival, build_plan, wait_until
from adaserve.loadgen.options import add_mix_draw_args, add_traffic_args
from adaserve.loadgen.records import Record, write_jsonl


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    # Locust's own parser: only its add_argument knows include_in_web_ui
    add_traffic_args(parser, include_in_web_ui=True)
    # two flags setting one value: the web UI would show one text field with one's help
    add_mix_draw_args(parser, "iid", include_in_web_ui=False)
    parser.add_argument("--records", default="loadgen-records.jsonl", include_in_web_ui=True,
                        help="where the per-request JSONL goes")
    parser.add_argument("--class-tpot-ms", default="", include_in_web_ui=False,
                        help="name=ms,... the server's class SLOs (default: read /server_info)")


class SLOTraffic(HttpUser):
    """The dispatcher: run with one user (-u 1); it sends every request of the plan."""

    fixed_count = 1
    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        info = _Info(self.host)
        paper = opts.arrival == "paper" and opts.baseline_ms <= 0
        self.plan = build_plan(opts, info.baseline_ms() if paper else None)
        self.slo_ms = _class_slos(info, opts.class_tpot_ms)
        self.records: list[Record] = []
        self.session = requests.Session()

    @task
    def dispatch(self) -> None:
        t0 = time.monotonic()
        greenlets = [gevent.spawn_later(a.t, self._send, a, t0) for a in self.plan]
        progress = gevent.spawn(self._progress, t0)
        gevent.joinall(greenlets)
        progress.kill()
        records = self._save()
        print(f"[adaserve] {len(records)} requests recorded in "
              f"{self.environment.parsed_options.records}", flush=True)
        # locust rewrites its stats CSV every CSV_STATS_INTERVAL_SEC and not again when it
        # quits: without a wait, the events of the requests that ended in the last second
        # would be missing from locust_stats.csv
        gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.25)
        runner = self.environment.runner
        if runner is not None:
            runner.quit()
        self.stop()

    def _save(self) -> list[Record]:
        records = sorted(self.records, key=lambda r: r.index)
        write_jsonl(records, Path(self.environment.parsed_options.records))
        return records

    def _progress(self, t0: float) -> None:
        while True:
            gevent.sleep(5)
            # a checkpoint: a run stopped from outside (the soak's grace time, a signal)
            # keeps what finished, the rest marked pending, instead of losing every record
            self._save()
            done = [r for r in self.records if r.status != "pending"]
            att = [r.attained for r in done if r.attained is not None]
            print(f"[adaserve] t={time.monotonic() - t0:6.1f}s sent {len(self.records)}/"
                  f"{len(self.plan)} finished {len(done)} attained "
                  f"{(sum(att) / len(att) if att else 0):.0%}", flush=True)

    def _send(self, a: Arrival, t0: float) -> None:
        # spawn_later may wake this greenlet early; the request must not go before its time
        now = wait_until(a.t, lambda: time.monotonic() - t0, gevent.sleep)
        slo = a.slo_ms if a.slo_ms is not None else self.slo_ms.get(a.slo_class)
        rec = Record(a.index, a.slo_class, slo, a.t, now)
        self.records.append(rec)
        body, headers = a.request()
        # names the request to whatever logs it on the way (the picking SLO front's log,
        # joined with these records by benchmarks/fleet/routing.py)
        headers = {**headers, "X-Request-Id": rec.request_id}
        exc = None
        try:
            with self.session.post(f"{self.host}/v1/chat/completions", json=body, stream=True,
                                   headers=headers, timeout=600) as r:
                if r.status_code == 503:
                    rec.status = "rejected"
                elif r.status_code != 200:
                    rec.status, rec.error = "error", f"HTTP {r.status_code}: {r.text[:200]}"
                else:
                    _read_stream(r, rec, t0)
        except Exception as e:  # network trouble is a result, not a crash of the run
            rec.status, rec.error = "error", f"{type(e).__name__}: {e}"
        rec.finished_s = time.monotonic() - t0
        if rec.status != "ok":
            exc = RuntimeError(rec.error or rec.status)
        ev = self.environment.events.request
        ev.fire(request_type="POST", name=f"stream [{a.slo_class}]",
                response_time=1e3 * (rec.finished_s - rec.sent_s),
                response_length=rec.output_tokens, exception=exc, context={})
        if rec.status == "ok":
            if rec.ttft_ms is not None:
                ev.fire(request_type="SLO", name=f"TTFT [{a.slo_class}]",
                        response_time=rec.ttft_ms, response_length=0, exception=None, context={})
            if rec.tpot_ms is not None:
                miss = None if rec.attained is not False else RuntimeError("TPOT over SLO")
                ev.fire(request_type="SLO", name=f"TPOT [{a.slo_class}]",
                        response_time=rec.tpot_ms, response_length=0, exception=miss,
                        context={})


def _read_stream(r, rec: Record, t0: float) -> None:
    for line in r.iter_lines():
        if not line or not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            rec.status = "ok" if rec.status == "pending" else rec.status
            return
        ev = json.loads(data)
        if "error" in ev:
            rec.status, rec.error = "error", ev["error"].get("message")
            continue
        now = time.monotonic() - t0
        choice = (ev.get("choices") or [{}])[0]
        if choice.get("delta", {}).get("content"):
            if rec.first_token_s is None:
                rec.first_token_s = now
            rec.last_token_s = now
        if ev.get("usage"):
            rec.output_tokens = ev["usage"]["completion_tokens"]
            rec.prompt_tokens = ev["usage"]["prompt_tokens"]
        if choice.get("finish_reason") is not None:
            rec.server = {k: ev.get(k) for k in ("slo_class", "slo_tpot_ms", "slo_ttft_ms",
                                                 "tpot_ms", "ttft_ms", "ttft_attained",
                                                 "slo_attained", "accepted_tokens_per_step")}
    if rec.status == "pending":
        rec.status, rec.error = "error", "the stream ended without [DONE]"


class _Info:
    """The server's /server_info, fetched once when first needed."""

    def __init__(self, host: str) -> None:
        self.host, self._info = host, None

    def get(self) -> dict:
        if self._info is None:
            self._info = requests.get(f"{self.host}/server_info", timeout=30).json()
        return self._info

    def baseline_ms(self) -> float | None:
        return self.get().get("baseline_latency_ms")


def _class_slos(info: _Info, spec: str) -> dict[str, float | None]:
    """Class -> TPOT SLO (ms): given, or read from the server's /server_info."""
    if spec:
        out = {}
        for item in spec.split(","):
            name, _, ms = item.partition("=")
            out[name.strip()] = None if ms.strip() in ("", "none") else float(ms)
        return out
    return {c["name"]: c["tpot_ms"] for c in info.get()["slo_classes"]}

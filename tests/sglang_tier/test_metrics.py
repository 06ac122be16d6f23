"""Per-class SLO metrics on SGLang's own /metrics route: finished requests go through the
hooked TokenizerManager method in a process set up as SGLang sets up its tokenizer manager
(PROMETHEUS_MULTIPROC_DIR from SGLang's set_prometheus_multiproc_dir, plugins loaded
first), and the metrics are read back through SGLang's add_prometheus_middleware, which
merges every process's files. A fresh interpreter per test: prometheus_client chooses
multiprocess mode once per process, at its first import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent('''
    import asyncio, os, sys
    from types import SimpleNamespace

    from sglang.srt.plugins import load_plugins
    load_plugins()  # as SGLang's Engine does: before the multiprocess directory is set
    from sglang.srt.utils.common import add_prometheus_middleware, set_prometheus_multiproc_dir
    set_prometheus_multiproc_dir()

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang.srt.managers import tokenizer_manager as tm
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.observability.req_time_stats import APIServerReqTimeStats

    tm.get_spec = lambda: SimpleNamespace(speculative_num_draft_tokens=4)

    def finish(rid, custom, tokens, tpot_s, enable=True, log=True):
        ts = APIServerReqTimeStats()
        ts.created_time, ts.first_token_time = 10.0, 10.2
        ts.finished_time = 10.2 + (tokens - 1) * tpot_s
        obj = GenerateReqInput(text="hi", sampling_params={"custom_params": custom},
                               log_metrics=log)
        st = tm.ReqState(out_list=[], finished=True, event=asyncio.Event(), obj=obj,
                         time_stats=ts)
        me = SimpleNamespace(rid_to_state={rid: st}, enable_metrics=enable,
                             server_args=SimpleNamespace(speculative_algorithm="ADASERVE"))
        recv = SimpleNamespace(rids=[rid], completion_tokens=[tokens], spec_verify_ct=[4],
                               spec_num_correct_drafts=[0], spec_num_cap_tokens=None,
                               spec_correct_drafts_histogram=None)
        meta = {}
        tm.TokenizerManager._calculate_spec_decoding_metrics(me, meta, recv, 0)
        return meta

    urgent = {"slo_class": "urgent", "tpot_slo_ms": 50.0}
    finish("a", urgent, 11, 0.040)  # met
    finish("b", urgent, 21, 0.060)  # missed
    finish("c", urgent, 5, 0.045)   # met
    finish("d", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 7, 0.1)
    finish("e", {"slo_class": "best-effort"}, 9, 1.0)
    finish("f", urgent, 100, 0.01, enable=False)  # a server without --enable-metrics
    finish("g", urgent, 100, 0.01, log=False)  # a health check, or the start-up warm-up
    # a TTFT SLO (first token at 200 ms): met, then missed with the TPOT met
    finish("h", {"slo_class": "custom", "tpot_slo_ms": 120.0, "ttft_slo_ms": 300.0}, 4, 0.1)
    finish("i", {"slo_class": "custom", "tpot_slo_ms": 120.0, "ttft_slo_ms": 100.0}, 4, 0.1)

    app = FastAPI()
    add_prometheus_middleware(app)
    print(TestClient(app).get("/metrics/").text)
''')


def _scrape(tmp_path) -> dict[str, float]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "ADASERVE_SLO_CLASSES": "urgent=50,moderate=120,relaxed=400,best-effort"}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    samples = {}
    for line in out.stdout.splitlines():
        if line.startswith("adaserve_"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_per_class_attainment_and_goodput_on_sglangs_metrics_route(tmp_path):
    m = _scrape(tmp_path)
    assert m['adaserve_requests_total{attained="true",slo_class="urgent"}'] == 2
    assert m['adaserve_requests_total{attained="false",slo_class="urgent"}'] == 1
    assert m['adaserve_requests_total{attained="none",slo_class="best-effort"}'] == 1
    assert m['adaserve_goodput_tokens_total{slo_class="urgent"}'] == 11 + 5
    assert m['adaserve_output_tokens_total{slo_class="urgent"}'] == 11 + 21 + 5
    assert m['adaserve_goodput_tokens_total{slo_class="relaxed"}'] == 7
    assert m['adaserve_goodput_tokens_total{slo_class="best-effort"}'] == 9
    assert m['adaserve_slo_attainment_ratio{slo_class="urgent"}'] == 2 / 3
    assert m['adaserve_slo_attainment_ratio{slo_class="relaxed"}'] == 1.0
    # no request of the class, no window: a multiprocess "mostrecent" gauge has no sample
    assert 'adaserve_slo_attainment_ratio{slo_class="moderate"}' not in m
    assert m['adaserve_tpot_seconds_count{slo_class="urgent"}'] == 3
    # TPOTs 40, 60, 45 ms: two in the <= 50 ms bucket
    assert m['adaserve_tpot_seconds_bucket{le="0.05",slo_class="urgent"}'] == 2
    assert m['adaserve_ttft_seconds_sum{slo_class="relaxed"}'] == pytest.approx(0.2)


def test_ttft_attainment_per_class_on_sglangs_metrics_route(tmp_path):
    """As the embedded server counts it: a TTFT miss is a miss of the request, and the
    TTFT SLO alone has its own count and window over the requests that had one."""
    m = _scrape(tmp_path)
    assert m['adaserve_requests_total{attained="true",slo_class="custom"}'] == 1
    assert m['adaserve_requests_total{attained="false",slo_class="custom"}'] == 1
    assert m['adaserve_ttft_slo_requests_total{attained="true",slo_class="custom"}'] == 1
    assert m['adaserve_ttft_slo_requests_total{attained="false",slo_class="custom"}'] == 1
    assert m['adaserve_ttft_attainment_ratio{slo_class="custom"}'] == 0.5
    # no TTFT SLO (none named, none configured): no TTFT series for the class
    assert not any(k.startswith("adaserve_ttft_slo_requests") and 'slo_class="urgent"' in k
                   for k in m)

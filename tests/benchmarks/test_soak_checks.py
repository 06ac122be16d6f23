"""The soak benchmark's arithmetic (benchmarks/serving/soak_checks.py) on made-up inputs: metrics
parsing (loadgen/serve_process.py, which the soak and bench share), failure counts from
records, the probe's rate, the request count, the RSS slope."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaserve.loadgen.records import Record
from adaserve.loadgen.serve_process import parse_metrics

from benchmarks.serving import soak_checks as soak

METRICS = """\
# HELP adaserve_requests_total finished requests
# TYPE adaserve_requests_total counter
adaserve_requests_total{attained="true",slo_class="urgent"} 3.0
adaserve_requests_total{attained="false",slo_class="urgent"} 2.0
adaserve_requests_total{attained="none",slo_class="best-effort"} 1.0
# HELP adaserve_requests_created finished requests
# TYPE adaserve_requests_created gauge
adaserve_requests_created{attained="true",slo_class="urgent"} 1.7e9
# HELP adaserve_tpot_seconds request TPOT
# TYPE adaserve_tpot_seconds histogram
adaserve_tpot_seconds_bucket{le="0.1",slo_class="urgent"} 4.0
adaserve_tpot_seconds_bucket{le="+Inf",slo_class="urgent"} 5.0
adaserve_tpot_seconds_count{slo_class="urgent"} 5.0
adaserve_tpot_seconds_sum{slo_class="urgent"} 0.4
# HELP adaserve_running_requests requests decoding
# TYPE adaserve_running_requests gauge
adaserve_running_requests 0.0
# HELP adaserve_waiting_requests requests queued
# TYPE adaserve_waiting_requests gauge
adaserve_waiting_requests 2.0
# HELP python_gc_objects_collected_total objects collected
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 100.0
"""


def test_parse_metrics_keeps_adaserve_samples_without_buckets_or_created():
    m = parse_metrics(METRICS)
    assert m["adaserve_running_requests"] == 0.0
    assert m["adaserve_waiting_requests"] == 2.0
    assert m['adaserve_requests_total{attained="false",slo_class="urgent"}'] == 2.0
    assert m['adaserve_tpot_seconds_count{slo_class="urgent"}'] == 5.0
    assert not any("_bucket" in k or "_created" in k or k.startswith("python_") for k in m)


def test_total_sums_label_sets_and_not_longer_names():
    m = parse_metrics(METRICS)
    assert soak.total(m, "adaserve_requests_total") == 6.0
    assert soak.total(m, "adaserve_running_requests") == 0.0
    assert soak.total(m, "adaserve_tpot_seconds") == 0.0  # only _count/_sum exist
    assert soak.total({}, "adaserve_requests_total") == 0.0


def _rec(i: int, status: str, error: str | None = None) -> Record:
    return Record(i, "urgent", 100.0, 0.0, 0.0, status=status, error=error)


def test_failures_sort_each_record_once():
    recs = [_rec(0, "ok"), _rec(1, "ok"), _rec(2, "rejected"),
            _rec(3, "error", "HTTP 500: boom"), _rec(4, "error", "HTTP 400: bad"),
            _rec(5, "error", "the stream ended without [DONE]"),
            _rec(6, "error", "ConnectionError: refused"), _rec(7, "pending")]
    f = soak.failures(recs)
    assert (f.sent, f.ok, f.http_5xx, f.http_4xx, f.other, f.pending) == (8, 2, 2, 1, 2, 1)
    assert f.failed == 6
    assert soak.http_status(recs[2]) == 503 and soak.http_status(recs[3]) == 500
    assert soak.http_status(recs[5]) is None and soak.http_status(recs[0]) is None


def test_failures_of_a_clean_run_and_of_no_records():
    assert soak.failures([_rec(i, "ok") for i in range(5)]).failed == 0
    f = soak.failures([])
    assert (f.sent, f.ok, f.http_5xx) == (0, 0, 0)


def test_completion_rate_counts_the_half_open_window():
    ends = [1.0, 10.0, 15.0, 19.999, 20.0, 30.0]
    assert soak.completion_rate(ends, 10.0, 20.0) == pytest.approx(3 / 10)
    with pytest.raises(ValueError, match="end > start"):
        soak.completion_rate(ends, 5.0, 5.0)


def test_soak_requests_is_rate_times_duration():
    assert soak.soak_requests(1.2, 10) == 720
    assert soak.soak_requests(0.001, 1) == 1
    for rate, minutes in ((0.0, 10), (-1.0, 10), (math.nan, 10), (1.0, 0), (1.0, math.inf)):
        with pytest.raises(ValueError):
            soak.soak_requests(rate, minutes)


def test_rss_slope_recovers_a_line_in_mib_per_minute_within_the_window():
    t = np.arange(0, 601, 5.0)
    rss = 3000 + 2.0 * t / 60  # +2 MiB/min
    rss[t < 300] += 500  # a step before the window must not count
    s = soak.rss_slope(t, rss, 300, 600)
    assert s.mib_per_min == pytest.approx(2.0)
    assert s.intercept_mib == pytest.approx(3000.0)
    assert s.samples == 61 and s.stderr == pytest.approx(0.0, abs=1e-9)


def test_rss_slope_of_noise_is_near_zero_with_an_honest_error():
    rng = np.random.default_rng(0)
    t = np.arange(0, 301, 5.0)
    s = soak.rss_slope(t, 3000 + rng.normal(0, 20, t.size), 0, 300)
    assert abs(s.mib_per_min) < 3 * s.stderr
    assert 0 < s.stderr < 10


def test_rss_slope_needs_two_times():
    with pytest.raises(ValueError, match="two times"):
        soak.rss_slope([0.0, 10.0], [1.0, 2.0], 5, 9)
    s = soak.rss_slope([0.0, 60.0], [1.0, 2.0], 0, 60)
    assert s.mib_per_min == pytest.approx(1.0) and math.isnan(s.stderr)


def test_others_cores_is_the_machine_busy_time_not_ours():
    assert soak.others_cores((100.0, 10.0), (130.0, 25.0), 10.0) == pytest.approx(1.5)
    assert soak.others_cores((100.0, 10.0), (110.0, 21.0), 10.0) == 0.0  # rounding: never < 0
    with pytest.raises(ValueError):
        soak.others_cores((0.0, 0.0), (1.0, 0.0), 0.0)

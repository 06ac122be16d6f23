"""Arrival schedules: rates and burstiness right in distribution, trace replay exact."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from adaserve.loadgen.arrivals import gamma_times, poisson_times, read_trace, schedule
from adaserve.loadgen.workload import ClassMix, prompt_set


def test_poisson_rate_and_exponential_gaps():
    t = poisson_times(rate=4.0, n=4000, seed=1)
    assert t[0] == 0 and np.all(np.diff(t) > 0)
    gaps = np.diff(t)
    # mean gap 1/rate: a 99.9% interval for the mean of 3999 exponential gaps
    half = 3.29 * 0.25 / np.sqrt(gaps.size)
    assert abs(gaps.mean() - 0.25) < half
    # the gaps are exponential: Kolmogorov-Smirnov at 1% significance
    assert stats.kstest(gaps, "expon", args=(0, 0.25)).pvalue > 0.01
    # and the counts per second are Poisson-like: variance / mean near 1
    counts = np.bincount(t.astype(int))[:-1]
    assert 0.8 < counts.var() / counts.mean() < 1.2


@pytest.mark.parametrize("cv", [0.5, 2.0, 3.0])
def test_gamma_gaps_have_the_asked_burstiness_at_the_same_rate(cv):
    gaps = np.diff(gamma_times(rate=2.0, cv=cv, n=20000, seed=2))
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_same_seed_same_schedule_and_bad_inputs():
    assert np.array_equal(poisson_times(1.0, 50, seed=3), poisson_times(1.0, 50, seed=3))
    assert not np.array_equal(poisson_times(1.0, 50, seed=3), poisson_times(1.0, 50, seed=4))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            poisson_times(bad, 5)
    with pytest.raises(ValueError):
        gamma_times(1.0, 0.0, 5)


def test_trace_replay_azure_schema_with_time_scale(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.0000000,396,109\n"
                 "2023-11-16 18:15:47.1805900,879,20\n")
    rows = read_trace(p)
    assert [r.t for r in rows] == pytest.approx([0.0, 0.5, 3.31941])
    assert [(r.context_tokens, r.generated_tokens) for r in rows] == [(374, 44), (879, 20),
                                                                      (396, 109)]
    assert [r.t for r in read_trace(p, time_scale=0.5)] == pytest.approx([0.0, 0.25, 1.659705])
    assert len(read_trace(p, limit=2)) == 2
    arr = schedule([r.t for r in rows], ClassMix.parse("urgent=1"), prompt_set("short", 2),
                   max_tokens=[r.generated_tokens for r in rows])
    assert [a.max_tokens for a in arr] == [44, 20, 109] and {a.slo_class for a in arr} == {"urgent"}
    bad = tmp_path / "bad.csv"
    bad.write_text("time,tokens\n1,2\n")
    with pytest.raises(ValueError, match="TIMESTAMP"):
        read_trace(bad)
    worse = tmp_path / "worse.csv"
    worse.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n")
    with pytest.raises(ValueError, match="row 2"):
        read_trace(worse)

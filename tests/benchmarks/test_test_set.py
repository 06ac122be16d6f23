"""The test set's traces (benchmarks/paper/test_set_traces.py) and Fig. 14's (benchmarks/paper/fig14.py): each
(set-up, kind, rate, seed) is its own deterministic trace, seeds vary arrivals, classes and
prompt lengths, and the kinds draw the arrivals and mixes they say."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from benchmarks.paper import fig14
from benchmarks.paper import test_set_traces as ts
from benchmarks.paper.kit import KIT, SETUPS

pytestmark = pytest.mark.skipif(not (KIT / "traces").is_dir(),
                                reason="needs the paper-scale kit beside the repo")


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture
def traces(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "TRACES", tmp_path)
    return lambda *a: _rows(ts.make_trace(*a))


def test_a_trace_is_a_function_of_its_key_and_seeds_vary_everything(traces):
    llama = SETUPS["llama"]
    a, again = traces(llama, "poisson", 4.8, 0), traces(llama, "poisson", 4.8, 0)
    assert a == again
    b = traces(llama, "poisson", 4.8, 1)
    assert len(a) == len(b) == round(4.8 * ts.SPAN_S)
    for col in ("emission_time_ms", "input_length", "slo_ratio"):
        assert [r[col] for r in a] != [r[col] for r in b], col
    # another rate is another draw, not the same requests squeezed
    c = traces(llama, "poisson", 4.6, 0)
    assert [r["input_length"] for r in c[:50]] != [r["input_length"] for r in a[:50]]
    assert {r["output_length"] for r in a} == {str(ts.OUTPUT_CAP)}


def test_the_kinds_draw_the_arrivals_and_mixes_they_name(traces):
    qwen = SETUPS["qwen"]
    gaps = {}
    for kind in ("poisson", "bursty"):
        t = np.array([float(r["emission_time_ms"]) for r in traces(qwen, kind, 4.0, 0)])
        gaps[kind] = np.diff(t)
        assert t[-1] / 1000 == pytest.approx(ts.SPAN_S, rel=0.15)  # the mean rate holds
    cv = {k: g.std() / g.mean() for k, g in gaps.items()}
    assert 0.85 < cv["poisson"] < 1.15 and 1.6 < cv["bursty"] < 2.4
    urgent = traces(qwen, "urgent", 4.0, 0)
    share = np.mean([float(r["slo_ratio"]) == ts.URGENT for r in urgent])
    assert 0.76 < share < 0.84
    authors = np.mean([float(r["slo_ratio"]) == ts.URGENT for r in traces(qwen, "poisson", 4.0, 0)])
    assert 0.54 < authors < 0.64  # the authors' mix: 59% x1.2


def test_a_class_keeps_its_prompt_lengths(traces):
    rows = traces(SETUPS["llama"], "poisson", 4.4, 2)
    pool = ts._pool()
    for r in rows[:200]:
        assert int(r["input_length"]) in set(pool[float(r["slo_ratio"])].tolist())


def test_fig14s_trace_is_the_artifacts_with_outputs_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(fig14, "OUT", tmp_path)
    capped, raw = _rows(fig14.capped_trace()), _rows(fig14.TRACE)
    assert len(capped) == len(raw) == 1445
    assert {r["output_length"] for r in capped} == {str(fig14.OUTPUT_LENGTH)}
    assert [(r["emission_time_ms"], r["input_length"], r["slo_ratio"]) for r in capped] == [
        (r["emission_time_ms"], r["input_length"], r["slo_ratio"]) for r in raw]
    stats = "\n".join(fig14.trace_stats(fig14.TRACE))
    assert "| -150.0 | 464 | 3878 | 388 |" in stats  # the summarization class, as the issue counts

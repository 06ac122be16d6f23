"""The test set served one request at a time (benchmarks/paper/alone.py): the alone twin
keeps every request and spaces them out, and the page reads the ceiling from the runs."""

import csv

from benchmarks.paper import alone
from benchmarks.paper.test_set_traces import GOAL_RATES


def test_the_alone_twin_keeps_every_request_in_order_and_spaces_them(tmp_path, monkeypatch):
    monkeypatch.setattr(alone, "ALONE", tmp_path / "alone")
    trace = tmp_path / "t.csv"
    trace.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                     "0.000,12,256,1.2\n3.5,40,256,-50.0\n3.6,7,256,-150.0\n")
    rows = list(csv.DictReader(alone.alone_trace(trace).open()))
    assert [(r["input_length"], r["slo_ratio"]) for r in rows] == [
        ("12", "1.2"), ("40", "-50.0"), ("7", "-150.0")]
    gaps = [float(b["emission_time_ms"]) - float(a["emission_time_ms"])
            for a, b in zip(rows, rows[1:])]
    assert gaps == [1000 * alone.SPACING_S] * 2


def _data(authors_trace: float, authors_alone: float, ours_alone: float) -> dict:
    cells = {}
    for rate in GOAL_RATES["qwen"]:
        for where, s, v in (("trace", alone.AUTHORS, authors_trace),
                            ("trace", alone.OURS, authors_trace + 2),
                            ("alone", alone.AUTHORS, authors_alone),
                            ("alone", alone.OURS, ours_alone)):
            cells[f"qwen/poisson/{rate:g}/{where}/{s}"] = {"overall": v, "x1.2": v - 5}
    return {"command": "python -m benchmarks.paper.alone", "machine": "m", "date": "d",
            "commit": "c", "pairs": ["qwen"], "kinds": ["poisson"], "seeds": [0],
            "cells": {"paper": cells, "end to end": {k: {c: v - 10 for c, v in cell.items()}
                                                     for k, cell in cells.items()}}}


def test_the_page_says_whether_the_goal_can_be_reached():
    text = "\n".join(alone.page(_data(94.0, 97.5, 98.0)))
    assert "| 4 | 94.0 | 96.0 (+2.0) | 97.5 | 98.0 | +4.0 | no |" in text
    text = "\n".join(alone.page(_data(90.0, 97.5, 95.0)))
    assert "| 4 | 90.0 | 92.0 (+2.0) | 97.5 | 95.0 | +7.5 | yes |" in text
    assert "| 4 | 92.5 / 90.0 (87.0) |" in text  # per class: alone authors / ours (trace)
    # every reading gets its tables: end to end here 10 points lower throughout
    assert "Attainment, end to end reading:" in text
    assert "| 4 | 80.0 | 82.0 (+2.0) | 87.5 | 85.0 | +7.5 | yes |" in text

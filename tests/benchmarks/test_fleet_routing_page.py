"""The CPU fleet's routing page (benchmarks/fleet/routing_page.py) on runs made up here:
both attainment readings, the spread over rounds, the goal at the top rate and the
picker's predictions joined by request id (benchmarks/fleet/routing.py). The real runs
are the lead's timed measurement; this checks the page's arithmetic."""

from __future__ import annotations

import json

from benchmarks.fleet.routing import picks_since, requests_of
from benchmarks.fleet.routing_page import render, spread

from adaserve.loadgen.records import Record, write_jsonl


def _rows(tpot: float, e2e: float) -> list[dict]:
    def row(cls):
        return {"slo_class": cls, "sent": 4, "ok": 4, "attainment": tpot, "attainment_ttft": e2e,
                "goodput_tok_s": 10 * tpot, "ttft_ms": {"p50": 300.0, "p99": 900.0},
                "tpot_ms": {"p50": 90.0, "p99": 200.0}}
    return [row("urgent"), row("overall")]


def _request(i: int, margin: float, e2e: bool) -> dict:
    return {"i": i, "class": "urgent", "status": "ok", "ttft_ms": 400.0, "tpot_ms": 100.0,
            "attained": e2e, "e2e": e2e, "picked": True, "replica": i % 2, "retried": False,
            "predicted": {"demand": 1.0, "tpot_ms": 80.0, "ttft_ms": 200.0, "margin": margin}}


def _data() -> dict:
    made = {"command": "python -m benchmarks.fleet.routing --rates 0.2 0.5", "machine": "m",
            "date": "2026-11-25T18:00+00:00", "commit": "abc1234"}
    runs = []
    for rnd, (rr, pk) in enumerate([(0.5, 0.6), (0.7, 0.9)]):
        for rate in (0.2, 0.5):
            runs.append({"routing": "round robin", "rate": rate, "round": rnd,
                         "rows": _rows(rr, rr - 0.1), "wall_s": 30.0, "requests": []})
            runs.append({"routing": "picker", "rate": rate, "round": rnd,
                         "rows": _rows(pk, pk - 0.2), "wall_s": 30.0,
                         "requests": [_request(0, 1.5, True), _request(1, 0.5, False)]})
    return {**made, "pieces": [made],
            "settings": {"replica_args": ["--budget", "6"], "baseline_ms": 80.0,
                         "requests": 4, "tokens": 8, "seed": 0, "prompts": "short",
                         "replicas": 2}, "runs": runs}


def test_spread_is_the_median_with_its_range():
    assert spread([0.5, 0.7, 0.6], 100) == "60.0 [50.0-70.0]"
    assert spread([0.5], 100) == "50.0" and spread([None]) == "-"


def test_the_page_gives_both_readings_the_goal_and_the_predictions():
    page = render(_data())
    # the medians over the two rounds: picker 75% against round robin 60% (TPOT), +15 points
    assert "TPOT: picker 75.0% against round robin 60.0% (medians over rounds, all classes): " \
           "+15.0 points, met" in page
    assert "end to end: picker 55.0% against round robin 50.0%" in page
    assert "| picker | urgent | 75.0 [60.0-90.0] | 55.0 [40.0-70.0] | 300 | 900 |" in page
    # one request predicted to attain (and attained), one predicted to miss (and missed),
    # each round: 2/2 and 0/2 pooled; one named to each replica a round
    assert "| 0.5 | urgent | 4 | 4 | 2 / 2 | 2/2 | 0/2 | 200 / 400 | 80 / 100 |" in page
    assert page.count("## Each run") == 1


def test_picks_join_the_clients_records_by_request_id(tmp_path):
    log = tmp_path / "picks.jsonl"
    old = json.dumps({"id": "loadgen-0", "replica": 0, "retried": False,
                      "predictions": [{"margin": 9.0}]}) + "\n"
    new = [{"id": f"loadgen-{i}", "replica": None if i == 1 else 1, "retried": False,
            "predictions": [{"margin": 0.5, "ttft_ms": 10.0}, {"margin": 2.0, "ttft_ms": 5.0}]}
           for i in (0, 1)]
    log.write_text(old + "".join(json.dumps(p) + "\n" for p in new))
    picks, offset = picks_since(log, len(old))  # an earlier run's line is skipped
    assert offset == log.stat().st_size and set(picks) == {"loadgen-0", "loadgen-1"}
    records = tmp_path / "records.jsonl"
    write_jsonl([Record(0, "urgent", 100.0, 0.0, 0.0, "ok", 0.2, 1.0, 1.0, 9),
                 Record(1, "urgent", 100.0, 0.1, 0.1, "ok", 0.3, 1.0, 1.0, 9)], records)
    got = requests_of(records, picks)
    assert got[0]["replica"] == 1 and got[0]["predicted"]["margin"] == 2.0
    assert got[0]["attained"] is True and got[0]["e2e"] is True  # TPOT 100 ms, TTFT 200 ms
    assert got[1]["replica"] is None and got[1]["predicted"] is None  # the router's choice

"""Simulated runs go through the load generator's records and report unchanged."""

from __future__ import annotations

import json

import pytest

from adaserve.loadgen.arrivals import poisson_times, schedule
from adaserve.loadgen.records import read_jsonl, summarize
from adaserve.loadgen.report import write_report
from adaserve.loadgen.workload import ClassMix, prompt_set
from adaserve.sim import (HardwareModel, SimSetup, build, from_arrivals, load_acceptance,
                          read_paper_trace, simulate, write_run)

TRACE = "/work/shared/paper-scale/traces/fig8_9_rps3.0_ol256.csv"


def _workload():
    arrivals = schedule(poisson_times(2.0, 24, seed=3), ClassMix.parse("urgent=0.6,relaxed=0.4"),
                        prompt_set("short", 8, seed=3, short_tokens=24), seed=3, mix_draw="exact")
    return from_arrivals(arrivals, {"urgent": 90.0, "relaxed": 700.0},
                         prompt_tokens=lambda p: 10 + len(p.messages[0][1]) // 4)


def test_records_round_trip_through_the_report(tmp_path):
    hw = HardwareModel.load("cpu-smollm2-135m")
    reqs = _workload()
    runs = []
    for policy in ("adaserve-authors", "incremental"):
        core, clock = build(SimSetup(hw, load_acceptance("synthetic-cpu-pair"), policy=policy,
                                     budget=4, max_batch=8), max_context=512, max_waiting=100)
        records = simulate(core, clock, reqs)
        assert [r.index for r in records] == list(range(len(reqs)))
        assert all(r.status == "ok" and r.output_tokens == 24 for r in records)
        name = f"{policy}-2.0-s3"
        summary = write_run(tmp_path / "raw" / name, records, 5000.0, {"policy": policy})
        back = read_jsonl(tmp_path / "raw" / name / "records.jsonl")
        assert [r.to_json() for r in back] == [r.to_json() for r in records]
        assert summarize(back, 5000.0) == summarize(records, 5000.0)
        runs.append({"policy": policy, "point": "2.0", "seed": 3, "dir": name,
                     "server": {"model": hw.target_model, "draft": hw.draft_model, "budget": 4,
                                "baseline_latency_ms": 90.0, "slo_classes": []},
                     "summary": json.loads(json.dumps(summary))})
    meta = {"experiment": "rate", "command": "tests/sim", "machine": "simulated",
            "date": "today", "wall_minutes": 0.0, "requests_per_point": len(reqs), "repeats": 1,
            "prompts": "short", "mix": "urgent=0.6,relaxed=0.4", "mix_draw": "exact"}
    write_report(tmp_path, meta, runs)
    page = (tmp_path / "summary.md").read_text()
    att = runs[0]["summary"]["rows"][-1]["attainment"]
    assert f"{100 * att:.1f}%" in page
    assert (tmp_path / "attainment_vs_rate.png").is_file()


def test_a_paper_trace_runs_and_keeps_its_classes():
    hw = HardwareModel.load("llama3.1-70b-a100-tp4")
    reqs = read_paper_trace(TRACE, hw.baseline_latency_ms, limit=40)
    assert {r.slo_class for r in reqs} == {"x1.2", "50ms", "150ms"}
    assert [r.slo_ms for r in reqs if r.slo_class == "x1.2"] == pytest.approx([36.0] * 26)
    core, clock = build(SimSetup(hw, load_acceptance("synthetic-cpu-pair")), max_context=4096,
                        max_waiting=100)
    records = simulate(core, clock, reqs)
    assert all(r.output_tokens == 256 for r in records)
    assert all(r.first_token_s >= r.sent_s for r in records)
    rows = summarize(records, 5000.0)
    assert rows[-1].sent == 40 and rows[-1].attainment is not None


def test_a_simulation_is_repeatable():
    hw = HardwareModel.load("cpu-smollm2-135m")
    reqs = _workload()[:10]

    def run():
        core, clock = build(SimSetup(hw, load_acceptance("synthetic-cpu-pair"), budget=4,
                                     max_batch=4), max_context=512, max_waiting=100)
        return [r.to_json() for r in simulate(core, clock, reqs, seed=7)]

    assert run() == run()

"""`adaserve loadgen --arrival paper`: a paper trace's rows as the requests the load
generator sends (times at a mean rate, prompt and output lengths, SLO milliseconds, class
names as the simulator's read_paper_trace gives them) and the request each becomes."""

from __future__ import annotations

import argparse

import pytest

from adaserve.loadgen.arrivals import Arrival, build_plan, paper_plan
from adaserve.loadgen.options import add_mix_draw_args, add_traffic_args
from adaserve.loadgen.workload import PromptSpec
from adaserve.sim.prompt_tokens import estimate

TRACE = ("emission_time_ms,input_length,output_length,slo_ratio\n"
         "1000,100,16,1.2\n1500,40,12,-50\n2000,300,20,2.4\n3000,12,8,-150.5\n5000,64,4,1\n")


def _opts(trace, *argv) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_traffic_args(p)
    add_mix_draw_args(p, "iid")
    return p.parse_args(["--arrival", "paper", "--trace", str(trace), *argv])


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def test_the_plan_is_the_traces_rows_at_the_rate(trace):
    plan = build_plan(_opts(trace, "--requests", "4", "--rate", "2", "--baseline-ms", "100"))
    # 4 rows over 2 s: a mean rate of 1.5/s, scaled to 2/s; the last row is not read
    assert [a.t for a in plan] == pytest.approx([0, 0.375, 0.75, 1.5])
    assert [a.slo_class for a in plan] == ["x1.2", "50ms", "x2.4", "150.5ms"]
    assert [a.slo_ms for a in plan] == pytest.approx([120, 50, 240, 150.5])
    assert [a.max_tokens for a in plan] == [16, 12, 20, 8]
    assert all(a.ignore_eos for a in plan)
    # prompts of input_length tokens by the words-to-tokens rule, the shortest at its floor
    assert [estimate(a.prompt) for a in plan] == [100, 40, 300, 32]


def test_own_times_the_servers_baseline_and_max_tokens(trace):
    plan = build_plan(_opts(trace, "--rate", "0", "--time-scale", "0.5", "--max-tokens", "3"),
                      baseline_ms=50.0)
    assert [a.t for a in plan] == pytest.approx([0, 0.25, 0.5, 1.0, 2.0])
    assert [a.slo_ms for a in plan] == pytest.approx([60, 50, 120, 150.5, 50])
    assert {a.max_tokens for a in plan} == {3}
    with pytest.raises(ValueError, match="baseline"):
        paper_plan(trace, 5, 1.0, None)


def test_bad_traces_are_refused(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("emission_time_ms,input_length,output_length\n0,1,1\n")
    with pytest.raises(ValueError, match="columns"):
        paper_plan(bad, 5, 1.0, 100.0)
    bad.write_text(TRACE.splitlines()[0] + "\n0,10,4,0\n")
    with pytest.raises(ValueError, match="row 2: slo_ratio must be non-zero"):
        paper_plan(bad, 5, 1.0, 100.0)


def test_the_request_carries_its_slo_and_lengths(trace):
    a = build_plan(_opts(trace, "--requests", "2", "--baseline-ms", "100"))[1]
    body, headers = a.request()
    assert headers == {"X-SLO-TPOT-MS": "50.0"}
    assert body["max_tokens"] == 12 and body["ignore_eos"] is True and body["stream"]
    assert body["messages"] == a.prompt.as_messages()
    # a generated arrival names its class and stops at EOS as before
    plain = Arrival(0, 0.0, "urgent", PromptSpec("short", (("user", "hi"),), 8), 8)
    body, headers = plain.request()
    assert headers == {"X-SLO-Class": "urgent"} and "ignore_eos" not in body

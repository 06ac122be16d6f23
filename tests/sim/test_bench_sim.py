"""`adaserve bench --backend sim`: a sweep's runs on the simulator, written as a measured
sweep's; the workload is the one `adaserve loadgen` would send (gamma arrivals reach the
plan on both backends); paper traces, the same requests on both backends; extension; prompt
token counts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from adaserve.cli import build_parser
from adaserve.loadgen import bench
from adaserve.loadgen.arrivals import build_plan, gamma_times
from adaserve.loadgen.extend import ExtendError, load_prior
from adaserve.loadgen.paper_trace import trace_serve_args
from adaserve.loadgen.records import read_jsonl
from adaserve.loadgen.workload import prompt_set
from adaserve.sim.bench import SimBackend
from adaserve.sim.prompt_tokens import estimate, tokenizer_ids

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _args(out, *argv):
    return build_parser().parse_args(["bench", "--backend", "sim", "--prompt-tokens", "estimate",
                                      "--prompts", "short", "--out", str(out), *argv])


def test_a_rate_sweep_writes_the_result_pages(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("adaserve.loadgen.report.plots", lambda *a: [])
    args = _args(tmp_path, "--experiment", "rate", "--rates", "0.5,1.0", "--requests", "10",
                 "--policies", "adaserve,incremental", "--serve-args", "--budget 4")
    assert bench.main(args) == 0
    data = json.loads((tmp_path / "summary.json").read_text())
    assert (data["backend"], data["hardware"], data["acceptance"]) == (
        "sim", "cpu-smollm2-135m", "synthetic-cpu-pair")
    assert [(r["policy"], r["point"]) for r in data["runs"]] == [
        ("adaserve", "0.5"), ("adaserve", "1.0"), ("incremental", "0.5"), ("incremental", "1.0")]
    for run in data["runs"]:
        assert run["server"]["budget"] == 4 and run["server"]["backend"] == "sim"
        assert run["summary"]["rows"][-1]["sent"] == 10
        records = read_jsonl(tmp_path / "raw" / run["dir"] / "records.jsonl")
        assert len(records) == 10 and all(r.status == "ok" for r in records)
        assert all(r.output_tokens == 64 for r in records)  # the short set's max_tokens
    page = (tmp_path / "summary.md").read_text()
    assert "hardware model `cpu-smollm2-135m`" in page and "Poisson" in page
    assert "| 1.0 |" in page and "[bench] incremental-1.0-s0" in capsys.readouterr().out


def test_gamma_arrivals_reach_the_plan_on_both_backends(tmp_path, monkeypatch):
    args = _args(tmp_path, "--experiment", "rate", "--rates", "2.0", "--requests", "12",
                 "--arrival", "gamma", "--cv", "3", "--seed", "4", "--mix-exact")
    point = bench.points(args)[0]
    want = gamma_times(2.0, 3.0, 12, seed=4)
    # the simulator's workload
    server = SimBackend.from_args(args, ["adaserve-authors"]).start("adaserve-authors", 1.0)
    assert np.allclose([r.t for r in server.workload(point, 4)], want)
    # what the real backend hands `adaserve loadgen`, and the plan the loadgen builds from it
    cmds = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **kw: cmds.append(cmd))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "summary.json").write_text("{}")
    bench.run_point(args, argparse.Namespace(url="http://x"), point, 4, tmp_path / "p")
    loadgen = build_parser().parse_args(cmds[-1][3:])
    assert (loadgen.arrival, loadgen.cv) == ("gamma", 3.0)
    assert np.allclose([a.t for a in build_plan(loadgen)], want)


def test_a_paper_trace_at_each_rate(tmp_path, monkeypatch):
    monkeypatch.setattr("adaserve.loadgen.report.plots", lambda *a: [])
    trace = tmp_path / "trace.csv"
    trace.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                     "0,100,16,1.2\n500,40,12,-50\n1000,300,16,1.2\n1500,12,8,-150\n"
                     "2000,64,16,1.2\n")
    out = tmp_path / "out"
    args = _args(out, "--hardware", "llama3.1-70b-a100-tp4", "--trace", str(trace),
                 "--rates", "1,4", "--requests", "4", "--policies", "adaserve,vllm")
    assert bench.main(args) == 0
    data = json.loads((out / "summary.json").read_text())
    assert data["trace"] == str(trace) and data["prompt_tokens"] is None
    for run in data["runs"]:
        records = read_jsonl(out / "raw" / run["dir"] / "records.jsonl")
        assert [r.prompt_tokens for r in records] == [100, 40, 300, 12]
        assert [r.slo_class for r in records] == ["x1.2", "50ms", "x1.2", "150ms"]
        gap = 1 / float(run["point"])
        assert [r.scheduled_s for r in records] == pytest.approx([0, gap, 2 * gap, 3 * gap])
    assert "the paper trace" in (out / "summary.md").read_text()


def test_a_paper_trace_is_the_same_requests_on_both_backends(tmp_path, monkeypatch):
    trace = tmp_path / "trace.csv"
    trace.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                     "0,100,16,1.2\n500,40,12,-50\n1000,300,16,2.4\n2500,64,8,-150\n")
    args = _args(tmp_path, "--trace", str(trace), "--rates", "3", "--requests", "4",
                 "--mix-exact")
    point = bench.points(args)[0]
    server = SimBackend.from_args(args, ["adaserve-authors"]).start("adaserve-authors", 1.0)
    sim = server.workload(point, 0)
    # what the real backend hands `adaserve loadgen`, and the plan the loadgen builds from it
    cmds = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **kw: cmds.append(cmd))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "summary.json").write_text("{}")
    bench.run_point(args, argparse.Namespace(url="http://x", info=server.info), point, 0,
                    tmp_path / "p")
    plan = build_plan(build_parser().parse_args(cmds[-1][3:]))
    assert [a.t for a in plan] == pytest.approx([r.t for r in sim])
    assert [a.slo_class for a in plan] == [r.slo_class for r in sim] == [
        "x1.2", "50ms", "x2.4", "150ms"]
    assert [a.slo_ms for a in plan] == pytest.approx([r.slo_ms for r in sim])
    assert [a.max_tokens for a in plan] == [r.output_tokens for r in sim]
    assert [estimate(a.prompt) for a in plan] == [r.prompt_tokens for r in sim]


def test_the_servers_get_a_context_that_fits_the_trace(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                     "0,100,16,1.2\n500,1500,200,-50\n1000,3000,16,2.4\n")
    serve = ["--backend", "serve", "--trace", str(trace)]
    # 1.1 x 1500 + 32 + 200 = 1882 -> 1920; the third row is past --requests
    assert trace_serve_args("", trace, 2).split()[-2:] == ["--max-context", "1920"]
    assert trace_serve_args("", trace, 1) == ""  # fits 1024
    assert trace_serve_args("--max-context 4096", trace, 2) == "--max-context 4096"
    argv = [*serve, "--requests", "2", "--serve-args", "--budget 4 --max-context 1024"]
    assert bench.main(_args(tmp_path / "out", *argv)) == 2
    assert "sets --max-context 1024" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,message", [
    (["--trace", "t.csv", "--experiment", "urgent"], "only --experiment rate"),
    (["--serve-args", "--model x"], "the simulator takes no --model"),
    (["--policies", "adaserve,nope"], "policy 'nope'"),
    (["--acceptance", "REC"], "a replay recording is keyed on the prompts' token ids"),
])
def test_refused_before_anything_runs(tmp_path, capsys, argv, message):
    if "REC" in argv:  # any recording will do: what is refused is the estimated prompts
        from adaserve.sim.replay import Recording

        rec = Recording({}, [(1, 2)], [np.array([1, 2, 3, 4])], [np.zeros((2, 1), np.int64)],
                        [np.zeros((2, 1), np.float32)])
        rec.save(tmp_path / "rec.npz")
        argv = [str(tmp_path / "rec.npz") if a == "REC" else a for a in argv]
    assert bench.main(_args(tmp_path / "out", *argv)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_simulated_sweep_extends_only_with_the_same_models(tmp_path, monkeypatch):
    monkeypatch.setattr("adaserve.loadgen.report.plots", lambda *a: [])
    base = ["--experiment", "rate", "--rates", "1.0", "--requests", "4", "--policies",
            "incremental"]
    bench.main(_args(tmp_path, *base))
    bench.main(_args(tmp_path, *base, "--repeats", "2", "--extend"))
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [r["seed"] for r in data["runs"]] == [0, 1] and len(data["extensions"]) == 1
    for flag, value, key in [("--hardware", "llama3.1-70b-a100-tp4", "hardware"),
                             ("--arrival", "gamma", "arrival"), ("--backend", "serve", "backend")]:
        with pytest.raises(ExtendError, match=key):
            load_prior(tmp_path, _args(tmp_path, *base, flag, value, "--extend",
                                       "--baseline-ms", str(data["runs"][0]["server"]
                                                            ["baseline_latency_ms"])))


def test_the_estimate_stays_near_the_tokenizer():
    ids = tokenizer_ids()
    for kind, rel in (("long", 0.06), ("short", 0.3)):
        prompts = prompt_set(kind, 40, seed=9)
        exact = np.array([len(ids(p)) for p in prompts])
        guess = np.array([estimate(p) for p in prompts])
        assert np.all(np.abs(guess / exact - 1) <= rel), kind


@pytest.mark.skipif(not (RESULTS / "rate" / "raw" / "adaserve-0.5-s0").is_dir(),
                    reason="needs the committed rate sweep")
def test_it_rebuilds_the_committed_sweeps_requests(tmp_path):
    """The sweep in results/rate, re-run on the simulator: every request has the class,
    SLO, send time and prompt tokens (counted by the tokenizer) the server recorded."""
    meta = json.loads((RESULTS / "rate" / "summary.json").read_text())
    baseline = meta["runs"][0]["server"]["baseline_latency_ms"]
    args = build_parser().parse_args([
        "bench", "--backend", "sim", "--experiment", "rate", "--rates", "0.5",
        "--requests", str(meta["requests_per_point"]), "--prompts", meta["prompts"],
        "--serve-args", meta["serve_args"], "--baseline-ms", str(baseline),
        f"--mix-{meta.get('mix_draw', 'iid')}",  # as the sweep assigned them
        "--out", str(tmp_path)])
    server = SimBackend.from_args(args, ["adaserve-authors"]).start("adaserve-authors", 1.0)
    reqs = server.workload(bench.points(args)[0], 0)
    measured = read_jsonl(RESULTS / "rate" / "raw" / "adaserve-0.5-s0" / "records.jsonl")
    assert [(r.slo_class, r.prompt_tokens) for r in reqs] == [
        (m.slo_class, m.prompt_tokens) for m in measured]
    assert [r.t for r in reqs] == pytest.approx([m.scheduled_s for m in measured])
    assert [r.slo_ms for r in reqs] == pytest.approx([m.slo_ms for m in measured])
    assert all(len(r.prompt_ids) == r.prompt_tokens for r in reqs)  # what replay keys on

"""`adaserve simulate`: parsing, a paper trace end to end into the load generator's files,
generated arrivals, and refusals that come before any run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaserve.cli import build_parser, main
from adaserve.loadgen.records import read_jsonl
from adaserve.loadgen.workload import ClassMix
from adaserve.sim.workload import at_rate, fixed_lengths, mean_rate, read_paper_trace

ROWS = [(0.0, 100, 24, 1.2), (150.5, 40, 16, -50.0), (420.0, 300, 20, 1.2),
        (600.0, 12, 24, -150.0), (610.0, 80, 16, 1.2), (990.0, 64, 20, 1.2)]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                    + "".join(f"{t},{i},{o},{s}\n" for t, i, o, s in ROWS))
    return path


def test_options_parse():
    args = build_parser().parse_args(["simulate", "--trace", "t.csv", "--policies", "a,b",
                                      "--seeds", "0,3", "--budget", "64", "--quiet"])
    assert (args.policies, args.seeds, args.budget, args.quiet) == ("a,b", "0,3", 64, True)
    # models and engine flags not given stay None: a --setup or the defaults fill them
    assert args.hardware is None and args.setup is None and args.rate is None
    assert args.max_batch is None and args.eos_hazard is None
    assert args.mix_draw == "exact" and args.arrival == "poisson"


def test_a_trace_runs_end_to_end(tmp_path, trace, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--trace", str(trace), "--hardware", "llama3.1-70b-a100-tp4",
               "--acceptance", "synthetic-cpu-pair", "--policies", "adaserve-authors,incremental",
               "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    for policy in ("adaserve-authors", "incremental"):
        assert f"## {policy} (seed 0): {len(ROWS)} requests" in printed
        records = read_jsonl(out / policy / "records.jsonl")
        assert len(records) == len(ROWS)
        assert [r.output_tokens for r in records] == [o for _, _, o, _ in ROWS]
        assert [r.prompt_tokens for r in records] == [i for _, i, _, _ in ROWS]
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["rows"][-1]["sent"] == len(ROWS)
        assert (summary["backend"], summary["policy"], summary["hardware"]) == (
            "sim", policy, "llama3.1-70b-a100-tp4")
        assert {r["slo_class"] for r in summary["rows"]} == {"x1.2", "50ms", "150ms", "overall"}
    assert "runs in" in printed


def test_generated_arrivals_with_several_seeds(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--rate", "4", "--requests", "6", "--arrival", "gamma", "--cv", "2",
               "--input-tokens", "50", "--output-tokens", "12", "--seeds", "0,1",
               "--policies", "incremental", "--out", str(out), "--quiet"])
    assert rc == 0
    for seed in (0, 1):
        records = read_jsonl(out / "incremental" / f"s{seed}" / "records.jsonl")
        assert len(records) == 6
        assert all(r.prompt_tokens == 50 and r.output_tokens == 12 for r in records)
    summary = json.loads((out / "incremental" / "s1" / "summary.json").read_text())
    assert "gamma (CV 2)" in summary["workload"] and summary["seed"] == 1


@pytest.mark.parametrize("argv,message", [
    ([], "give one workload"),
    (["--rate", "1", "--trace", "TRACE"], "give one workload"),
    (["--trace", "TRACE", "--policies", "adaserve,adaserv"], "policy 'adaserv'"),
    (["--rate", "1", "--mix", "urgent=1,other=1"], "no TPOT SLO given for the classes"),
    (["--trace", "TRACE", "--hardware", "no-such-gpu"], "no-such-gpu"),
])
def test_refusals_come_before_any_run(tmp_path, trace, capsys, argv, message):
    out = tmp_path / "out"
    argv = [str(trace) if a == "TRACE" else a for a in argv]
    assert main(["simulate", *argv, "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_fixed_lengths_assign_classes_like_the_load_generator():
    from adaserve.loadgen.arrivals import schedule
    from adaserve.loadgen.workload import prompt_set

    times = np.arange(10) * 0.5
    mix = ClassMix.parse("urgent=0.6,relaxed=0.4")
    reqs = fixed_lengths(times, mix, {"urgent": 30.0, "relaxed": 240.0}, 100, 8, seed=5)
    sent = schedule(times, mix, prompt_set("short", 10, 5), 5, mix_draw="exact")
    assert [r.slo_class for r in reqs] == [a.slo_class for a in sent]
    assert {(r.prompt_tokens, r.output_tokens) for r in reqs} == {(100, 8)}


def test_a_trace_retimed_to_a_rate(trace):
    reqs = read_paper_trace(trace, 30.0)
    assert mean_rate(reqs) == pytest.approx(5 / 0.99)
    fast = at_rate(reqs, 10.0)
    assert mean_rate(fast) == pytest.approx(10.0)
    assert [r.t for r in fast][:2] == pytest.approx([0.0, 0.1505 * 0.5 / 0.99])
    assert [r.slo_ms for r in fast] == [r.slo_ms for r in reqs]


def test_a_replay_recording_is_refused_for_want_of_prompts(tmp_path, trace, capsys):
    from adaserve.sim.replay import Recording

    rec = Recording({}, [(1, 2)], [np.array([1, 2, 3, 4])], [np.zeros((2, 1), np.int64)],
                    [np.zeros((2, 1), np.float32)])
    rec.save(tmp_path / "rec.npz")
    assert main(["simulate", "--trace", str(trace), "--acceptance",
                 str(tmp_path / "rec.npz"), "--quiet"]) == 2
    assert "adaserve bench --backend sim" in capsys.readouterr().err


def test_the_progress_bar_is_for_a_terminal_only(trace, monkeypatch):
    import io
    import sys

    from adaserve.sim.run import shows_progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert shows_progress(quiet=False) and not shows_progress(quiet=True)
    assert main(["simulate", "--trace", str(trace), "--policies", "incremental"]) == 0
    assert f"incremental s0:   0%|          | 0/{len(ROWS)}" in term.getvalue()  # a bar
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not shows_progress(quiet=False)


def test_tree_caps_and_eq8_depth_reach_the_engine(tmp_path, trace):
    """The figure pages' settings (tree caps, Eq. 8 depth as published) are CLI flags, so a
    page's point is one `adaserve simulate` command: its records are the library run's."""
    from adaserve.sim import SimSetup, load_acceptance
    from adaserve.sim.hardware import HardwareModel
    from adaserve.sim.run import run

    out = tmp_path / "out"
    flags = ["--max-depth", "2", "--max-width", "1", "--eq8-depth", "--max-batch", "4"]
    assert main(["simulate", "--trace", str(trace), "--hardware",
                 "llama3.1-70b-a100-tp4-draft", "--acceptance", "synthetic-llama3.1-70b-1b",
                 "--policies", "adaserve-authors", "--out", str(out), "--quiet", *flags]) == 0
    summary = json.loads((out / "adaserve-authors" / "summary.json").read_text())
    assert (summary["max_depth"], summary["max_width"], summary["cost_aware_depth"]) == (
        2, 1, False)
    hw = HardwareModel.load("llama3.1-70b-a100-tp4-draft")
    lib = run(SimSetup(hw, load_acceptance("synthetic-llama3.1-70b-1b"), "adaserve-authors", max_batch=4,
                       prefill_chunk=512, max_depth=2, max_width=1, cost_aware_depth=False),
              read_paper_trace(trace, hw.baseline_latency_ms))
    cli = read_jsonl(out / "adaserve-authors" / "records.jsonl")
    assert [r.last_token_s for r in cli] == [r.last_token_s for r in lib.records]
    # and the caps matter: the default caps (8, 16) time the same requests differently
    wide = run(SimSetup(hw, load_acceptance("synthetic-llama3.1-70b-1b"), "adaserve-authors", max_batch=4,
                        prefill_chunk=512, cost_aware_depth=False),
               read_paper_trace(trace, hw.baseline_latency_ms))
    assert [r.last_token_s for r in wide.records] != [r.last_token_s for r in lib.records]


def test_a_named_setup_runs_each_system_on_its_own_engine_and_outputs(tmp_path, trace):
    """`--setup` is the figure pages' library run: each system its deployment's settings and
    hardware, the outputs cut at EOS by the set-up's hazard; a flag beside it wins."""
    from adaserve.sim.hardware import HardwareModel
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment
    from adaserve.sim.workload import stop_at_eos

    out = tmp_path / "out"
    assert main(["simulate", "--setup", "paper-llama3.1-70b", "--trace", str(trace),
                 "--policies", "adaserve-authors,vllm", "--out", str(out), "--quiet"]) == 0
    deploy = Deployment.load("paper-llama3.1-70b")
    base = HardwareModel.load(deploy.hardware).baseline_latency_ms
    reqs = stop_at_eos(read_paper_trace(trace, base), deploy.eos_hazard, 0)
    for system in ("adaserve-authors", "vllm"):
        lib = run(deploy.setup(system), reqs)
        cli = read_jsonl(out / system / "records.jsonl")
        assert [r.last_token_s for r in cli] == [r.last_token_s for r in lib.records]
        assert [r.output_tokens for r in cli] == [r.output_tokens for r in reqs]
        summary = json.loads((out / system / "summary.json").read_text())
        assert summary["setup"] == "paper-llama3.1-70b"
        assert summary["hardware"] == deploy.hardware_of(system)
    assert json.loads((out / "adaserve-authors" / "summary.json").read_text())["budget"] == 256
    assert main(["simulate", "--setup", "paper-llama3.1-70b", "--trace", str(trace),
                 "--policies", "adaserve-authors", "--budget", "128", "--out", str(out / "b"),
                 "--quiet"]) == 0
    assert json.loads((out / "b" / "adaserve-authors" / "summary.json").read_text())["budget"] == 128
    assert main(["simulate", "--setup", "nope", "--trace", str(trace)]) == 2

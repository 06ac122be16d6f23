"""`adaserve bench --extend`: only the missing (policy, point, seed) runs are made, the
sweep is checkpointed after each run, a different experiment is refused, and an extension
assigns classes as the sweep did (exact, or i.i.d. for sweeps from before exact existed).

The server and the load generator are replaced here by stand-ins that record what they
were asked for: what is under test is the sweep's bookkeeping, not a measurement (the
measurements are tests/loadgen/test_locust_run.py's, against the real server)."""

from __future__ import annotations

import argparse
import json

import pytest

from adaserve.loadgen import bench
from adaserve.loadgen.extend import ExtendError, load_prior, ordered
from adaserve.loadgen.settle import Settled


class _Server:
    def __init__(self, baseline):
        self.info = {"model": "m", "draft": "d", "budget": 4, "baseline_latency_ms": baseline,
                     "slo_classes": [{"name": "urgent", "tpot_ms": baseline}]}
        self.stopped = False

    def stop(self):
        self.stopped = True


def _args(tmp_path, **kw):
    p = argparse.ArgumentParser()
    bench.add_args(p)
    argv = ["--experiment", "slo-scale", "--rate", "0.5", "--requests", "4",
            "--prompts", "short", "--baseline-ms", "90.0", "--out", str(tmp_path),
            "--policies", "adaserve,incremental"]
    # the warm-up run is its own test's (a default of 40 requests where asked with None);
    # elsewhere it would be one more server and run in every count
    kw.setdefault("warmup_requests", 0)
    for k, v in kw.items():
        if v is not None:
            argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return p.parse_args(argv)


@pytest.fixture(autouse=True)
def settled(monkeypatch):
    """No test here keeps the machine busy for a minute: settling is recorded, not run
    (loadgen/settle.py is tested in test_settle.py). The seconds of each one asked for."""
    asked = []
    monkeypatch.setattr("adaserve.loadgen.settle.settle",
                        lambda s: asked.append(s) or Settled(s, (1000.0, 1250.0)))
    return asked


@pytest.fixture
def warmups():
    """(server policy, point, seed, requests, server) of each warm-up run ``sweep`` served."""
    return []


@pytest.fixture
def sweep(monkeypatch, warmups):
    made, servers = [], []

    def start(policy, scale, extra, log, baseline):
        servers.append((policy, scale, log.name))
        return _Server(baseline)

    def run_point(args, server, point, seed, out, requests=None):
        if out.name == "warmup":  # the discarded warm-up run: recorded apart
            warmups.append((server_policy(), point.label, seed, requests, server))
            return {"rows": [{"slo_class": "overall", "attainment": 0.25}]}
        made.append((server_policy(), point.label, seed))
        att = 0.5 + 0.1 * seed
        return {"rows": [{"slo_class": "urgent", "attainment": att},
                         {"slo_class": "overall", "attainment": att, "goodput_tok_s": 1.0}]}

    server_policy = lambda: servers[-1][0]  # noqa: E731
    monkeypatch.setattr(bench, "start_server", start)
    monkeypatch.setattr(bench, "warm", lambda server: None)
    monkeypatch.setattr(bench, "run_point", run_point)
    monkeypatch.setattr("adaserve.loadgen.report.plots", lambda *a: [])
    return made, servers


def test_extend_runs_only_what_is_missing(tmp_path, sweep):
    made, servers = sweep
    bench.main(_args(tmp_path, scales="1.0,0.6"))
    assert len(made) == 4
    made.clear(), servers.clear()
    (tmp_path / "raw" / "serve-adaserve-1.0.log").write_text("first sweep's log")

    bench.main(_args(tmp_path, scales="1.0,0.8,0.6", repeats=2, extend=True))
    # 0.8 is new (two seeds), 1.0 and 0.6 only need seed 1
    assert sorted(made) == sorted([(p, s, 1) for p in ("adaserve", "incremental")
                                   for s in ("1.0", "0.6")]
                                  + [(p, "0.8", k) for p in ("adaserve", "incremental")
                                     for k in (0, 1)])
    assert ("adaserve", 1.0, "serve-adaserve-1.0~2.log") in servers  # first log kept
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["policy"], r["point"], r["seed"]) for r in data["runs"]][:6] == [
        ("adaserve", "1.0", 0), ("adaserve", "1.0", 1), ("adaserve", "0.8", 0),
        ("adaserve", "0.8", 1), ("adaserve", "0.6", 0), ("adaserve", "0.6", 1)]
    assert data["repeats"] == 2 and len(data["extensions"]) == 1
    assert data["extensions"][0]["date"] >= data["date"]
    md = (tmp_path / "summary.md").read_text()
    assert "extended by" in md and "| 0.8 | 55.0% (50.0%-60.0%) |" in md

    made.clear()
    bench.main(_args(tmp_path, scales="1.0,0.8,0.6", repeats=2, extend=True))
    assert made == []  # nothing left to run: no server started either


def test_a_stopped_sweep_resumes_from_its_checkpoint(tmp_path, sweep, monkeypatch):
    made, _ = sweep
    real = bench.run_point

    def dies_on_third(*a):
        if len(made) == 2:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(bench, "run_point", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        bench.main(_args(tmp_path, scales="1.0,0.6"))
    assert len(json.loads((tmp_path / "summary.json").read_text())["runs"]) == 2
    monkeypatch.setattr(bench, "run_point", real)
    made.clear()
    bench.main(_args(tmp_path, scales="1.0,0.6", extend=True))
    assert made == [("incremental", "1.0", 0), ("incremental", "0.6", 0)]


def test_a_different_experiment_is_refused(tmp_path, sweep):
    bench.main(_args(tmp_path, scales="1.0"))
    for kw, what in [({"requests": 8}, "requests_per_point"), ({"prompts": "long"}, "prompts"),
                     ({"serve_args": "--budget 8"}, "serve_args"), ({"rate": 1.0}, "rate"),
                     ({"baseline_ms": 95.0}, "baseline")]:
        with pytest.raises(ExtendError, match=what):
            load_prior(tmp_path, _args(tmp_path, scales="1.0", extend=True, **kw))
    with pytest.raises(ExtendError, match="does not exist"):
        load_prior(tmp_path / "nowhere", _args(tmp_path, extend=True))


def test_order_follows_the_command_then_the_earlier_sweep():
    runs = [{"policy": p, "point": pt, "seed": s} for p, pt, s in
            [("b", "0.6", 0), ("old", "1.0", 0), ("a", "0.6", 1), ("a", "1.0", 0),
             ("a", "0.6", 0)]]
    got = [(r["policy"], r["point"], r["seed"]) for r in ordered(runs, ["a", "b"], ["1.0", "0.6"])]
    assert got == [("a", "1.0", 0), ("a", "0.6", 0), ("a", "0.6", 1), ("b", "0.6", 0),
                   ("old", "1.0", 0)]


@pytest.fixture
def draws(sweep, monkeypatch):
    """The class assignment each run was asked for."""
    seen, inner = [], bench.run_point

    def run_point(args, server, point, seed, out, *rest):
        if out.name != "warmup":  # the warm-up draws as the sweep does; measured runs count
            seen.append(args.mix_draw)
        return inner(args, server, point, seed, out, *rest)

    monkeypatch.setattr(bench, "run_point", run_point)
    return seen


def test_a_sweep_assigns_classes_exactly_unless_told_and_says_which(tmp_path, draws):
    bench.main(_args(tmp_path / "new", scales="1.0"))
    assert draws == ["exact", "exact"]
    assert json.loads((tmp_path / "new" / "summary.json").read_text())["mix_draw"] == "exact"
    assert "exact class counts" in (tmp_path / "new" / "summary.md").read_text()
    draws.clear()
    bench.main(_args(tmp_path / "iid", scales="1.0", mix_iid=True))
    assert draws == ["iid", "iid"]
    assert "drawn i.i.d." in (tmp_path / "iid" / "summary.md").read_text()


def test_an_extension_keeps_the_sweeps_assignment(tmp_path, draws):
    bench.main(_args(tmp_path, scales="1.0", mix_iid=True))
    # a sweep from before exact assignment existed: no mix_draw in its summary
    path = tmp_path / "summary.json"
    old = json.loads(path.read_text())
    del old["mix_draw"]
    path.write_text(json.dumps(old))
    draws.clear()
    bench.main(_args(tmp_path, scales="1.0,0.6", extend=True))
    assert draws == ["iid", "iid"]  # the new point, both policies, drawn as the old ones were
    assert json.loads(path.read_text())["mix_draw"] == "iid"
    assert "drawn i.i.d." in (tmp_path / "summary.md").read_text()
    with pytest.raises(ExtendError, match="--mix-iid, this command asks --mix-exact"):
        load_prior(tmp_path, _args(tmp_path, scales="1.0", extend=True, mix_exact=True))
    load_prior(tmp_path, _args(tmp_path, scales="1.0", extend=True, mix_iid=True))  # agrees


def test_an_exact_sweep_is_not_extended_with_iid_draws(tmp_path, sweep):
    bench.main(_args(tmp_path, scales="1.0"))
    with pytest.raises(ExtendError, match="--mix-exact, this command asks --mix-iid"):
        load_prior(tmp_path, _args(tmp_path, scales="1.0", extend=True, mix_iid=True))


def test_run_point_hands_the_assignment_to_loadgen(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from adaserve.cli import build_parser

    cmds = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **kw: cmds.append(cmd))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "summary.json").write_text("{}")
    for flag, want in [("mix_exact", "exact"), ("mix_iid", "iid")]:
        args = _args(tmp_path, **{flag: True})
        bench.run_point(args, SimpleNamespace(url="http://x"), bench.Point("1.0", 0.5, -1.0, 1.0),
                       0, tmp_path / "p")
        assert build_parser().parse_args(cmds[-1][3:]).mix_draw == want


def test_interleave_starts_a_server_per_policy_and_seed_in_turn(tmp_path, sweep):
    made, servers = sweep
    bench.main(_args(tmp_path, scales="1.0", repeats=3, interleave=True))
    assert [s[0] for s in servers] == ["adaserve", "incremental", "incremental", "adaserve",
                                       "adaserve", "incremental"]
    assert made == [("adaserve", "1.0", 0), ("incremental", "1.0", 0),
                    ("incremental", "1.0", 1), ("adaserve", "1.0", 1),
                    ("adaserve", "1.0", 2), ("incremental", "1.0", 2)]


def test_rewrite_page_runs_nothing_and_writes_the_page_from_the_kept_runs(tmp_path, sweep):
    made, servers = sweep
    bench.main(_args(tmp_path, scales="1.0", repeats=2))
    n = len(made)
    (tmp_path / "summary.md").write_text("stale")
    assert bench.main(_args(tmp_path, rewrite_page=True)) == 0
    assert len(made) == n and len(servers) == 2  # no server, no run
    page = (tmp_path / "summary.md").read_text()
    assert page.startswith("# Experiment: slo-scale") and "60.0%" in page
    assert bench.main(_args(tmp_path / "nothing", rewrite_page=True)) == 2


def test_an_arm_runs_its_policy_with_its_flags_under_its_label(tmp_path, monkeypatch):
    started = []

    def start(policy, scale, extra, log, baseline):
        started.append((policy, extra, log.name))
        return _Server(baseline)

    monkeypatch.setattr(bench, "start_server", start)
    monkeypatch.setattr(bench, "warm", lambda server: None)
    monkeypatch.setattr(bench, "run_point", lambda args, server, point, seed, out: {
        "rows": [{"slo_class": "overall", "attainment": 0.5, "goodput_tok_s": 1.0}]})
    monkeypatch.setattr("adaserve.loadgen.report.plots", lambda *a: [])
    args = _args(tmp_path, scales="1.0", serve_args="--max-context 2048",
                 arm="adaserve-table=adaserve --context-table")
    assert bench.main(args) == 0
    (pol, extra, log), = [s for s in started if s[2].startswith("serve-adaserve-table")]
    assert pol == "adaserve" and extra.startswith("--max-context 2048 --context-table ")
    assert [s[1].startswith("--max-context 2048 --iteration-log") for s in started
            if not s[2].startswith("serve-adaserve-table")] == [True, True]
    data = json.loads((tmp_path / "summary.json").read_text())
    assert {r["policy"] for r in data["runs"]} == {"adaserve", "incremental", "adaserve-table"}
    assert data["arms"] == ["adaserve-table=adaserve --context-table"]
    md = (tmp_path / "summary.md").read_text()
    assert ("- arm `adaserve-table`: `adaserve serve --policy adaserve --context-table` "
            "(with every server's `--max-context 2048`)") in md
    # an arm is a server flag: the simulator starts none
    assert bench.main(_args(tmp_path / "sim", scales="1.0", backend="sim",
                            arm="adaserve-table=adaserve --context-table")) == 2


def test_a_sweep_settles_the_machine_once_before_its_first_server_and_says_so(
        tmp_path, sweep, settled):
    made, servers = sweep
    bench.main(_args(tmp_path, scales="1.0", settle_s=30))
    assert settled == [30.0] and len(servers) == 2
    note = json.loads((tmp_path / "summary.json").read_text())["notes"]
    assert len(note) == 1 and "30 s of a fixed fp32 matmul" in note[0] and "1.25x" in note[0]
    assert f"- note: {note[0]}" in (tmp_path / "summary.md").read_text()
    # an extension with runs to make settles again and keeps the sweep's note first
    bench.main(_args(tmp_path, scales="1.0", repeats=2, extend=True))
    assert settled == [30.0, 60.0]
    assert len(json.loads((tmp_path / "summary.json").read_text())["notes"]) == 2
    # nothing left to run, none asked for, or simulated: no settling
    # (each sweep runs to its end: none of them stops before the settling would come)
    assert bench.main(_args(tmp_path, scales="1.0", repeats=2, extend=True)) == 0
    assert bench.main(_args(tmp_path / "none", scales="1.0", settle_s=0)) == 0
    assert bench.main(_args(tmp_path / "sim", scales="1.0", backend="sim")) == 0
    assert settled == [30.0, 60.0]
    assert json.loads((tmp_path / "none" / "summary.json").read_text())["notes"] == []


def test_a_warm_up_run_is_served_and_discarded_before_the_first_measured_server(tmp_path,
                                                                                 sweep,
                                                                                 warmups):
    made, servers = sweep
    bench.main(_args(tmp_path, scales="1.0,0.6", seed=7, warmup_requests=None))
    # its own `incremental` server first, the first point, a seed outside the sweep's
    assert servers[0] == ("incremental", 1.0, "warmup.log")
    [(policy, point, seed, requests, server)] = warmups
    assert (policy, point, seed, requests) == ("incremental", "1.0", 100_007, 40)
    assert server.stopped
    data = json.loads((tmp_path / "summary.json").read_text())
    assert len(made) == len(data["runs"]) == 4 and all(r["seed"] == 7 for r in data["runs"])
    assert any("warm-up run" in n and "attainment 0.25" in n for n in data["notes"])

    warmups.clear(), servers.clear()
    bench.main(_args(tmp_path / "b", scales="1.0", warmup_requests=0))
    assert warmups == [] and all(name != "warmup.log" for _, _, name in servers)
    warmups.clear()
    bench.main(_args(tmp_path, scales="1.0,0.6", seed=7, extend=True, warmup_requests=None))
    assert warmups == []  # nothing left to run: no warm-up either

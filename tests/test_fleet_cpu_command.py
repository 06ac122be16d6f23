"""`adaserve sglang fleet-cpu` builds its parts' commands without starting them: the part
that runs in the main environment, where sglang is not installed. The fleet itself is
tested end to end in tests/sglang_tier/test_fleet_cpu.py."""

from __future__ import annotations

import json
import sys

from adaserve.cli import build_parser, main
from adaserve.sglang.cpu.fleet import front_command, replica_command, replica_ports, router_command


def parse(*argv: str):
    return build_parser().parse_args(["sglang", "fleet-cpu", *argv])


def test_replicas_are_serve_cpu_with_the_flags_after_the_dashes():
    args = parse("--replicas", "3", "--port", "31000", "--", "--budget", "6",
                 "--draft", "/some/draft")
    assert replica_ports(args) == [31001, 31002, 31003]
    argv = replica_command(args, 31002)
    assert argv[:6] == [sys.executable, "-m", "adaserve.cli", "sglang", "serve-cpu", "--budget"]
    # serve-cpu's own defaults (its draft included) unless the fleet was given others
    assert argv[argv.index("--draft") + 1] == "/some/draft"
    assert "--enable-metrics" in argv  # Prometheus scrapes every replica
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "31002"]
    assert "--draft" not in replica_command(parse(), 30001)


def test_the_router_gets_the_replicas_policy_and_health_checks():
    args = parse("--policy", "power_of_two", "--health-check-interval", "3",
                 "--router-args", "--retry-max-retries 2")
    argv = router_command(args, ["http://127.0.0.1:1", "http://127.0.0.1:2"], 4000, 4001)
    assert argv[1:3] == ["-m", "sglang_router.launch_router"]
    at = argv.index("--worker-urls")
    assert argv[at + 1:at + 3] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    flags = dict(zip(argv, argv[1:]))
    assert flags["--policy"] == "power_of_two" and flags["--port"] == "4000"
    assert flags["--prometheus-port"] == "4001" and flags["--host"] == "127.0.0.1"
    assert flags["--health-check-interval-secs"] == "3"
    assert flags["--health-check-endpoint"] == "/model_info"
    assert argv[-2:] == ["--retry-max-retries", "2"]


def test_the_picker_policy_starts_the_target_router_and_a_picking_front():
    """--policy picker: the router through adaserve.sglang.target_router (sglang-router's
    consistent_hashing, the 0.3.2 policy that reads X-SMG-Target-Worker; its CLI parser
    needs one of its own choices, which the launcher overrides), and the front with
    --pick and the replicas' URLs; any other policy: neither."""
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    args = parse("--policy", "picker", "--front-args", "--picker-capacity 6")
    argv = router_command(args, urls, 4000, 4001)
    assert argv[1:3] == ["-m", "adaserve.sglang.target_router"]
    front = front_command(args, "http://127.0.0.1:4000", urls, 3999)
    assert front[front.index("--pick") + 1:][:2] == urls
    assert front[-2:] == ["--picker-capacity", "6"]
    assert "--pick" not in front_command(parse(), "http://r", urls, 3999)


def test_free_ports_on_request():
    ports = replica_ports(parse("--replicas", "2", "--replica-port", "0"))
    assert len(set(ports)) == 2 and all(p > 0 for p in ports)


def test_without_a_baseline_it_takes_the_saved_one_and_says_so(capsys, monkeypatch, tmp_path):
    """Run bare, the replicas need a baseline (their default classes are multiples of it;
    the picker weighs in it): the fleet takes the one saved for the model and threads and
    says so in one line (measuring one, when none is saved, needs SGLang: the SGLang
    tier's fleets give theirs)."""
    from adaserve.sglang.cpu import baseline
    from adaserve.sglang.cpu.fleet import needs_baseline, with_baseline

    for name in ("ADASERVE_BASELINE_MS", "ADASERVE_SLO_CLASSES"):
        monkeypatch.delenv(name, raising=False)
    assert needs_baseline(parse())
    assert not needs_baseline(parse("--", "--baseline-ms", "80"))
    assert not needs_baseline(parse("--", "--slo-classes", "urgent=60,best-effort"))
    assert needs_baseline(parse("--", "--slo-classes", "urgent=x1"))
    assert needs_baseline(parse("--policy", "picker", "--", "--slo-classes", "urgent=60"))
    monkeypatch.setenv("ADASERVE_CACHE_DIR", str(tmp_path))
    baseline.save(baseline.saved_path(), "default threads=1", 81.25)
    args = parse("--replicas", "2", "--", "--budget", "6")
    with_baseline(args, {"OMP_NUM_THREADS": "1"}, tmp_path)
    assert args.replica_args == ["--budget", "6", "--baseline-ms", "81.250"]
    line = json.loads(capsys.readouterr().out.strip())
    assert line == {"fleet": "baseline", "ms": 81.25, "from": str(tmp_path / baseline.FILE)}
    assert not needs_baseline(args)
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "80")
    assert not needs_baseline(parse())


def test_without_sglang_it_says_where_to_run_it(capsys):
    assert main(["sglang", "fleet-cpu", "--replicas", "2", "--", "--baseline-ms", "80"]) == 2
    assert "not installed in this Python" in capsys.readouterr().err
    assert main(["sglang", "fleet-cpu", "--replicas", "0"]) == 2
    assert "--replicas must be >= 1" in capsys.readouterr().err


def test_each_replica_gets_its_share_of_the_cores(monkeypatch):
    from adaserve.sglang.cpu.fleet import replica_env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert replica_env(parse("--replicas", "2"), cores=2)["OMP_NUM_THREADS"] == "1"
    assert replica_env(parse("--replicas", "2"), cores=8)["OMP_NUM_THREADS"] == "4"
    assert replica_env(parse("--replicas", "3"), cores=2)["OMP_NUM_THREADS"] == "1"  # >= 1
    assert replica_env(parse("--replicas", "2", "--threads-per-replica", "3"),
                       cores=2)["OMP_NUM_THREADS"] == "3"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting is kept
    assert replica_env(parse("--replicas", "2"), cores=8)["OMP_NUM_THREADS"] == "2"

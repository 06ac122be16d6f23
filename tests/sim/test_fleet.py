"""The simulated fleet (issue 28): one replica is exactly `simulate`, the routers' choices
on hand-made loads, the router's knowledge of finishes, rate scaling, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaserve.cli import main
from adaserve.loadgen.records import read_jsonl
from adaserve.sim import SimRequest, SimSetup, build, simulate
from adaserve.sim.fleet import simulate_fleet
from adaserve.sim.routers import ReplicaLoad, make_router, slo_weight
from adaserve.sim.scale import scale_rate, span_s

from sim_models import ChainAcceptance, linear_hardware


def setup() -> SimSetup:
    return SimSetup(linear_hardware(), ChainAcceptance(2), policy="adaserve-authors", max_batch=4,
                    prefill_chunk=64)


def burst(n: int, gap_s: float = 0.0, slo_ms: float | None = 30.0) -> list[SimRequest]:
    return [SimRequest(i, i * gap_s, "c", slo_ms, 16, 12) for i in range(n)]


def test_one_replica_is_exactly_simulate():
    reqs = [SimRequest(i, 0.013 * i, "c" if i % 3 else "u", 30.0 if i % 3 else 12.0,
                       8 + i % 5, 6 + i % 7) for i in range(40)]
    core, clock = build(setup(), max_context=64, max_waiting=len(reqs))
    alone = simulate(core, clock, reqs, seed=3)
    fleet = simulate_fleet(setup(), reqs, 1, "round-robin", seed=3)
    assert [r.to_json() for r in fleet.records] == [r.to_json() for r in alone]
    assert set(fleet.replica_of.values()) == {0}


def test_round_robin_alternates_and_every_request_finishes():
    run = simulate_fleet(setup(), burst(10, 0.001), 2, "round-robin")
    assert [run.replica_of[i] for i in range(10)] == [0, 1] * 5
    assert all(r.status == "ok" and r.output_tokens == 12 for r in run.records)
    assert len(run.of_replica(0)) == len(run.of_replica(1)) == 5
    assert all(n > 0 for n in run.iterations)


def test_two_replicas_serve_a_burst_faster_than_one():
    one = simulate_fleet(setup(), burst(16), 1, "round-robin")
    two = simulate_fleet(setup(), burst(16), 2, "least-load")
    assert two.simulated_s < 0.75 * one.simulated_s


def test_the_router_learns_of_finishes_only_when_they_happen():
    """Requests far apart: each finds the fleet idle, so least-load always picks replica 0.
    All at once: none has finished, so least-load alternates."""
    apart = simulate_fleet(setup(), burst(6, gap_s=5.0), 3, "least-load")
    assert set(apart.replica_of.values()) == {0}
    together = simulate_fleet(setup(), burst(6), 3, "least-load")
    assert [together.replica_of[i] for i in range(6)] == [0, 1, 2, 0, 1, 2]


def test_routers_choose_on_hand_made_loads():
    loads = [ReplicaLoad(3, 3.0), ReplicaLoad(1, 2.5), ReplicaLoad(2, 0.5)]
    assert make_router("least-load", 3).choose(1.0, loads) == 1
    assert make_router("slo-aware", 3).choose(1.0, loads) == 2  # fewest tight requests
    rr = make_router("round-robin", 3)
    assert [rr.choose(1.0, loads) for _ in range(4)] == [0, 1, 2, 0]
    # power of two: the lighter of the two it draws, never the heaviest here
    p2 = make_router("power-of-two", 3, seed=1)
    assert {p2.choose(1.0, loads) for _ in range(50)} <= {1, 2}
    split = make_router("class-split", 4)
    even = [ReplicaLoad(0, 0.0)] * 4
    assert split.choose(1.2, even) in (0, 1) and split.choose(0.2, even) in (2, 3)


def test_slo_spill_fills_to_its_cap_then_overflows_onto_the_busiest():
    spill = make_router("slo-spill:4", 3)
    assert spill.cap == 4.0
    assert spill.choose(1.0, [ReplicaLoad(2, 2.0), ReplicaLoad(3, 2.9), ReplicaLoad(0, 0.0)]) == 2
    full = [ReplicaLoad(4, 3.5), ReplicaLoad(9, 8.0), ReplicaLoad(4, 3.9)]
    assert spill.choose(1.0, full) == 1  # no replica stays within 4: the overflow one
    assert make_router("slo-spill", 2).cap == 25.0


def test_class_affinity_keeps_a_class_on_its_set_until_the_set_runs_heavier():
    aff = make_router("class-affinity:2", 4)  # tight: replicas 0, 1; the rest: 2, 3
    assert aff.slack == 2.0
    # tight set's lightest (1) has 5 in flight, the other set's lightest (3) 3: 2 more is
    # within the slack, so the tight request stays; 3 more crosses
    assert aff.choose(1.0, [ReplicaLoad(7, 0), ReplicaLoad(5, 0), ReplicaLoad(4, 0),
                            ReplicaLoad(3, 0)]) == 1
    assert aff.choose(1.0, [ReplicaLoad(7, 0), ReplicaLoad(6, 0), ReplicaLoad(4, 0),
                            ReplicaLoad(3, 0)]) == 3
    # a relaxed request the other way round
    assert aff.choose(0.2, [ReplicaLoad(0, 0), ReplicaLoad(1, 0), ReplicaLoad(2, 0),
                            ReplicaLoad(3, 0)]) == 2
    assert aff.choose(0.2, [ReplicaLoad(0, 0), ReplicaLoad(1, 0), ReplicaLoad(3, 0),
                            ReplicaLoad(5, 0)]) == 0
    assert make_router("class-affinity", 1).choose(0.2, [ReplicaLoad(9, 0)]) == 0
    assert make_router("class-affinity", 2).slack == 4


def test_slo_weight_is_tokens_per_baseline_iteration():
    assert slo_weight(30.0, 30.0) == 1.0 and slo_weight(150.0, 30.0) == 0.2
    assert 0 < slo_weight(None, 30.0) < slo_weight(150.0, 30.0)


@pytest.mark.parametrize("spec", ["nope", "least-load:3", "slo-spill:x", "slo-spill:-1",
                                  "class-affinity:-1", "class-split:2"])
def test_bad_router_names_are_refused(spec):
    with pytest.raises(ValueError):
        make_router(spec, 2)


def test_a_scaled_trace_keeps_its_span_and_multiplies_its_rate():
    reqs = [SimRequest(i, t, "c", 30.0, 8, 8) for i, t in enumerate([0.0, 1.0, 2.5, 9.0])]
    x3 = scale_rate(reqs, 3)
    assert len(x3) == 12 and sorted(r.index for r in x3) == list(range(12))
    span = span_s(reqs)
    assert span == pytest.approx(9.0 + 3.0)
    times = np.array([r.t for r in x3])
    assert times.min() == 0.0 and times.max() < span
    assert np.allclose(times[:4], [0.0, 1 / 3, 2.5 / 3, 3.0])  # copy 0: every gap / 3
    assert np.allclose(times[4:8], (np.array([0.0, 1.0, 2.5, 9.0]) + span) / 3)
    assert scale_rate(reqs, 1) == reqs
    with pytest.raises(ValueError):
        scale_rate(reqs, 0)


def test_simulate_runs_a_fleet_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--rate", "20", "--requests", "24", "--input-tokens", "32",
               "--output-tokens", "16", "--hardware", "llama3.1-70b-a100-tp4",
               "--acceptance", "synthetic-cpu-pair", "--policies", "adaserve-authors",
               "--replicas", "2", "--rate-scale", "2", "--router", "round-robin,slo-aware",
               "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    for router in ("round-robin", "slo-aware"):
        assert f"2 replicas, router {router} (seed 0): 48 requests" in printed
        records = read_jsonl(out / "adaserve-authors" / router / "records.jsonl")
        assert len(records) == 48 and all(r.status == "ok" for r in records)
        summary = json.loads((out / "adaserve-authors" / router / "summary.json").read_text())
        assert summary["replicas"] == 2 and summary["rate_scale"] == 2
        assert sorted(set(summary["replica_of"].values())) == [0, 1]
    assert "per replica: 0: 24 requests" in printed


def test_simulate_refuses_an_unknown_router(capsys):
    rc = main(["simulate", "--rate", "2", "--requests", "4", "--replicas", "2",
               "--router", "fastest", "--quiet"])
    assert rc == 2 and "unknown router 'fastest'" in capsys.readouterr().err


def test_the_picker_router_reads_reports_and_spreads_tight_requests():
    """The shared picker (adaserve/picker) as a simulated router: a burst of tight
    requests alternates replicas (each one sent is in the next one's report), every
    request finishes, and one replica behind it is exactly `simulate`."""
    run = simulate_fleet(setup(), burst(8, slo_ms=12.0), 2, "picker:4")
    assert sorted(run.replica_of[i] for i in range(8)) == [0] * 4 + [1] * 4
    assert all(r.status == "ok" and r.output_tokens == 12 for r in run.records)
    reqs = burst(6, 0.013)
    core, clock = build(setup(), max_context=64, max_waiting=len(reqs))
    alone = simulate(core, clock, reqs, seed=2)
    one = simulate_fleet(setup(), reqs, 1, "picker", seed=2)
    assert [r.to_json() for r in one.records] == [r.to_json() for r in alone]


def test_a_simulated_replica_reports_waiting_running_and_recent():
    """What the picker reads in the simulator is what a replica's /adaserve/load says:
    its requests by SLO, waiting (no first token by t) or decoding, and the medians of
    its recently finished ones."""
    from adaserve.loadgen.records import Record
    from adaserve.sim.fleet import _Replica

    rep = _Replica(None, None)
    reqs = {i: SimRequest(i, 0.0, "u" if i < 2 else "r", 10.0 if i < 2 else 50.0, 8, 8)
            for i in range(4)}
    records = {str(i): Record(i, reqs[i].slo_class, reqs[i].slo_ms, 0.0, 0.0)
               for i in range(4)}
    records["0"].first_token_s = 0.5
    records["1"].first_token_s = 2.0  # after t: still waiting, as the router sees it
    done = Record(9, "u", 10.0, 0.0, 0.0, status="ok", first_token_s=0.2, last_token_s=0.9,
                  finished_s=0.9, output_tokens=8)
    rep.held, rep.finished = {0, 1, 2}, [done]
    r = rep.report(1.0, records, reqs)
    loads = {ld.slo_class: (ld.waiting, ld.running) for ld in r.loads}
    assert loads == {"u": (1, 1), "r": (1, 0)}
    assert r.recent_of("u").finished == 1 and r.recent_of("u").tpot_ms == pytest.approx(100.0)

"""The simulated fleet page (benchmarks/fleet/sim_page.py) on a fabricated grid: the rate
held at 90% is read on both attainment readings, so a replica whose TPOT attainment stays
above 90% past saturation (it defers what it cannot serve in time) still has a capacity,
the end-to-end one, and the goal is computed on it."""

import argparse

import pytest

from benchmarks.fleet.sim_page import crossing, render

RATES = ["3.0", "4.0", "5.0"]


def _run(tpot: float, e2e: float) -> dict:
    overall = {"attainment": tpot, "attainment_e2e": e2e, "goodput": 100.0,
               "ttft_p50_ms": 1000.0, "ttft_p99_ms": 2000.0}
    return {"classes": {"overall": overall, "urgent": dict(overall)}, "replicas": [tpot],
            "wall_s": 1.0, "drain": 1.0}


def test_the_capacity_is_read_on_both_readings():
    # TPOT never falls through 90%; end to end it does, between 4.0 and 5.0
    e2e_one, e2e_two = [99.0, 95.0, 85.0], [99.0, 96.0, 86.0]
    grid = {(1, "round-robin", x): _run(95.0, e) for x, e in zip(RATES, e2e_one)}
    grid |= {(2, "round-robin", x): _run(95.0, e) for x, e in zip(RATES, e2e_two)}
    grid |= {(2, "slo-aware", x): _run(95.0, e - 1) for x, e in zip(RATES, e2e_two)}
    args = argparse.Namespace(policy="adaserve", seeds="0", overloads="1.2")
    tunings = {r: (1.0, [(1.0, 90.0)]) for r in ("slo-spill", "class-affinity", "picker")}
    page, data = render(args, [1, 2], RATES, ["round-robin", "slo-aware"], [], RATES[-1:],
                        grid, tunings, 1.0)
    one = crossing([3.0, 4.0, 5.0], e2e_one)
    two = crossing([3.0, 4.0, 5.0], e2e_two)
    assert one == pytest.approx(4.5) and two == pytest.approx(4.6)
    assert data["one_replica_90"] == {"TPOT": None, "end to end": one}
    assert data["capacity_90"]["TPOT/2/round-robin"] is None
    assert data["capacity_90"]["end to end/2/round-robin"] == pytest.approx(two)
    assert "- N = 2, TPOT: no 90% crossing in the rates run for one replica" in page
    assert (f"- N = 2, end to end, best router round-robin: {2 * two:.2f} req/s at 90% = "
            f"{two / one:.3f} x N x one replica's ({one:.2f}): met") in page
    assert f"| 2 | round-robin | - | - | - | {two:.2f} | {2 * two:.2f} | {two / one:.3f} |" \
        in page

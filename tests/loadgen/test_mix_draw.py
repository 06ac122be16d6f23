"""How requests get their SLO classes. The i.i.d. draw must stay exactly what it was: the
committed sweeps (results/*/summary.json record their commands) are re-run and extended
with the same seeds, and their classes must come out the same."""

from __future__ import annotations

import random

import numpy as np
import pytest

from adaserve.loadgen.arrivals import schedule
from adaserve.loadgen.workload import DEFAULT_MIX, ClassMix, prompt_set

# Drawn before exact assignment existed; equal to the classes in the committed records
# results/rate/raw/*-s{0,1,2} (30 requests), results/urgent/raw/*-0.2-s1 and
# results/slo-scale/raw/*-s0 (20 requests). u/m/r: urgent, moderate, relaxed.
OLD_DRAWS = [
    (-1.0, 30, 0, "rmuuuumuuuruummurrrrumrmuuumrr"),
    (-1.0, 30, 1, "urmuuummuurumuumurruuuruuuuuuu"),
    (-1.0, 30, 2, "rruurmmummuuuumrruuuuuuuuruuuu"),
    (0.2, 30, 1, "murmrrrrmmurrmrrmuummrummrmmrr"),
    (-1.0, 20, 0, "rmuuuumuuuruummurrrr"),
]


@pytest.mark.parametrize("urgent,n,seed,want", OLD_DRAWS)
def test_iid_draws_are_the_ones_the_committed_sweeps_made(urgent, n, seed, want):
    mix = ClassMix.parse(DEFAULT_MIX)
    if urgent >= 0:
        mix = mix.with_urgent(urgent)
    arrivals = schedule(np.arange(n, dtype=float), mix, prompt_set("short", 4), seed)
    assert "".join(a.slo_class[0] for a in arrivals) == want
    assert "".join(c[0] for c in mix.draw(n, random.Random(seed))) == want


@pytest.mark.parametrize("spec,urgent,n,want", [
    (DEFAULT_MIX, -1.0, 30, {"urgent": 18, "moderate": 6, "relaxed": 6}),
    (DEFAULT_MIX, 0.2, 30, {"urgent": 6, "moderate": 12, "relaxed": 12}),
    # 4.2, 1.4, 1.4: the one left over goes to the larger fraction, a tie to the first listed
    (DEFAULT_MIX, -1.0, 7, {"urgent": 4, "moderate": 2, "relaxed": 1}),
    ("a=1,b=1,c=1", -1.0, 10, {"a": 4, "b": 3, "c": 3}),
    ("urgent=1,relaxed=0", -1.0, 5, {"urgent": 5, "relaxed": 0}),
])
def test_exact_counts_round_by_largest_remainder(spec, urgent, n, want):
    mix = ClassMix.parse(spec)
    if urgent >= 0:
        mix = mix.with_urgent(urgent)
    assert mix.counts(n) == want


def test_exact_counts_are_within_one_of_the_share_for_any_size():
    mix = ClassMix.parse("urgent=0.55,moderate=0.3,relaxed=0.15")
    for n in range(0, 200):
        c = mix.counts(n)
        assert sum(c.values()) == n
        assert all(abs(c[k] - w * n) < 1 for k, w in mix.weights.items())


def test_exact_assignment_has_the_same_counts_for_every_seed_in_a_seeded_order():
    mix = ClassMix.parse(DEFAULT_MIX)
    times, prompts = np.arange(30, dtype=float), prompt_set("short", 4)
    orders = [[a.slo_class for a in schedule(times, mix, prompts, seed, mix_draw="exact")]
              for seed in range(5)]
    for order in orders:
        assert {k: order.count(k) for k in mix.weights} == {"urgent": 18, "moderate": 6,
                                                           "relaxed": 6}
    assert len({tuple(o) for o in orders}) == 5  # shuffled differently per seed
    assert orders[2] == [a.slo_class for a in schedule(times, mix, prompts, 2, mix_draw="exact")]
    # the i.i.d. draws of the same seeds: 14 to 20 urgent of 30 (OLD_DRAWS)
    with pytest.raises(ValueError, match="exact"):
        schedule(times, mix, prompts, 0, mix_draw="stratified")


def test_the_assignment_reaches_the_locust_process_as_asked():
    import argparse

    from adaserve.cli import build_parser
    from adaserve.loadgen.options import add_mix_draw_args, add_traffic_args, traffic_argv

    locust_side = argparse.ArgumentParser()  # declared as the Locust file declares them
    add_traffic_args(locust_side)
    add_mix_draw_args(locust_side, "iid")
    for flags, want in [([], "iid"), (["--mix-exact"], "exact"), (["--mix-iid"], "iid")]:
        args = build_parser().parse_args(["loadgen", *flags])
        assert args.mix_draw == want
        assert locust_side.parse_args(traffic_argv(args)).mix_draw == want
    with pytest.raises(SystemExit):  # the two flags exclude each other
        build_parser().parse_args(["loadgen", "--mix-exact", "--mix-iid"])

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

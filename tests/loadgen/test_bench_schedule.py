"""The order `adaserve bench` starts its servers in (loadgen/bench.py ``schedule``)."""

from __future__ import annotations

from adaserve.loadgen.bench import schedule


def test_policy_by_policy_runs_every_seed_on_one_server():
    assert schedule(["a", "b"], [0, 1, 2], interleave=False) == [("a", {0, 1, 2}),
                                                                 ("b", {0, 1, 2})]


def test_interleaved_runs_seed_by_seed_and_reverses_the_order_every_other_seed():
    got = schedule(["a", "b", "c"], [5, 6, 7], interleave=True)
    assert got == [("a", {5}), ("b", {5}), ("c", {5}), ("c", {6}), ("b", {6}), ("a", {6}),
                   ("a", {7}), ("b", {7}), ("c", {7})]
    # every (policy, seed) once, and each policy's mean position is the same: a linear
    # drift of the machine's speed over an even number of seeds falls on all alike
    assert sorted((p, s) for p, seeds in got for s in seeds) \
        == sorted((p, s) for p in "abc" for s in (5, 6, 7))
    pairs = schedule(["a", "b", "c"], [0, 1], interleave=True)
    position = {p: sum(i for i, (q, _) in enumerate(pairs) if q == p) for p in "abc"}
    assert len(set(position.values())) == 1

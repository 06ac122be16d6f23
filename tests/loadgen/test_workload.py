"""SLO class mixes and the prompt sets."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from adaserve.loadgen.workload import DEFAULT_MIX, ClassMix, prompt_set


def test_default_mix_is_the_papers_and_draws_in_proportion():
    mix = ClassMix.parse(DEFAULT_MIX)
    assert mix.weights == pytest.approx({"urgent": 0.6, "moderate": 0.2, "relaxed": 0.2})
    c = Counter(mix.draw(20000, random.Random(0)))
    assert c["urgent"] / 20000 == pytest.approx(0.6, abs=0.015)
    assert c["relaxed"] / 20000 == pytest.approx(0.2, abs=0.015)


def test_urgent_proportion_keeps_the_others_ratio():
    mix = ClassMix.parse("urgent=0.6,moderate=0.3,relaxed=0.1").with_urgent(0.2)
    assert mix.weights == pytest.approx({"urgent": 0.2, "moderate": 0.6, "relaxed": 0.2})
    assert ClassMix.parse("urgent=1,relaxed=0").with_urgent(1.0).weights["urgent"] == 1.0
    for bad in ("urgent", "urgent=x", "urgent=-1", "urgent=0"):
        with pytest.raises(ValueError):
            ClassMix.parse(bad)
    with pytest.raises(ValueError):
        ClassMix.parse(DEFAULT_MIX).with_urgent(1.5)


def test_prompt_sets_are_deterministic_and_shaped():
    short = prompt_set("short", 40, seed=1)
    assert short == prompt_set("short", 40, seed=1) and short != prompt_set("short", 40, seed=2)
    assert len({p.messages for p in short}) == 40
    long = prompt_set("long", 10, seed=1)
    for p in long:
        words = len(p.messages[-1][1].split())
        assert 250 <= words <= 480 and p.kind == "long"
    mixed = prompt_set("mixed", 9)
    assert [p.kind for p in mixed][:4] == ["short", "long", "short", "long"] and len(mixed) == 9
    with pytest.raises(ValueError):
        prompt_set("medium", 3)

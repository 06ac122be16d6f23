"""`adaserve bench --arm LABEL=POLICY [FLAGS]`: a policy with serve flags of its own under a
label of its own; a bad arm is refused before any server starts, saying why."""

from __future__ import annotations

import pytest

from adaserve.loadgen.arms import parse_arm, parse_arms


def test_an_arm_names_its_policy_and_flags():
    arm = parse_arm("adaserve-table=adaserve:gate=on --context-table --draft-window 256",
                    ["adaserve", "incremental"])
    assert (arm.label, arm.policy) == ("adaserve-table", "adaserve:gate=on")
    assert arm.flags == "--context-table --draft-window 256"
    assert parse_arm("chain4-w=chain-4 --draft-window 256", []).policy == "chain-4"


@pytest.mark.parametrize("text, says", [
    ("adaserve --context-table", "LABEL=POLICY"),
    ("t=", "LABEL=POLICY"),
    ("a/b=adaserve", "must be letters"),
    ("incremental=incremental --budget 4", "already one of --policies"),
    ("adaserve-x=nosuch", "unknown policy"),
    ("adaserve-x=adaserve --no-such-flag", "takes no --no-such-flag"),
    ("adaserve-x=adaserve --budget four", "invalid int value"),
    ("adaserve-x=adaserve --policy incremental", "not a flag"),
    ("adaserve-x=adaserve --pol=incremental", "not a flag"),
    ("table=adaserve --context-table", "is AdaServe: rename it"),
    ("adaserve-chain=chain-4", "is not AdaServe: rename it"),
])
def test_a_bad_arm_is_refused_saying_why(text, says):
    with pytest.raises(ValueError, match=says):
        parse_arm(text, ["incremental"])


def test_a_label_given_twice_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        parse_arms(["adaserve-t=adaserve --context-table", "adaserve-t=adaserve"], [])

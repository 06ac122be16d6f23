"""`adaserve bench --arm LABEL=SPEC [FLAGS]`: a policy served with `adaserve serve` flags of
its own, under a label of its own, beside the --policies in one sweep.

A served A/B of a server setting (the context table, a bounded draft KV) must run side by
side with the baselines, on the same arrivals and the same machine spell; --serve-args
applies to every server, so a setting that only one entry should have needs an entry of
its own. The label is what the page's tables show and what raw/ names; SPEC is any policy
spec --policies takes. An arm whose SPEC is AdaServe is read as AdaServe by the page's
goals (its label starts with "adaserve"), any other as a baseline.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass

from adaserve.loadgen.report import is_baseline
from adaserve.scheduler import policy_options

LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclass(frozen=True, slots=True)
class Arm:
    label: str
    policy: str  # the policy spec the server gets as --policy
    flags: str  # more `adaserve serve` flags, as a shell would split them


def parse_arm(text: str, policies: list[str]) -> Arm:
    """``LABEL=SPEC [FLAGS]`` -> Arm; ValueError saying what is wrong: a label that is not
    a file-name-safe word, that names a policy of --policies, or whose AdaServe-ness its
    name would misstate; an unknown policy; a flag `adaserve serve` does not take, or
    --policy itself (the spec gives it)."""
    label, sep, rest = text.partition("=")
    label, parts = label.strip(), shlex.split(rest)
    if not sep or not parts:
        raise ValueError(f"--arm {text!r}: write LABEL=POLICY [serve flags], for example "
                         "'adaserve-table=adaserve --context-table'")
    if not LABEL.fullmatch(label):
        raise ValueError(f"--arm {text!r}: the label {label!r} must be letters, digits and "
                         "_ . + - (it names the runs' files)")
    if label in policies:
        raise ValueError(f"--arm {text!r}: {label!r} is already one of --policies")
    policy, flags = parts[0], parts[1:]
    policy_options(policy)  # ValueError naming the policies for an unknown one
    if is_baseline(label) != is_baseline(policy):
        raise ValueError(f"--arm {text!r}: the page reads a label that starts with "
                         f"'adaserve' as AdaServe and any other as a baseline, and {policy!r} "
                         f"is {'not ' if is_baseline(policy) else ''}AdaServe: rename it")
    _check_flags(text, flags)
    return Arm(label, policy, shlex.join(flags))


def _check_flags(text: str, flags: list[str]) -> None:
    from adaserve.server.options import add_args as add_serve_args

    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_serve_args(p)
    try:
        given, unknown = p.parse_known_args(flags)
    except argparse.ArgumentError as e:
        raise ValueError(f"--arm {text!r}: {e}") from None
    if unknown:
        raise ValueError(f"--arm {text!r}: `adaserve serve` takes no {' '.join(unknown)}")
    # as the server parses it, so --policy=x and an abbreviation such as --pol are caught
    if given.policy is not None:
        raise ValueError(f"--arm {text!r}: the policy is the spec after '=', not a flag")


def parse_arms(texts: list[str], policies: list[str]) -> dict[str, Arm]:
    """Every --arm, by label; ValueError for a bad one or a label given twice."""
    arms: dict[str, Arm] = {}
    for text in texts:
        arm = parse_arm(text, policies)
        if arm.label in arms:
            raise ValueError(f"--arm: the label {arm.label!r} is given twice")
        arms[arm.label] = arm
    return arms

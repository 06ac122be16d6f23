"""How kept runs are keyed (benchmarks/shared/run_keys.py, benchmarks/fleet/runs.py): the code hash ignores
what cannot run (docstrings, comments, layout), a policy's or router's hash only what that
variant runs, and `rekey` moves a run to the current hash only when its re-runs measure
exactly what was kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.fleet import runs
from benchmarks.shared import run_keys as keys

SOURCE = '''"""A module."""
import math


class Pace:
    """Paces."""

    def cap(self, x):
        # how far ahead
        return math.floor(x * 0.7)
'''


def test_docstrings_comments_and_layout_do_not_change_the_key():
    reworded = (SOURCE.replace('"""Paces."""', '"""Paces requests; a longer docstring."""')
                .replace("# how far ahead", "# a different comment")
                .replace("return math.floor(x * 0.7)", "return math.floor( x*0.7 )"))
    assert keys.runnable(reworded) == keys.runnable(SOURCE)


@pytest.mark.parametrize("change", [("0.7", "0.8"), ("floor", "ceil"),
                                    ('"""Paces."""\n', '"""Paces."""\n    name = "p"\n')])
def test_a_change_that_runs_changes_the_key(change):
    assert keys.runnable(SOURCE.replace(*change)) != keys.runnable(SOURCE)


def test_a_string_that_is_not_a_docstring_counts():
    a = SOURCE.replace("return math.floor(x * 0.7)", 'return "a"')
    b = SOURCE.replace("return math.floor(x * 0.7)", 'return "b"')
    assert keys.runnable(a) != keys.runnable(b)


VARIANTS = SOURCE + '''

class Fast(Pace):
    def go(self):
        return 1


class Slow(Pace):
    def go(self):
        return 2


REGISTRY = {c.__name__: c for c in (Fast, Slow)}
'''


def test_a_variant_is_keyed_on_its_own_class_its_bases_and_the_modules_functions():
    fast = lambda src: keys.slice_sha(src, {"Fast", "Pace"})  # noqa: E731
    # another variant added, or changed, with its registry entry: Fast keeps its key
    added = VARIANTS + "\n\nclass Other(Pace):\n    pass\n"
    assert fast(added.replace("(Fast, Slow)", "(Fast, Slow, Other)")) == fast(VARIANTS)
    assert fast(VARIANTS.replace("return 2", "return 3")) == fast(VARIANTS)
    # its own class, a base class or a module constant changed: a new key
    assert fast(VARIANTS.replace("return 1", "return 0")) != fast(VARIANTS)
    assert fast(VARIANTS.replace("x * 0.7", "x * 0.6")) != fast(VARIANTS)
    assert fast(VARIANTS.replace("import math", "import math\nK = 3")) != fast(VARIANTS)


def test_the_shipped_policies_and_routers_have_keys_of_their_own():
    assert keys.policy_sha("adaserve-authors") != keys.policy_sha("adaserve-authors:pace=0.7")
    # a paper system is keyed on the policy it runs
    assert keys.policy_sha("sarathi") == keys.policy_sha("vllm") == keys.policy_sha("incremental")
    assert keys.router_sha("round-robin") != keys.router_sha("class-affinity:32")
    # the policies live in two modules of variants (adaserve_policy.py, baselines.py): each
    # is keyed on its own module's slice
    shas = {p: keys.policy_sha(p) for p in ("adaserve-text", "global-greedy", "turbospec",
                                             "incremental", "chain-4")}
    assert len(set(shas.values())) == len(shas)


KIT_TRACE = runs.KIT / "traces" / "fig8_9_rps3.0_ol256.csv"


@pytest.mark.skipif(not KIT_TRACE.is_file(), reason="no paper-scale kit")
def test_rekey_moves_only_runs_whose_re_runs_are_identical(tmp_path, monkeypatch):
    """Two older code versions: one whose re-runs measure what was kept (re-keyed), one
    whose re-runs differ (left stale); a run that differs in another input is not touched.
    The simulator is stood in for: what is tested is rekey's bookkeeping."""
    monkeypatch.setattr(runs, "RUNS", tmp_path)
    found = {"iterations": 10, "simulated_s": 1.5, "classes": {"overall": {"sent": 3}},
             "replicas": [{"sent": 3}], "requests": 3}

    def keep(n: int, router: str, code: str, **extra) -> Path:
        task = runs.FleetTask(runs.SETUPS["llama"], KIT_TRACE, n, router, "adaserve-authors", 0)
        inputs = {**task.inputs(), "code_sha": code, **extra}
        task.path.parent.mkdir(parents=True, exist_ok=True)
        task.path.write_text(json.dumps({"inputs": inputs, "trace": KIT_TRACE.name,
                                         "wall_s": float(n), **found}))
        return task.path

    same = [keep(1, "round-robin", "old-same"), keep(2, "least-load", "old-same"),
            keep(4, "least-load", "old-same")]
    # made before the set-up file changed (another policy's entry added): its own version
    setup = [keep(1, "least-load", "old-same", deployment_sha="old-setup"),
             keep(8, "least-load", "old-same", deployment_sha="old-setup")]
    moved = [keep(2, "round-robin", "old-moved"), keep(4, "round-robin", "old-moved")]
    # made before the policy's own module changed (its hash alone moved): its own version too
    policy = [keep(2, "slo-aware", "old-same", policy_sha="old-policy")]
    other = keep(8, "round-robin", "old-same", seed=7)  # another input differs: stale anyway
    rerun = []

    def measure(task):
        rerun.append((task.replicas, task.router))
        diff = task.router == "round-robin" and task.replicas == 4
        return {**found, "iterations": 11 if diff else 10}

    monkeypatch.setattr(runs, "measure", measure)
    lines = runs.rekey(check=2)
    code = lambda p: json.loads(p.read_text())["inputs"]["code_sha"]  # noqa: E731
    assert all(code(p) == runs.code_sha() for p in same)
    for p in setup + policy:  # every key moved to the task's
        assert json.loads(p.read_text())["inputs"] == runs._task_of(json.loads(p.read_text())).inputs()
    assert all(code(p) == "old-moved" for p in moved)
    assert code(other) == "old-same"
    # each version re-ran its cheapest run at its fewest and its most replicas, and its
    # two costliest (the first version's x2 least-load is one; the others had them already)
    assert sorted(rerun) == [(1, "least-load"), (1, "round-robin"), (2, "least-load"),
                             (2, "round-robin"), (2, "slo-aware"), (4, "least-load"),
                             (4, "round-robin"), (8, "least-load")]
    assert any("3 runs re-keyed" in line for line in lines)
    assert any("set-up old-setup," in line and "2 runs re-keyed" in line for line in lines)
    assert any("policy old-policy as " in line and "1 runs re-keyed" in line for line in lines)
    assert any("2 runs left stale" in line and "x4" in line for line in lines)

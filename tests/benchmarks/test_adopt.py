"""Kept runs adopted under another name (benchmarks/shared/adopt.py): only where the inputs,
the name aside, are the target's now, and only if the re-run sample measures what was kept."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks.shared.adopt import adopt

# what each name runs now: "old" and "new" run the same policy, "other" another
POLICY = {"old": "p1", "new": "p1", "other": "p2"}


@dataclass(frozen=True)
class FakeTask:
    root: Path
    policy: str
    seed: int

    def inputs(self) -> dict:
        return {"policy": self.policy, "policy_sha": POLICY[self.policy], "seed": self.seed}

    @property
    def path(self) -> Path:
        return self.root / f"{self.policy}-s{self.seed}.json"


def _keep(root: Path, policy: str, seed: int, sha: str, value: float) -> None:
    task = FakeTask(root, policy, seed)
    kept = {"inputs": {**task.inputs(), "policy_sha": sha}, "wall_s": seed, "value": value}
    task.path.write_text(json.dumps(kept))


def _run(root: Path, measured: float, source: str = "old", check: int = 1):
    def task_of(kept: dict) -> FakeTask:
        return FakeTask(root, kept["inputs"]["policy"], kept["inputs"]["seed"])

    fresh = []

    def measure(task: FakeTask) -> dict:
        fresh.append(task.path.name)
        return {"value": measured}

    lines = adopt(source, "new", root, "policy", task_of, measure,
                  lambda a, b: a["value"] == b["value"], check)
    return lines, fresh


def test_runs_of_the_same_policy_are_adopted_after_an_identical_sample(tmp_path):
    _keep(tmp_path, "old", 0, "p1", 50.0)
    _keep(tmp_path, "old", 1, "p1", 50.0)
    _keep(tmp_path, "old", 2, "stale", 50.0)  # ran a policy no name runs now
    lines, fresh = _run(tmp_path, 50.0)
    assert fresh == ["new-s0.json"]  # the cheapest, re-run under the target's name
    assert "2 runs adopted" in lines[0]
    for seed in (0, 1):
        kept = json.loads((tmp_path / f"new-s{seed}.json").read_text())
        assert kept["inputs"] == FakeTask(tmp_path, "new", seed).inputs()
        assert kept["value"] == 50.0
    assert not (tmp_path / "new-s2.json").exists()
    # a second call finds nothing left to adopt
    assert _run(tmp_path, 50.0)[0] == ["no run of old is one new lacks"]


def test_a_sample_that_measures_otherwise_adopts_nothing(tmp_path):
    _keep(tmp_path, "old", 0, "p1", 50.0)
    _keep(tmp_path, "old", 1, "p1", 50.0)
    lines, _ = _run(tmp_path, 49.0)
    assert "nothing adopted" in lines[0] and "new-s0.json" in lines[0]
    assert not list(tmp_path.glob("new-*.json"))


def test_runs_of_another_policy_are_never_adopted(tmp_path):
    _keep(tmp_path, "other", 0, "p2", 50.0)
    lines, fresh = _run(tmp_path, 50.0, source="other")
    assert fresh == [] and lines == ["no run of other is one new lacks"]

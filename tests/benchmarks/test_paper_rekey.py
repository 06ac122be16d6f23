"""`python -m benchmarks.paper.figures --rekey` (benchmarks/paper/runs.py, rekey): a kept run of an older
code version takes the current key only when a re-run measures exactly what was kept; a
run whose re-run differs stays stale, so the pages re-run it. Real simulations on a tiny
trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.paper import runs
from benchmarks.paper.kit import KIT, SETUPS

pytestmark = pytest.mark.skipif(not (KIT / "traces").is_dir(),
                                reason="needs the paper-scale kit beside the repo")


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """tiny(n): a trace of Fig. 8's first n requests, in a trace directory and a runs
    directory of the test's own."""
    traces = tmp_path / "traces"
    traces.mkdir()
    rows = (KIT / "traces" / "fig8_9_rps4.8_ol256.csv").read_text().splitlines()
    monkeypatch.setattr(runs, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(runs, "TRACE_DIRS", (traces,))

    def trace(n: int) -> Path:
        path = traces / f"tiny{n}.csv"
        path.write_text("\n".join(rows[:n + 1]) + "\n")
        return path
    return trace


def _keep_older(trace: Path, system: str, **fields) -> Path:
    """A real run of ``system`` on ``trace``, kept as an older code version would have
    kept it (and with ``fields`` set on what was kept)."""
    task = runs.Task(SETUPS["llama"], trace, system, 0)
    runs.execute(task)
    data = json.loads(task.path.read_text())
    data["inputs"]["code_sha"] = "older"
    data.update(fields)
    task.path.write_text(json.dumps(data))
    return task.path


@pytest.fixture
def kept(tiny):
    """Two kept runs of a 24-request trace (the authors' scheduler and vLLM), keyed as an
    older code version would have keyed them."""
    trace = tiny(24)
    return [_keep_older(trace, system) for system in ("adaserve-authors", "vllm")]


def _code(path: Path) -> str:
    return json.loads(path.read_text())["inputs"]["code_sha"]


def test_identical_re_runs_re_key_the_version(kept):
    assert all(runs.cached(runs._task_of(json.loads(p.read_text()))) is None for p in kept)
    lines = runs.rekey(check=1)
    # a version a policy: each re-keyed on its own re-run
    assert len(lines) == 2 and all(line.startswith("code older, policy ")
                                   and "1 runs re-keyed" in line for line in lines)
    assert all(_code(p) == runs.code_sha() for p in kept)
    assert all(runs.cached(runs._task_of(json.loads(p.read_text()))) for p in kept)
    assert runs.rekey(check=1) == [
        "no kept run differs from its task in the code or policy hash alone"]


def test_a_re_run_that_differs_leaves_its_version_stale_and_no_other(kept):
    """A policy whose re-run moved (a preset that changed meaning, or a change to what it
    runs) stays stale; the other policy's runs of the same code are re-keyed."""
    data = json.loads(kept[1].read_text())
    data["classes"]["overall"]["attainment"] -= 1.0  # what an older simulator measured
    kept[1].write_text(json.dumps(data))
    lines = runs.rekey(check=1)
    stale = [line for line in lines if "left stale" in line]
    assert len(stale) == 1 and "1 runs left stale" in stale[0] and "vllm-s0.json" in stale[0]
    assert _code(kept[1]) == "older" and _code(kept[0]) == runs.code_sha()


@pytest.fixture
def three(tiny):
    """Three kept vLLM runs of one older version on traces of 8, 16 and 24 requests, their
    wall times set so the order by cost is known: 16 (cheapest), 8, 24 (costliest)."""
    return {n: _keep_older(tiny(n), "vllm", wall_s=wall)
            for n, wall in ((8, 2.0), (16, 1.0), (24, 3.0))}


def _recording(monkeypatch) -> list[str]:
    """The traces rekey re-runs, recorded around the real execute_fresh."""
    seen, real = [], runs.execute_fresh

    def fresh(task):
        seen.append(task.trace.name)
        return real(task)
    monkeypatch.setattr(runs, "execute_fresh", fresh)
    return seen


def test_rekey_re_runs_the_cheapest_and_the_costliest_of_a_version(three, monkeypatch):
    seen = _recording(monkeypatch)
    lines = runs.rekey(check=1)
    assert sorted(seen) == ["tiny16.csv", "tiny24.csv"]  # not the middle one, tiny8
    assert len(lines) == 1 and "3 runs re-keyed" in lines[0] and "2 re-run identical" in lines[0]
    assert all(_code(p) == runs.code_sha() for p in three.values())


def test_a_version_whose_costliest_run_moved_stays_stale_though_its_cheapest_did_not(
        three, monkeypatch):
    """A change that acts only under load (a door that shuts when most requests miss) moves
    the costliest run alone: the version stays stale, every run of it."""
    data = json.loads(three[24].read_text())
    data["classes"]["overall"]["attainment"] -= 1.0
    three[24].write_text(json.dumps(data))
    seen = _recording(monkeypatch)
    lines = runs.rekey(check=1)
    assert sorted(seen) == ["tiny16.csv", "tiny24.csv"]
    moved = str(three[24].relative_to(runs.RUNS))  # kept under its trace's hash
    assert len(lines) == 1 and "3 runs left stale" in lines[0] and lines[0].endswith(moved)
    assert all(_code(p) == "older" for p in three.values())

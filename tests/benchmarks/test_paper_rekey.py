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
def kept(tmp_path, monkeypatch):
    """Two kept runs of a 24-request trace (the authors' scheduler and vLLM), keyed as an
    older code version would have keyed them."""
    traces = tmp_path / "traces"
    traces.mkdir()
    rows = (KIT / "traces" / "fig8_9_rps4.8_ol256.csv").read_text().splitlines()[:25]
    trace = traces / "tiny.csv"
    trace.write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(runs, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(runs, "TRACE_DIRS", (traces,))
    paths = []
    for system in ("adaserve-authors", "vllm"):
        task = runs.Task(SETUPS["llama"], trace, system, 0)
        runs.execute(task)
        data = json.loads(task.path.read_text())
        data["inputs"]["code_sha"] = "older"
        task.path.write_text(json.dumps(data))
        paths.append(task.path)
    return paths


def _code(path: Path) -> str:
    return json.loads(path.read_text())["inputs"]["code_sha"]


def test_identical_re_runs_re_key_the_version(kept):
    assert all(runs.cached(runs._task_of(json.loads(p.read_text()))) is None for p in kept)
    lines = runs.rekey(check=1)
    assert lines[0].startswith("code older: 2 runs re-keyed") and "2 policies" in lines[0]
    assert all(_code(p) == runs.code_sha() for p in kept)
    assert all(runs.cached(runs._task_of(json.loads(p.read_text()))) for p in kept)
    assert runs.rekey(check=1) == [
        "no kept run differs from its task in the code or policy hash alone"]


def test_a_re_run_that_differs_leaves_the_version_stale(kept):
    data = json.loads(kept[1].read_text())
    data["classes"]["overall"]["attainment"] -= 1.0  # what an older simulator measured
    kept[1].write_text(json.dumps(data))
    lines = runs.rekey(check=1)
    assert "2 runs left stale" in lines[0] and "vllm-s0.json" in lines[0]
    assert all(_code(p) == "older" for p in kept)

"""The serving, SGLang and CPU-fleet pages and the context grid's, re-rendered from their
kept data into a temporary directory, are the committed pages byte for byte (issue 41):
nothing measured, no server started, no SGLang needed. A page whose code or kept data
drifts from what is committed fails here."""

import argparse
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.fleet import cpu as fleet_cpu
from benchmarks.serving import served_tpot, server_memory, soak, startup
from benchmarks.shared import pages as P
from benchmarks.sglang import cpu as sglang_cpu

from adaserve.loadgen import context_grid_page

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _same(made: Path, name: str) -> None:
    assert made.read_text() == (RESULTS / name).read_text()  # a readable diff first
    assert made.read_bytes() == (RESULTS / name).read_bytes()


@pytest.mark.parametrize("module, name", [(served_tpot, "served_tpot"),
                                          (server_memory, "server_memory"),
                                          (startup, "startup"), (sglang_cpu, "sglang_cpu")])
def test_a_timed_page_renders_from_its_json(module, name, tmp_path):
    shutil.copy(RESULTS / f"{name}.json", tmp_path)
    assert module.main(["--render", "--out", str(tmp_path)]) == 0
    _same(tmp_path / f"{name}.md", f"{name}.md")


@pytest.mark.parametrize("name, flags", [("fleet_cpu", []),
                                         ("fleet_cpu_defaults", ["--defaults"])])
def test_the_cpu_fleet_pages_render_from_the_json_beside_them(name, flags, tmp_path):
    shutil.copy(RESULTS / f"{name}.json", tmp_path)
    assert fleet_cpu.main([*flags, "--render", "--out", str(tmp_path / f"{name}.md")]) == 0
    _same(tmp_path / f"{name}.md", f"{name}.md")


def test_the_page_reads_its_numbers_from_the_json(tmp_path):
    data = json.loads((RESULTS / "fleet_cpu.json").read_text())
    data["ready_s"] = 999
    (tmp_path / "fleet_cpu.json").write_text(json.dumps(data))
    fleet_cpu.main(["--render", "--out", str(tmp_path / "fleet_cpu.md")])
    assert "Ready in 999 s" in (tmp_path / "fleet_cpu.md").read_text()


@pytest.mark.parametrize("alone_s, verdict", [(45.0, "met"), (30.0, "not met")])
def test_the_fleet_page_weighs_its_batch_against_one_replica_alone(alone_s, verdict,
                                                                     tmp_path):
    data = json.loads((RESULTS / "fleet_cpu_defaults.json").read_text())
    fleet_s = next(t["wall_s"] for t in data["time"] if t["target"] == "fleet")  # 60.8
    data["reference"] = {"requests": 6, "concurrency": 6, "cores": 2, "wall_s": alone_s,
                         "ok": 6, "sent": 6, "runs": []}
    (tmp_path / "fleet_cpu_defaults.json").write_text(json.dumps(data))
    fleet_cpu.main(["--defaults", "--render", "--out", str(tmp_path / "fleet_cpu_defaults.md")])
    text = (tmp_path / "fleet_cpu_defaults.md").read_text()
    assert f"**{fleet_s / alone_s:.2f}x** that (goal <= 1.5x" in text
    assert f"oversubscribing them: {verdict})" in text


def test_the_soak_pages_render_from_its_json_and_records(tmp_path):
    (tmp_path / "loadgen").mkdir()
    shutil.copy(RESULTS / "soak" / "summary.json", tmp_path)
    for f in ("summary.json", "records.jsonl"):
        shutil.copy(RESULTS / "soak" / "loadgen" / f, tmp_path / "loadgen")
    assert soak.main(["--render", "--out", str(tmp_path)]) == 0  # every check passed
    _same(tmp_path / "summary.md", "soak/summary.md")
    _same(tmp_path / "loadgen" / "summary.md", "soak/loadgen/summary.md")
    assert (tmp_path / "rss.png").stat().st_size > 0


@pytest.mark.parametrize("grid", ["context-grid", "context-grid-attn"])
def test_the_context_grid_rewrites_its_page_from_its_cells(grid, tmp_path):
    shutil.copy(RESULTS / grid / "summary.json", tmp_path)
    assert context_grid_page.main(argparse.Namespace(out=tmp_path, rewrite_page=True)) == 0
    _same(tmp_path / "summary.md", f"{grid}/summary.md")


def test_the_listing_remakes_each_from_kept_data_under_any_python():
    every = {pg.name: pg for pg in P.pages()}
    for name in ("served_tpot", "server_memory", "startup", "soak/summary",
                 "soak/loadgen/summary", "sglang_cpu", "fleet_cpu", "fleet_cpu_defaults"):
        cmd = P.regenerate(every[name])
        assert every[name].how == P.RENDER and cmd[:2] == ["python", "-m"], (name, cmd)
        assert cmd[-1] == "--render", (name, cmd)
    # measured under SGLang's venv; rendered by whichever Python lists the pages
    assert P.regenerate(every["fleet_cpu"])[2] == "benchmarks.fleet.cpu"
    assert "--defaults" in P.regenerate(every["fleet_cpu_defaults"])
    assert P.regenerate(every["soak/loadgen/summary"])[2] == "benchmarks.serving.soak"
    assert P.regenerate(every["context-grid-attn/summary"]) == [
        "adaserve", "bench", "--experiment", "context-grid", "--out",
        "results/context-grid-attn", "--rewrite-page"]
    assert every["context-grid/summary"].how == P.SWEEP

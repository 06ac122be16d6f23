"""results/ holds what a page reads (issue 41): no file or folder there that no page
links, names or has a script read (benchmarks/shared/orphans.py says how it decides)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_results_has_no_orphans():
    from benchmarks.shared.orphans import orphans
    found = [str(p.relative_to(ROOT)) for p in orphans()]
    assert found == [], f"no page reads these; remove them or link them: {found}"


def test_an_unread_entry_is_found_and_a_linked_one_is_not(tmp_path, monkeypatch):
    from benchmarks.shared import orphans as mod
    (tmp_path / "docs").mkdir()
    (tmp_path / "results" / "sim").mkdir(parents=True)
    (tmp_path / "README.md").write_text("[engine](results/engine.md)\n")
    (tmp_path / "docs" / "a.md").write_text("run `--out results/kept-sweep`\n")
    for name in ("engine.md", "engine.json", "engine.png"):  # a page and its data
        (tmp_path / "results" / name).write_text("x")
    for sweep in ("kept-sweep", "stray-sweep"):
        (tmp_path / "results" / sweep).mkdir()
        (tmp_path / "results" / sweep / "summary.md").write_text(f"--out results/{sweep}\n")
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(mod, "SHELVES", (tmp_path / "results", tmp_path / "results" / "sim"))
    assert mod.orphans() == [(tmp_path / "results" / "stray-sweep").resolve()]

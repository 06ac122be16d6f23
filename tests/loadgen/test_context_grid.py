"""The context-grid page's bookkeeping (loadgen/context_grid*.py) on fabricated cells: pieces
merge into one grid, a cell measured again replaces its old self, and the goals are read
off whatever cells exist. The measurement itself runs the real engine (docs/engine.md)."""

from __future__ import annotations

from adaserve.loadgen.context_grid import merge
from adaserve.loadgen.context_grid_page import goals, write_page


def _cell(b: int, c: int, speedup: float, step_ms: float) -> dict:
    spec = {"tok_s": 10 * speedup, "accepted_per_step": 2.0, "draft_step_ms": step_ms,
            "verify_ms": 50.0, "identical": True, "tok_s_runs": [10 * speedup]}
    inc = dict(spec, tok_s=10.0, draft_step_ms=None)
    return {"batch": b, "context": c,
            "forms": {"incremental": inc, "distilled-window": spec}}


def _meta(date: str, repeats: int = 1) -> dict:
    return {"command": "adaserve bench --experiment context-grid", "machine": "m", "date": date,
            "minutes": 1.0, "commit": "abc", "torch_threads": 2, "repeats": repeats,
            "settings": {"policy": "chain-4", "new_tokens": 8, "draft_window": 256,
                         "draft_sinks": 4, "seed": 0, "distinct_prompts": 2}}


def test_pieces_merge_and_a_remeasured_cell_replaces_the_old(tmp_path):
    path = tmp_path / "summary.json"
    merge(path, _meta("d1"), [_cell(8, 2048, 1.0, 10.0), _cell(8, 4096, 1.2, 10.5)])
    merge(path, _meta("d2"), [_cell(8, 8192, 1.6, 11.0)])
    kept = merge(path, _meta("d2"), [_cell(8, 8192, 1.7, 11.0), _cell(8, 4096, 1.3, 10.5)])
    assert [(c["batch"], c["context"]) for c in kept["cells"]] == [(8, 2048), (8, 4096),
                                                                    (8, 8192)]
    assert [r["date"] for r in kept["runs"]] == ["d1", "d2"]  # a run saving again: one entry
    lines = goals(kept["cells"])
    assert "- bounded-KV distilled draft >= 1.5x at batch 8, context 4096: 1.30x: NOT met" in lines
    assert "- bounded-KV distilled draft >= 1.5x at batch 8, context 8192: 1.70x: met (whole run)" \
        in lines
    assert any("1.00 -> 1.30 -> 1.70: rises" in x for x in lines)
    assert any("context 8192 / 2048 = 1.10 (flat within 20%)" in x for x in lines)
    write_page(tmp_path, kept)
    page = (tmp_path / "summary.md").read_text()
    assert "| 8 | 8192 | 10.0 | 17.0 (1.70x) | yes |" in page


def test_both_readings_where_the_full_batch_rate_is_kept(tmp_path):
    """Cells that keep the full-batch rate (iterations where every request decoded) give both
    readings, and the goal says which one it is met on; the page has the second table."""
    cell = _cell(8, 8192, 1.2, 11.0)
    cell["forms"]["incremental"].update(tok_s_full=10.0, full_iterations=[31],
                                        decode_iterations=[31])
    cell["forms"]["distilled-window"].update(tok_s_full=16.0, full_iterations=[6],
                                             decode_iterations=[11])
    kept = merge(tmp_path / "summary.json", _meta("d1"), [cell])
    assert ("- bounded-KV distilled draft >= 1.5x at batch 8, context 8192: 1.20x over the "
            "whole run, 1.60x while the whole batch decodes: met (full batch)") in goals(kept["cells"])
    write_page(tmp_path, kept)
    page = (tmp_path / "summary.md").read_text()
    assert "| 8 | 8192 | 10.0 | 16.0 (1.60x; 6 of 11) |" in page


def test_the_page_says_each_pieces_repeats(tmp_path):
    """A grid whose pieces ran different repeat counts says each; one count is said once."""
    path = tmp_path / "summary.json"
    kept = merge(path, _meta("d1", repeats=3), [_cell(8, 4096, 1.0, 10.0)])
    write_page(tmp_path, kept)
    assert "median of 3 round-robin repeats" in (tmp_path / "summary.md").read_text()
    kept = merge(path, _meta("d2", repeats=2), [_cell(8, 8192, 1.2, 10.0)])
    write_page(tmp_path, kept)
    assert ("median of 3/2 (the pieces listed at the end, in order) round-robin repeats"
            in (tmp_path / "summary.md").read_text())

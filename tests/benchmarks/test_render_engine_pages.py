"""The engine's timed pages and the simulator's speed page, re-rendered from their kept JSON
into a temporary directory, are the committed pages byte for byte (issue 41): nothing
measured, no model loaded. A page whose code or kept data drifts from what is committed
fails here."""

import shutil
from pathlib import Path

import matplotlib
import pytest

from benchmarks.engine import (attention_grid, draft, engine, forward_parts, kv_layout,
                               skinny_matmul, spec_phases)
from benchmarks.shared import pages as P
from benchmarks.sim import speed

RESULTS = Path(__file__).resolve().parents[2] / "results"
# each module and its page under results/, without .md
PAGES = [(attention_grid, "attention_grid"), (draft, "draft"), (engine, "engine"),
         (forward_parts, "forward_parts"), (kv_layout, "kv_layout"),
         (skinny_matmul, "skinny_matmul"), (spec_phases, "spec_phases"), (speed, "sim/speed")]


def _no_measuring(*args, **kwargs):
    raise AssertionError("--render measured")


@pytest.mark.parametrize("module, name", PAGES, ids=[n for _, n in PAGES])
def test_a_timed_page_renders_from_its_json(module, name, tmp_path, monkeypatch):
    monkeypatch.setattr(module, "measure", _no_measuring)
    kept = RESULTS / f"{name}.json"
    shutil.copy(kept, tmp_path)
    assert module.main(["--render", "--out", str(tmp_path)]) == 0
    made = tmp_path / f"{Path(name).name}.md"
    assert made.read_text() == (RESULTS / f"{name}.md").read_text()  # a readable diff first
    assert made.read_bytes() == (RESULTS / f"{name}.md").read_bytes()
    assert (tmp_path / kept.name).read_bytes() == kept.read_bytes()  # the data left alone


def test_the_engine_plot_renders_beside_its_page(tmp_path):
    shutil.copy(RESULTS / "engine.json", tmp_path)
    assert engine.main(["--render", "--out", str(tmp_path)]) == 0
    plot, committed = (tmp_path / engine.PLOT).read_bytes(), (RESULTS / engine.PLOT).read_bytes()
    assert plot.startswith(b"\x89PNG")
    # the same bytes where the matplotlib that drew the committed plot draws it again
    if f"Matplotlib version{matplotlib.__version__},".encode() in committed:
        assert plot == committed


def test_the_listing_renders_them_from_kept_data():
    how = {pg.name: pg.how for pg in P.pages()}
    assert {name: how[name] for _, name in PAGES} == {name: P.RENDER for _, name in PAGES}


def test_a_page_the_json_does_not_hold_fails_to_render(tmp_path):
    """A kept JSON without a value its page shows is an error, not a guess."""
    (tmp_path / "kv_layout.json").write_text('{"command": "c", "machine": "m", "rows": []}')
    with pytest.raises(KeyError):
        kv_layout.main(["--render", "--out", str(tmp_path)])

"""Every results page names the module and command that made it (issue 41): `python -m
benchmarks` (or `adaserve bench pages`) lists them, and `python -m benchmarks NAME` (or
`adaserve bench page NAME`) remakes one from what it keeps."""

import subprocess
import sys
from pathlib import Path

from benchmarks.shared import pages as P

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, module=("-m", "benchmarks")):
    return subprocess.run([sys.executable, *module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_every_page_but_history_names_its_module():
    every = {pg.name: pg for pg in P.pages()}
    assert len(every) > 40  # every page under results/, less the raw runs
    assert [n for n, pg in every.items() if pg.module is None and not pg.history] == []
    for pg in every.values():
        if pg.module is not None:
            assert (ROOT / pg.module).is_file(), (pg.name, pg.module)
    # a page made before the move names its flat script; the listing finds it at its new place
    assert every["engine"].module == "benchmarks/engine/engine.py"
    assert every["sim/test-set"].module == "benchmarks/paper/test_set.py"  # below its findings
    assert every["rate-default-v2/summary"].module == "loadgen/bench.py"
    # an adaserve bench experiment that runs in-process names its own module
    assert every["context-grid/summary"].module == "loadgen/context_grid.py"
    assert every["sim/fig8-rps3.0"].module == "benchmarks/paper/point.py"  # names its CLI run
    # every folder of benchmarks/ makes a page
    folders = {Path(pg.module).parts[1] for pg in every.values()
               if pg.module and pg.module.startswith("benchmarks/")}
    assert folders == {"engine", "serving", "sglang", "fleet", "paper", "sim"}


def test_the_listing_says_how_each_page_remakes():
    out = _run()
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines()}
    assert rows["startup_budget"].endswith("from kept data (--render)")
    assert rows["rate-default-v2/summary"].endswith("from kept runs (--rewrite-page)")
    assert rows["sim/fig8"].endswith("from kept runs")
    assert rows["engine"].endswith("from kept data (--render)")
    assert rows["sim/speed"].endswith("from kept data (--render)")
    assert rows["sim/history-issue19"].split()[1:] == ["-", "history", "-"]


def test_a_page_gives_the_command_that_remakes_it():
    sweep = _run("rate-default-v2/summary")
    assert sweep.returncode == 0
    # a served sweep's page is rewritten from its kept runs, nothing re-run
    assert ("adaserve bench --experiment rate --out results/rate-default-v2 --rewrite-page"
            in sweep.stdout)
    # the page names `python benchmarks/sim_paper_figures.py`; it runs where it lives now
    fig = _run("sim/fig8.md")
    assert "python -m benchmarks.paper.figures --figures fig8" in fig.stdout
    missing = _run("no-such-page")
    assert missing.returncode == 2 and "python -m benchmarks" in missing.stderr
    history = _run("sim/history-issue19")
    assert history.returncode == 1 and "history" in history.stderr
    # a timed page with its data kept is re-rendered from it, under the command it names
    timed = _run("engine")
    assert "python -m benchmarks.engine.engine --rounds 3 --render" in timed.stdout


def test_a_page_that_only_re_measures_is_not_run_by_accident(monkeypatch, capsys):
    """A timed page without kept data to render from runs only with --measure."""
    monkeypatch.setitem(P.HOW, "benchmarks/engine/engine.py", P.REMEASURE)
    assert P.main(["engine", "--run"]) == 1
    assert "--measure" in capsys.readouterr().err


def test_a_timed_page_re_renders_from_its_kept_data_unchanged():
    """`adaserve bench page startup_budget` rewrites the page from its JSON: the same bytes."""
    before = {p: (ROOT / "results" / p).read_bytes()
              for p in ("startup_budget.md", "startup_budget.json")}
    out = _run("bench", "page", "startup_budget", module=("-m", "adaserve.cli"))
    after = {p: (ROOT / "results" / p).read_bytes() for p in before}
    for p, data in before.items():  # put back whatever happened, then judge
        (ROOT / "results" / p).write_bytes(data)
    assert out.returncode == 0, out.stderr
    assert after == before


def test_status_reads_a_module_at_its_old_path_and_ignores_the_move():
    then = ("from _common import RESULTS\n"
            "CMD = 'python benchmarks/startup_budget.py'\n")
    now = ('"""Docs."""\nfrom benchmarks.shared.common import RESULTS\n'
           "CMD = 'python -m benchmarks.engine.startup_budget'\n")
    assert P._code(then) == P._code(now)
    assert P._code(then) != P._code(now.replace("RESULTS\n", "RESULTS, ROOT\n"))
    # a page made before the move: its module's source at that commit, under the old path
    page = next(pg for pg in P.pages() if pg.name == "startup_budget")
    assert P._source_at(page.commit, page.module) is not None

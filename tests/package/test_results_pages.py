"""Every results page names the module and command that made it (issue 41): `python -m
benchmarks` lists them, and `python -m benchmarks NAME` gives the command that remakes one."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_every_page_but_history_names_its_module():
    out = _run()
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    pages = {r[0]: (r[1], " ".join(r[2:])) for r in rows}
    assert len(pages) > 40  # every page under results/, less the raw runs
    orphans = [name for name, (module, state) in pages.items()
               if module == "-" and state != "history"]
    assert orphans == []
    for name, (module, _) in pages.items():
        if module != "-":
            assert (ROOT / module).is_file(), (name, module)
    assert pages["engine"][0] == "benchmarks/engine.py"
    assert pages["sim/test-set"][0] == "benchmarks/sim_test_set.py"  # named below its findings
    assert pages["rate-default-v2/summary"][0] == "loadgen/bench.py"
    # an adaserve bench experiment that runs in-process names its own module
    assert pages["context-grid/summary"][0] == "loadgen/context_grid.py"


def test_a_page_gives_the_command_that_remakes_it():
    sweep = _run("rate-default-v2/summary")
    assert sweep.returncode == 0
    # a served sweep's page is rewritten from its kept runs, nothing re-run
    assert ("adaserve bench --experiment rate --out results/rate-default-v2 --rewrite-page"
            in sweep.stdout)
    fig = _run("sim/fig8.md")
    assert "python benchmarks/sim_paper_figures.py --figures fig8" in fig.stdout
    missing = _run("no-such-page")
    assert missing.returncode == 2 and "python -m benchmarks" in missing.stderr
    history = _run("sim/history-issue19")
    assert history.returncode == 1 and "history" in history.stderr

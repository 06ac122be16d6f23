"""The results pages and what makes each: ``python -m benchmarks`` or ``adaserve bench
pages`` (issue 41).

    python -m benchmarks               # every page: the module that makes it, whether that
                                       # module changed since the page, and how it remakes
    python -m benchmarks NAME          # the command that remakes one page (NAME: its path
                                       # under results/ without .md, e.g. engine, sim/fig8,
                                       # rate-default-v2/summary); --run runs it (and
                                       # --measure too, for a page that re-measures)
    adaserve bench page NAME           # the same as NAME --run

A page's header names its command (``- command: `...` ``, or the first line in backticks)
and the commit it was made at; the module is the one that command runs. A page made before
benchmarks/ became a package names its flat script (``python benchmarks/engine.py``):
MOVED says where that script lives now, and the page is remade by the module there. A page
is "current" when its module's code (docstrings, comments and where its imports come from
aside) is what it was at the page's commit; "module changed" says the page was made by an
older version (it may still be right: simulated pages refuse stale kept runs on their own).
Pages of history (results/sim/history-*.md, and ``HISTORY``) record what no longer runs.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.shared.common import RESULTS, ROOT
from benchmarks.shared.run_keys import runnable

_COMMAND = re.compile(r"command[^`\n]*`([^`]+)`")
_BACKTICKED = re.compile(r"^`([^`]+)`", re.M)
_COMMIT = re.compile(r"(?:commit|code version|at commit)\s+([0-9a-f]{7,40})\b")
# pages that record a hand-run investigation, their commands inline, not one script's output
HISTORY = {"sglang_shapes": "draft shapes inside SGLang, 2026-11-22, before ragged verify"}
# what a command's first words run: the CLI's subcommands and their modules
_CLI = {"bench": "loadgen/bench.py", "loadgen": "loadgen/run.py",
        "simulate": "adaserve/sim/cli.py", "profile": "adaserve/engine/profiler.py"}
# pages whose header names the CLI command their module ran, not the module
MADE_BY = {"sim/fig8-rps3.0": "benchmarks/paper/point.py",
           "soak/loadgen/summary": "benchmarks/serving/soak.py"}

# The flat files of before issue 41 and where each lives now (git log --follow traces
# them). Pages made before the move keep the command they were made with; it runs as
# ``python -m`` of the module here.
MOVED = {f"benchmarks/{old}.py": f"benchmarks/{new}.py" for old, new in {
    "engine": "engine/engine", "draft": "engine/draft", "forward_parts": "engine/forward_parts",
    "kv_layout": "engine/kv_layout", "skinny_matmul": "engine/skinny_matmul",
    "attention_grid": "engine/attention_grid", "online_draft_cost": "engine/online_draft_cost",
    "fleet_routing": "fleet/routing",
    "spec_phases": "engine/spec_phases", "scheduler_overhead": "engine/scheduler_overhead",
    "startup_budget": "engine/startup_budget", "served_tpot": "serving/served_tpot",
    "server_memory": "serving/server_memory", "startup": "serving/startup",
    "soak": "serving/soak", "sglang_cpu": "sglang/cpu", "fleet_cpu": "fleet/cpu",
    "sim_fleet": "fleet/sim", "sim_paper_figures": "paper/figures",
    "sim_paper_fig14": "paper/fig14", "sim_paper_ablation": "paper/ablation",
    "sim_paper_calibrate": "paper/calibrate", "sim_paper_hardware": "paper/hardware",
    "sim_paper_point": "paper/point", "sim_seed_figures": "paper/seed",
    "sim_test_set": "paper/test_set", "sim_fit_paper_acceptance": "paper/acceptance",
    "sim_speed": "sim/speed", "sim_validation": "sim/validation",
    "sim_cpu_hardware": "sim/cpu_hardware", "sim_fit_synthetic": "sim/fit_synthetic",
    "orphans": "shared/orphans", "_common": "shared/common", "_run_keys": "shared/run_keys",
    "_llamacpp": "engine/llamacpp", "soak_checks": "serving/soak_checks",
    "_sglang_page": "sglang/page", "_sglang_runs": "sglang/runs", "_fleet_runs": "fleet/runs",
    "sim_paper_goals": "paper/goals", "_paper": "paper/kit", "_paper_runs": "paper/runs",
    "_paper_values": "paper/values", "_test_set": "paper/test_set_traces",
    "_acceptance_fit": "paper/acceptance_fit", "_acceptance_page": "paper/acceptance_page",
    "_acceptance_pairs": "paper/acceptance_pairs"}.items()}

# How a module remakes its page without measuring again, where it can
KEPT_RUNS = "from kept runs"  # simulated: reads its kept runs, re-runs only stale ones
# a sweep's summary.json (and a served one's raw/); the context grid keeps its cells there
SWEEP = "from kept runs (--rewrite-page)"
RENDER = "from kept data (--render)"  # a timed page re-rendered from its results/ JSON
REMEASURE = "re-measures"  # a timing on this machine: no page without a new measurement
SIMULATES = "re-simulates"  # deterministic, untimed: the simulation runs again
HOW = {
    "loadgen/bench.py": SWEEP,
    "loadgen/context_grid.py": SWEEP,
    **{f"benchmarks/engine/{m}.py": RENDER
       for m in ("startup_budget", "scheduler_overhead", "attention_grid", "draft", "engine",
                 "forward_parts", "kv_layout", "skinny_matmul", "skinny_bound", "spec_phases",
                 "online_replay")},
    "benchmarks/sim/speed.py": RENDER,
    "benchmarks/fleet/routing.py": RENDER,
    **{f"benchmarks/{m}.py": RENDER for m in (
        "serving/served_tpot", "serving/server_memory", "serving/soak", "serving/startup",
        "sglang/cpu", "fleet/cpu")},
    **{f"benchmarks/paper/{m}.py": KEPT_RUNS for m in ("figures", "fig14", "ablation", "seed",
                                                        "test_set", "alone")},
    "benchmarks/fleet/sim.py": KEPT_RUNS,
    **{m: SIMULATES for m in ("benchmarks/paper/point.py", "benchmarks/paper/calibrate.py",
                              "benchmarks/paper/hardware.py", "benchmarks/paper/acceptance.py",
                              "benchmarks/sim/validation.py", "benchmarks/sim/cpu_hardware.py",
                              "adaserve/sim/cli.py",
                              # reads the kept sweeps' summaries: runs again, same page
                              "benchmarks/serving/served_tally.py")},
}


@dataclass(frozen=True, slots=True)
class Page:
    name: str  # path under results/ without .md
    command: str | None
    module: str | None  # the file that makes it now, relative to the repository
    commit: str | None

    @property
    def history(self) -> bool:
        return Path(self.name).name.startswith("history-") or self.name in HISTORY

    @property
    def how(self) -> str:
        if self.history or self.module is None:
            return "-"
        return HOW.get(self.module, REMEASURE)


def pages() -> list[Page]:
    """Every results page: results/**/*.md, less the raw runs kept beside the sweeps."""
    out = []
    for path in sorted(RESULTS.rglob("*.md")):
        rel = path.relative_to(RESULTS)
        if {"raw", "runs"} & set(rel.parts[:-1]):
            continue
        text = path.read_text()
        head = "\n".join(text.splitlines()[:16])
        # the header's command; a page that opens with its findings names it further down
        m = _COMMAND.search(head) or _COMMAND.search(text) or _BACKTICKED.search(head)
        command = m.group(1).strip() if m else None
        c = _COMMIT.search(head) or _COMMIT.search(text)
        name = str(rel.with_suffix(""))
        out.append(Page(name, command, MADE_BY.get(name) or module_of(command),
                        c.group(1) if c else None))
    return out


def module_of(command: str | None) -> str | None:
    """The file a command runs now: ``python -m benchmarks.x.y``, a script by path (a moved
    one at its new place), or the module behind an ``adaserve`` subcommand."""
    if not command:
        return None
    words = shlex.split(command, comments=False)
    if "-m" in words[:-1]:
        path = words[words.index("-m") + 1].replace(".", "/") + ".py"
        return path if (ROOT / path).is_file() else None
    for w in words:
        if w.endswith(".py"):
            w = MOVED.get(w, w)
            if (ROOT / w).is_file():
                return w
    if words[:2] == ["adaserve", "bench"] and "context-grid" in words:
        return "loadgen/context_grid.py"  # in-process, not bench.py's server sweeps
    if words and words[0] == "adaserve" and len(words) > 1:
        return _CLI.get(words[1])
    return None


def status(page: Page) -> str:
    if page.history:
        return "history"
    if page.module is None:
        return "no module named"
    if page.commit is None:
        return "no commit named"
    known = subprocess.run(["git", "cat-file", "-e", f"{page.commit}^{{commit}}"], cwd=ROOT,
                           capture_output=True)
    if known.returncode:
        return "commit unknown"
    then = _source_at(page.commit, page.module)
    now = (ROOT / page.module).read_text()
    return "current" if then is not None and _code(then) == _code(now) else "module changed"


def _source_at(commit: str, module: str) -> str | None:
    """The module's source at ``commit``, under the path it had then (MOVED)."""
    for path in (module, *(old for old, new in MOVED.items() if new == module)):
        got = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT,
                             capture_output=True, text=True)
        if got.returncode == 0:
            return got.stdout
    return None


def _code(source: str) -> bytes:
    """What a module runs, for comparing two versions: no docstrings or comments, imports
    by the names they bind (a moved sibling is imported from a new place), and the
    commands and paths it writes on its pages read at their new places (MOVED)."""
    for old, new in MOVED.items():
        source = source.replace(f"python {old}", "python -m " + new[:-3].replace("/", "."))
        source = source.replace(old, new)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source.encode()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            node.module, node.level = None, 0
    return runnable(tree)


def regenerate(page: Page) -> list[str] | None:
    """The command that remakes a page: a served sweep's page from its kept runs
    (``--rewrite-page``, nothing re-run); a timed page with its data kept re-rendered from
    it (``--render``); any other page by its own command, run as the module that makes it
    now (simulated pages read their kept runs and re-run only the stale ones; a
    measurement re-measures)."""
    if page.command is None:
        return None
    words = shlex.split(page.command)
    if words[:2] == ["adaserve", "bench"]:
        keep = []
        for flag in ("--experiment", "--out"):
            if flag in words:
                keep += [flag, words[words.index(flag) + 1]]
        return ["adaserve", "bench", *keep, "--rewrite-page"]
    if page.module is None:
        return words
    render = ["--render"] if page.how == RENDER else []
    if page.module in MADE_BY.values():  # its header names the CLI run its module made
        return ["python", "-m", page.module[:-3].replace("/", "."), *render]
    script = next((i for i, w in enumerate(words) if MOVED.get(w, w) == page.module), None)
    if script is not None:  # a script by path: run as the module it is now
        words = [*words[:script], "-m", page.module[:-3].replace("/", "."), *words[script + 1:]]
    if render and "-m" in words:  # any Python renders: SGLang's venv measured, not needed now
        words = ["python", *words[words.index("-m"):]]
    return [*words, *render]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="The results pages and the module that makes each.")
    p.add_argument("name", nargs="?", help="a page: its path under results/ without .md")
    p.add_argument("--run", action="store_true", help="run the page's regenerating command")
    p.add_argument("--measure", action="store_true",
                   help="with --run, also run a page that can only be remade by measuring "
                        "again (timed: run it alone)")
    args = p.parse_args(argv)
    every = pages()
    if args.name is None:
        width = max(len(pg.name) for pg in every)
        mod = max(len(pg.module or "-") for pg in every)
        for pg in every:
            print(f"{pg.name:<{width}}  {pg.module or '-':<{mod}}  {status(pg):<15}  {pg.how}")
        return 0
    page = next((pg for pg in every if pg.name == args.name.removesuffix(".md")), None)
    if page is None:
        print(f"no results page {args.name!r}; `python -m benchmarks` lists them", file=sys.stderr)
        return 2
    cmd = regenerate(page)
    if cmd is None:
        print(f"{page.name}: a page of history, or one that names no command", file=sys.stderr)
        return 1
    print(f"{page.name}: made by {page.module or 'its command'} ({status(page)}; "
          f"remade: {page.how})\n  {shlex.join(cmd)}")
    if not args.run:
        return 0
    if page.how == REMEASURE and not args.measure:
        print(f"{page.name} has no kept data to render from: remaking it measures again on "
              "this machine (timed: run it alone); --measure runs it", file=sys.stderr)
        return 1
    if cmd[0] == "python":  # this interpreter, whose packages the page was listed with
        cmd = [sys.executable, *cmd[1:]]
    return subprocess.run(cmd, cwd=ROOT).returncode

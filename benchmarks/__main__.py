"""The results pages and what makes each: ``python -m benchmarks`` (issue 41).

    python -m benchmarks               # every page: the module and command that made it,
                                       # and whether that module changed since
    python -m benchmarks NAME          # how to regenerate one page (NAME: its path under
                                       # results/ without .md, e.g. engine, sim/fig8,
                                       # rate-default-v2/summary); --run runs it

A page's header names its command (``- command: `...` ``, or the first line in backticks)
and the commit it was made at; the module is the script or the CLI that command runs. A
page is "current" when its module has no commit since the page's; "module changed" says
the page was made by an older version of its module (it may still be right: a docstring
counts as a change here, and simulated pages refuse stale kept runs on their own). Pages of
history (results/sim/history-*.md, and ``HISTORY``) record what no longer runs and name no
single command.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
_COMMAND = re.compile(r"command[^`\n]*`([^`]+)`")
_BACKTICKED = re.compile(r"^`([^`]+)`", re.M)
_COMMIT = re.compile(r"(?:commit|code version|at commit)\s+([0-9a-f]{7,40})\b")
# pages that record a hand-run investigation, their commands inline, not one script's output
HISTORY = {"sglang_shapes": "draft shapes inside SGLang, 2026-11-22, before ragged verify"}
# what a command's first words run: the CLI's subcommands and their modules
_CLI = {"bench": "loadgen/bench.py", "loadgen": "loadgen/run.py",
        "simulate": "adaserve/sim/cli.py", "profile": "adaserve/engine/profiler.py"}


@dataclass(frozen=True, slots=True)
class Page:
    name: str  # path under results/ without .md
    command: str | None
    module: str | None  # the file that made it, relative to the repository
    commit: str | None

    @property
    def history(self) -> bool:
        return Path(self.name).name.startswith("history-") or self.name in HISTORY


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
        out.append(Page(str(rel.with_suffix("")), command, module_of(command),
                        c.group(1) if c else None))
    return out


def module_of(command: str | None) -> str | None:
    """The script a command runs (``python benchmarks/x.py ...``) or the module behind an
    ``adaserve`` subcommand; None where neither is named."""
    if not command:
        return None
    words = shlex.split(command, comments=False)
    for w in words:
        if w.endswith(".py") and (ROOT / w).is_file():
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
    changed = subprocess.run(["git", "log", "--oneline", f"{page.commit}..HEAD", "--",
                              page.module], cwd=ROOT, capture_output=True, text=True)
    if changed.returncode:
        return "commit unknown"
    n = len(changed.stdout.splitlines())
    return "current" if n == 0 else f"module changed ({n} commits)"


def regenerate(page: Page) -> list[str] | None:
    """The command that remakes a page: a served sweep's page from its kept runs
    (``--rewrite-page``, nothing re-run); any other page by its own command (simulated
    pages read their kept runs and re-run only the stale ones; a measurement re-measures)."""
    if page.command is None:
        return None
    words = shlex.split(page.command)
    if words[:2] == ["adaserve", "bench"]:
        keep = []
        for flag in ("--experiment", "--out"):
            if flag in words:
                keep += [flag, words[words.index(flag) + 1]]
        return ["adaserve", "bench", *keep, "--rewrite-page"]
    return words


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="The results pages and the module that makes each.")
    p.add_argument("name", nargs="?", help="a page: its path under results/ without .md")
    p.add_argument("--run", action="store_true", help="run the page's regenerating command")
    args = p.parse_args(argv)
    every = pages()
    if args.name is None:
        width = max(len(pg.name) for pg in every)
        for pg in every:
            print(f"{pg.name:<{width}}  {pg.module or '-':<34}  {status(pg)}")
        return 0
    page = next((pg for pg in every if pg.name == args.name.removesuffix(".md")), None)
    if page is None:
        print(f"no results page {args.name!r}; `python -m benchmarks` lists them", file=sys.stderr)
        return 2
    cmd = regenerate(page)
    if cmd is None:
        print(f"{page.name}: a page of history, or one that names no command", file=sys.stderr)
        return 1
    print(f"{page.name}: made by {page.module or 'its command'} ({status(page)})\n"
          f"  {shlex.join(cmd)}")
    if not args.run:
        return 0
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())

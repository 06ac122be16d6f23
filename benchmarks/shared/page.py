"""A page's header and tables: what every results page starts with and how it lays out rows.

A header says how its numbers were made: the command, the machine, the date (UTC) and the
code version (commit). ``Made.now`` records them when a module measures; a page
re-rendered from its kept data (``--render``) keeps the ``Made`` it was measured with,
read back from its JSON, so the header stays the measurement's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.shared.common import RESULTS, commit, machine


@dataclass(frozen=True, slots=True)
class Made:
    command: str
    machine: str
    date: str  # UTC, to the minute
    commit: str

    @classmethod
    def now(cls, module: str) -> Made:
        """This run: ``python -m <module> <its arguments>`` on this machine, now, at HEAD."""
        cmd = shlex.join(["python", "-m", module, *sys.argv[1:]])
        date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes")
        return cls(cmd, machine(), date, commit() or "uncommitted")

    @classmethod
    def of(cls, data: dict) -> Made:
        """The header a kept page's JSON records (its ``command``, ``machine``, ``date``,
        ``commit``)."""
        return cls(data["command"], data["machine"], data["date"], data["commit"])

    def header(self, title: str, note: str = "") -> list[str]:
        """The page's first lines: its title, then command, machine, date and commit."""
        return [f"# {title}", "", f"- command: `{self.command}`", f"- machine: {self.machine}",
                f"- date: {self.date} UTC, commit {self.commit}{note}", ""]

    def to_dict(self) -> dict:
        return asdict(self)


def table(head: list[str], rows: list[list], align: str = "") -> list[str]:
    """A markdown table; ``align`` is one character a column, ``r`` for right-aligned."""
    rule = ["---:" if a == "r" else "---" for a in align.ljust(len(head), "l")]
    return ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|",
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)]


def kept(name: str, out: Path = RESULTS) -> dict:
    """A page's kept data, results/<name>.json, for re-rendering it without measuring."""
    path = out / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{path} is not there: this page has no kept data to render from; "
                         "run it without --render to measure")
    return json.loads(path.read_text())


def render_flags(parser: argparse.ArgumentParser, name: str, out: Path = RESULTS) -> None:
    """A timed page's --out (where its page and JSON go) and --render (measure nothing)."""
    parser.add_argument("--out", type=Path, default=out, help="where the page and its JSON go")
    parser.add_argument("--render", action="store_true",
                        help=f"measure nothing: rewrite the page from --out's {name}.json")


def write_page(name: str, lines: list[str], out: Path, data: dict | None = None) -> None:
    """Prints a page and writes it to out/<name>.md; with ``data`` (a measurement's, not a
    render's) keeps that too, out/<name>.json, for re-rendering the page later."""
    text = "\n".join(lines)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    if data is not None:
        (out / f"{name}.json").write_text(json.dumps(data, indent=2))
    (out / f"{name}.md").write_text(text)

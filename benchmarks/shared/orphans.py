"""What under results/ no page reads: the orphans (issue 41).

A page is README.md, docs/*.md or a results page (results/**/*.md). An entry of results/
(a file or a folder at its top level, or under results/sim/) is read when a page other
than its own links into it, when a page's text names its path (a command, `results/x.md`),
or when a script names it (the kept runs a page is made from); a file's data beside its
page (``X.json`` or ``X.png`` next to ``X.md``) is read with the page. Superseded sweeps
that no page names are orphans: remove them, or link them from the page that explains
why they are kept.

    python -m benchmarks.shared.orphans      # prints one orphan a line; exit 1 if any
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
# the folders whose entries are pages of their own (results/sim/ holds the figure pages)
SHELVES = (RESULTS, RESULTS / "sim")
LINK = re.compile(r"\]\(([^)#\s]+)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted(RESULTS.rglob("*.md"))]


def _linked() -> set[Path]:
    """Every path a page links to, resolved, with the page it is linked from."""
    out: set[tuple[Path, Path]] = set()
    for page in _pages():
        for target in LINK.findall(page.read_text(errors="replace")):
            if "://" in target:
                continue
            out.add(((page.parent / target).resolve(), page.resolve()))
    return out


def _entry_of(path: Path) -> Path | None:
    """The shelf entry (top-level file or folder of a shelf) that ``path`` lies in."""
    for shelf in sorted(SHELVES, key=lambda s: -len(s.parts)):
        try:
            rel = path.relative_to(shelf.resolve())
        except ValueError:
            continue
        return shelf.resolve() / rel.parts[0] if rel.parts else None
    return None


def _named_in_code() -> str:
    """The source of the scripts that write and read results/: a kept run folder (runs/,
    fleet-runs/, a trace) is read by the script that names it, not through a link."""
    return "\n".join(p.read_text(errors="replace") for pattern in
                     ("benchmarks/**/*.py", "loadgen/*.py", "adaserve/**/*.py")
                     for p in ROOT.glob(pattern) if p != Path(__file__).resolve())


def orphans() -> list[Path]:
    code = _named_in_code()
    # each page's text and the entry it belongs to, found once
    texts = [(p.resolve(), _entry_of(p.resolve()), p.read_text(errors="replace"))
             for p in _pages()]
    read: set[Path] = set()
    for shelf in SHELVES:
        for e in shelf.iterdir():
            quoted = rf"[\"'/]{re.escape(e.stem if e.is_file() else e.name)}[\"'/.]"
            named = str(e.relative_to(RESULTS))
            # named by a script, or by path in another page's text (a command, `results/x.md`)
            if re.search(quoted, code) or any(
                    named in t for page, entry, t in texts
                    if entry != e.resolve() and not (e.is_file() and page.stem == e.stem)):
                read.add(e.resolve())
    for target, page in _linked():
        entry = _entry_of(target)
        if entry is None or _entry_of(page) == entry:  # a page linking its own files
            continue
        read.add(entry)
        if entry.suffix == ".md":  # its data and plots beside it
            read.update(entry.parent.glob(entry.stem + ".*"))
    shelves = {s.resolve() for s in SHELVES}
    return [entry for shelf in SHELVES for entry in (e.resolve() for e in sorted(shelf.iterdir()))
            if not (entry.name.startswith(".") or entry in read or entry in shelves)]


def main() -> int:
    found = orphans()
    for path in found:
        print(path.relative_to(ROOT))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

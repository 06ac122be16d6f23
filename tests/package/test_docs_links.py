"""Every relative link in README.md and docs/*.md points to a file that exists, and every
#anchor into a markdown page names one of its headings (GitHub's heading ids)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# a target broken by a line wrap renders as text, not a link, and LINK would skip it
SPLIT = re.compile(r"!?\[[^\]]*\]\(([^)\s]*\n[^)]*)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def heading_ids(page: Path) -> set[str]:
    """GitHub's ids: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    ids = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            ids.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return ids


def broken(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())  # code blocks hold no links
    bad = [f"{' '.join(t.split())}: target split across lines" for t in SPLIT.findall(text)]
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def test_docs_exist():
    assert (ROOT / "docs").is_dir() and len(PAGES) > 1


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    assert broken(page) == []


def test_checker_catches_broken_links(tmp_path):
    (tmp_path / "a.md").write_text("# Title here\n\n[ok](a.md#title-here) [gone](b.md)\n"
                                   "[anchor](a.md#nowhere) ![img](c.png) [web](https://x.y/z)\n"
                                   "[wrapped](a.md#title-\nhere)\n"
                                   "```\n[in code](d.md)\n```\n")
    assert broken(tmp_path / "a.md") == ["a.md#title- here: target split across lines",
                                         "b.md: no such file",
                                         "a.md#nowhere: no heading #nowhere in a.md",
                                         "c.png: no such file"]

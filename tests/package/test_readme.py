"""The Python examples of the README and the docs run as written (so the pages stay true)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_python_examples_run():
    ran = 0
    for page in PAGES:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            exec(compile(block, str(page), "exec"), {})
            ran += 1
    assert ran, "the README and docs lost their python examples"

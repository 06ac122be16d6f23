"""The README's library example runs as written (so the README stays true)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README lost its python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})

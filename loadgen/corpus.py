"""Text outside the draft's training domain, from what is installed: the Python standard
library's own source files (the interpreter running this), no download.

Two workloads are built on it (workload.py): long documents with questions about them
(``longctx``) and a stream whose mix moves from the draft's own prompts to Python code
(``shift``). Deterministic for a seed and a Python version (the sources are the
interpreter's; 3.11 on the dev machines).
"""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from collections.abc import Callable
from pathlib import Path

# Pure-Python standard library modules, a fixed list (sorted): code of many styles.
MODULES = ("argparse", "ast", "base64", "bisect", "calendar", "configparser", "csv",
           "dataclasses", "difflib", "email.parser", "fractions", "ftplib", "functools",
           "gettext", "heapq", "html.parser", "http.client", "inspect", "ipaddress",
           "json.decoder", "json.encoder", "logging", "mailbox", "optparse", "pathlib",
           "pprint", "queue", "random", "shlex", "shutil", "smtplib", "statistics",
           "string", "tarfile", "textwrap", "threading", "tokenize", "traceback",
           "urllib.parse", "uuid", "wave", "zipfile")

# How much text to gather before cutting: documents of these sources run 2.5-4.5
# characters a token under SmolLM2's tokenizer (median 3.9; 200 documents, seeds 0-199,
# 2026-11-26), so this much text usually holds the tokens asked for, and document()
# gathers more when it does not.
GATHER_CHARS_PER_TOKEN = 4.8

_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.M)
_CLASS = re.compile(r"^class\s+([A-Za-z_]\w*)", re.M)


@functools.cache
def sources() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(module, its source lines) for every module of MODULES this Python has."""
    out = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        out.append((name, tuple(Path(spec.origin).read_text(encoding="utf-8").splitlines())))
    if not out:
        raise RuntimeError("no standard library source found (a Python without .py files?)")
    return tuple(out)


def code_snippet(rng: random.Random, lines: tuple[int, int] = (10, 20)) -> tuple[str, str]:
    """(module, a run of ``lines`` source lines starting at a def or class)."""
    name, src = rng.choice(sources())
    starts = [i for i, ln in enumerate(src) if ln.lstrip().startswith(("def ", "class "))]
    a = rng.choice(starts) if starts else 0
    n = rng.randint(*lines)
    return name, "\n".join(src[a: a + n]).rstrip()


CODE_ASKS = ("Continue this Python code:", "Complete the following Python code:",
             "Write the rest of this Python function:",
             "Here is some Python code. Continue it:")


def code_prompt(rng: random.Random) -> str:
    """A code-continuation request over a standard-library snippet."""
    _, code = code_snippet(rng)
    return f"{rng.choice(CODE_ASKS)}\n\n```python\n{code}\n"


def document(rng: random.Random, tokens: int,
             cut: Callable[[str, int], str | None]) -> tuple[str, str]:
    """(module, source lines from a random top-level line of one module, on through others
    when it is too short, cut to at most ``tokens`` tokens by ``cut``
    (tokens.line_cutter): whole lines, as many as fit)."""
    lines: list[str] = []
    first = None
    size, want = 0, tokens * GATHER_CHARS_PER_TOKEN
    while True:
        while size < want:
            name, src = rng.choice(sources())
            first = first or name
            tops = [i for i, ln in enumerate(src) if ln[:1].isalpha() or ln.startswith("@")]
            a = rng.choice(tops[: max(1, len(tops) // 2)]) if tops else 0
            for ln in src[a:]:
                lines.append(ln)
                size += len(ln) + 1
                if size >= want:
                    break
            lines.append("")
        doc = cut("\n".join(lines), tokens)
        if doc is not None:
            return first, doc
        want *= 1.25  # sparse text: gather a quarter more and cut again


def question(rng: random.Random, doc: str) -> str:
    """A question the document answers: about one of its functions or classes, else a
    summary."""
    funcs = _DEF.findall(doc)
    classes = _CLASS.findall(doc)
    kinds = ["summary", "list"] + ["function"] * bool(funcs) + ["class"] * bool(classes)
    kind = rng.choice(kinds)
    if kind == "function":
        return f"What does the function `{rng.choice(funcs)}` in the code above do?"
    if kind == "class":
        return f"What is the class `{rng.choice(classes)}` above for, and how is it used?"
    if kind == "list":
        return "List the functions defined in the code above, one line each."
    return "Summarize what the code above does in a few sentences."

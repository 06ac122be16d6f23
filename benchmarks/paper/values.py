"""The paper's figure values, read from the kit's paper_results.md (issue 19).

The kit writes each figure's numbers as a bold caption, "**<model> — <metric> (<unit>)**
(x = <axis>)", followed by a markdown table: a header row of x values, then one row per
system. This reads every such table into {(figure, pair, metric): {system: {x: value}}}.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.paper.kit import PAPER_NAME

_CAPTION = re.compile(r"^\*\*(?P<model>[^*]+?) — (?P<metric>[^*(]+?)(?: \([^)]*\))?\*\*")
_FIGURE = re.compile(r"^#+ Fig\. (?P<fig>\d+)")
_PAIR = {"Llama-3.1-70B-Instruct": "llama", "Qwen2.5-32B-Instruct": "qwen"}
_METRIC = {"SLO attainment": "attainment", "goodput": "goodput",
           "mean accepted tokens per request per verification": "tokens_per_step"}
_SYSTEM = {v: k for k, v in PAPER_NAME.items()}


def _x(cell: str) -> float:
    cell = cell.strip()
    return float(cell[:-1]) / 100 if cell.endswith("%") else float(cell)


def read(path: Path) -> dict[tuple[int, str, str], dict[str, dict[float, float]]]:
    lines = path.read_text().splitlines()
    out: dict = {}
    figure = None
    for i, line in enumerate(lines):
        if m := _FIGURE.match(line):
            figure = int(m["fig"])
            continue
        m = _CAPTION.match(line)
        if not m or figure is None or m["model"] not in _PAIR:
            continue
        metric = _METRIC.get(m["metric"].strip())
        if metric is None:
            continue
        j = i + 1
        while not lines[j].startswith("|"):
            j += 1
        xs = [_x(c) for c in lines[j].strip("|").split("|")[1:]]
        table = {}
        for row in lines[j + 2:]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip("|").split("|")]
            table[_SYSTEM[cells[0]]] = {x: float(v) for x, v in zip(xs, cells[1:])}
        out[(figure, _PAIR[m["model"]], metric)] = table
    return out

"""`--iteration-log`: every decoding iteration's stats, one JSON line each, and the hook it
wraps still runs."""

import json

from adaserve.engine.core import IterationStats
from adaserve.server.iteration_log import chain_iteration_log
import argparse

from adaserve.server.options import add_args


def test_each_iteration_is_one_line_and_the_metrics_hook_still_runs(tmp_path):
    seen = []
    path = tmp_path / "it.jsonl"
    hook = chain_iteration_log(path, seen.append)
    rows = [IterationStats(0.05 + i, 0.04, 2, 1, 3, 2, 6 + i, 4, 16 * i, 300) for i in range(3)]
    for s in rows:
        hook(s)
    lines = [json.loads(x) for x in path.read_text().splitlines()]  # flushed per line
    assert [x["verify_tokens"] for x in lines] == [6, 7, 8]
    assert [x["seconds"] for x in lines] == [0.05, 1.05, 2.05]
    assert lines[1]["prefill_tokens"] == 16 and lines[0]["t"] <= lines[2]["t"]
    assert seen == rows


def test_the_flag_parses_to_a_path():
    p = argparse.ArgumentParser()
    add_args(p)
    args = p.parse_args(["--iteration-log", "x.jsonl"])
    assert str(args.iteration_log) == "x.jsonl"

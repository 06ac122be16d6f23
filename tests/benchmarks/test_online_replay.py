"""The online trainer replay (benchmarks/engine/online_replay.py): which positions a chain
would buffer, as DisagreementBuffer does, and the page's row."""

from __future__ import annotations

import numpy as np

from benchmarks.engine.online_replay import misses, render, summary
from benchmarks.shared.pages import module_of
from adaserve.loadgen.domain_shift import chain_tokens_per_step


def test_misses_are_the_refused_proposals_of_each_chain_step():
    a = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0], bool)
    # position 0 is the prefill's token; from 1: step accepts 1,2 and is refused at 3;
    # the next starts at 4 and accepts 4-7 (k = 4, the bonus at 8 had no proposal); the
    # next is refused at 9; the last at 10
    assert misses(a, 4).tolist() == [3, 9, 10]
    assert misses(np.ones(9, bool), 4).tolist() == []  # a full chain refuses nothing
    assert misses(np.zeros(4, bool), 4).tolist() == [1, 2, 3]
    # every step ends at a miss or a full chain: steps = misses + full chains (+ prefill)
    rng = np.random.default_rng(0)
    for _ in range(50):
        agree = rng.random(int(rng.integers(2, 40))) < 0.6
        m = misses(agree, 4)
        assert all(not agree[p] for p in m)
        assert len(m) <= len(agree) / chain_tokens_per_step(agree) + 1


def test_page_row_names_run_settings_and_last_window():
    entry = {"run": "results/domain-shift", "settings": "--head-rows 64",
             "result": {"windows": [0.0] * 9 + [12.5], "updates": 31, "swapped": 19,
                        "head_rows_moved": 120, "own": 1.17},
             "commit": "abc", "date": "2026-11-26T15:00", "machine": "vm"}
    page = render([entry])
    assert "- command: `python -m benchmarks.engine.online_replay --run RUN [settings]`" in page
    assert "- code version: commit abc" in page
    assert "| results/domain-shift | `--head-rows 64` | +0.0, +0.0, +0.0, +0.0, +12.5 | " \
           "**+12.5%** | 31 (19) | 120 | 1.17x | abc, 2026-11-26T15:00, vm |" in page


def test_the_page_names_its_module():
    assert module_of("python -m benchmarks.engine.online_replay --run RUN [settings]") == \
        "benchmarks/engine/online_replay.py"


def test_summary_pools_trainer_seeds_and_names_the_set():
    def entry(run, settings, last, mid):
        return {"run": run, "settings": settings, "commit": "abc", "date": "d", "machine": "m",
                "result": {"windows": [0.0] * 6 + [mid] * 3 + [last], "updates": 31,
                           "swapped": 20, "head_rows_moved": 0, "own": 1.1}}
    rows = summary([entry("results/domain-shift", "(defaults)", 10.0, 4.0),
                    entry("results/domain-shift", "--seed 1", 12.0, 6.0),
                    entry("results/domain-shift-share", "--replay-share 0.25 --seed 1", 20.0, 8.0),
                    entry("results/domain-shift-share", "--replay-share 0.25", 16.0, 8.0)])
    assert [(r["run"], r["set"], r["settings"], r["n"]) for r in rows] == [
        ("results/domain-shift", "dev", "(defaults)", 2),
        ("results/domain-shift-share", "test", "--replay-share 0.25", 2)]
    # windows 600-1000: three at mid and the last, averaged per seed, then over seeds
    assert abs(rows[0]["from_600"] - ((3 * 4 + 10) / 4 + (3 * 6 + 12) / 4) / 2) < 1e-9
    assert rows[0]["last"] == 11.0 and rows[1]["lasts"] == [20.0, 16.0]
    assert "| results/domain-shift-share | test | `--replay-share 0.25` | 2 | +9.0% | " \
           "+18.0% (+20.0, +16.0) |" in render([entry("results/domain-shift-share",
                                                     "--replay-share 0.25 --seed 1", 20.0, 6.0),
                                               entry("results/domain-shift-share",
                                                     "--replay-share 0.25", 16.0, 6.0)])

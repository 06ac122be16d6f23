"""The bench page's check on the machine's speed (loadgen/speed.py)."""

from __future__ import annotations

import json

from adaserve.loadgen.speed import plain_step_ms, speed_lines


def _log(path, t0, plain_s, n=6):
    rows = [{"t": t0 + i, "seconds": plain_s, "running": 1, "verify_tokens": 1,
             "prefill_tokens": 0} for i in range(n)]
    # steps that are not the plain step: drafting, two requests, a prefill
    rows += [{"t": t0 + 99, "seconds": 9.0, "running": 1, "verify_tokens": 4, "depth": 3,
              "prefill_tokens": 0},
             {"t": t0 + 99, "seconds": 9.0, "running": 2, "verify_tokens": 1, "prefill_tokens": 0},
             {"t": t0 + 99, "seconds": 9.0, "running": 1, "verify_tokens": 1, "prefill_tokens": 30},
             # drafted, then verified the root alone: not the plain step, and time wasted
             {"t": t0 + 99, "seconds": 9.0, "running": 1, "verify_tokens": 1, "depth": 2,
              "prefill_tokens": 0}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_the_plain_step_is_the_median_of_one_request_one_token_no_prefill(tmp_path):
    _log(tmp_path / "a.iterations.jsonl", 0, 0.040)
    # 9 decode steps (the prefill is not one), 1 drafted for nothing
    assert plain_step_ms(tmp_path / "a.iterations.jsonl") == (40.0, 6, 1 / 9)
    _log(tmp_path / "b.iterations.jsonl", 0, 0.040, n=4)  # too few to say
    assert plain_step_ms(tmp_path / "b.iterations.jsonl")[:2] == (None, 4)


def test_the_section_lists_servers_in_the_order_they_ran(tmp_path):
    _log(tmp_path / "serve-late-1.0.iterations.jsonl", 2000.0, 0.057)
    _log(tmp_path / "serve-early-1.0.iterations.jsonl", 1000.0, 0.037)
    lines = speed_lines(tmp_path)
    rows = [ln for ln in lines if ln.startswith("| serve-")]
    assert rows == ["| serve-early-1.0 | 37.0 (6) | 11% |", "| serve-late-1.0 | 57.0 (6) | 11% |"]
    assert speed_lines(tmp_path / "none") == []

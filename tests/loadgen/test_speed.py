"""The bench page's check on the machine's speed (loadgen/speed.py)."""

from __future__ import annotations

import json

from adaserve.loadgen.speed import plain_step_ms, speed_lines, work_shares


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
    # 2 of 9 decode steps drafted; the one prefilling iteration took 9 of 6 x 0.037 + 36 s
    assert rows == ["| serve-early-1.0 | 37.0 (6) | 11% | 22% | 25% |",
                    "| serve-late-1.0 | 57.0 (6) | 11% | 22% | 25% |"]
    assert speed_lines(tmp_path / "none") == []


def test_the_work_shares_count_drafting_decode_steps_and_prefilling_seconds(tmp_path):
    log = tmp_path / "c.iterations.jsonl"
    rows = [{"t": 0, "seconds": 0.05, "running": 4, "depth": 0, "prefill_tokens": 0},
            {"t": 1, "seconds": 0.05, "running": 4, "depth": 2, "prefill_tokens": 0},
            {"t": 2, "seconds": 0.30, "running": 4, "depth": 0, "prefill_tokens": 60},
            {"t": 3, "seconds": 0.20, "running": 0, "prefill_tokens": 64},  # prefill alone
            {"t": 4, "seconds": 0.01, "running": 0, "prefill_tokens": 0}]  # idle: not busy
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    drafted, prefilling = work_shares(log)
    assert drafted == 0.5 and abs(prefilling - 0.5 / 0.6) < 1e-12
    empty = tmp_path / "d.iterations.jsonl"
    empty.write_text("")
    assert work_shares(empty) == (None, None)

"""The domain-shift page (loadgen/shift_report.py): its windows and goal lines, and the
head rows line only for runs made with --head-rows (older runs' pages keep their text)."""

from __future__ import annotations

import json

import pytest

from adaserve.loadgen.shift_report import write_page


def _summary(head_rows: int | None) -> dict:
    rows = [{"i": i, "kind": "short" if i < 100 else "code", "served": 2.0 if i < 100 else 1.8,
             "off": 2.0 if i < 100 else 1.5} for i in range(200)]
    report = {"swapped": True, "agreement_before": 0.5, "agreement_after": 0.55,
              "train_seconds": 8.0}
    reports = [dict(report, head_rows=7), dict(report, head_rows=5),
               dict(report, swapped=False, agreement_after=0.4, head_rows=0)]
    if head_rows is None:  # a run made before the option: no field, no setting
        reports = [{k: v for k, v in r.items() if k != "head_rows"} for r in reports]
    settings = {"requests": 200, "batch": 16, "interval": 32, "max_tokens": 32, "seed": 0}
    if head_rows is not None:
        settings["head_rows"] = head_rows
    return {"rows": rows, "runs": [{"from": 0, "to": 200, "minutes": 1.0, "date": "d",
                                    "commit": "c", "machine": "m"}],
            "settings": settings, "reports": reports, "own": {"n": 4, "off": 2.0, "on": 2.2},
            "parity": {"checked": 4, "identical": 4}, "command": "adaserve bench ..."}


def test_page_counts_moved_head_rows_only_for_runs_that_moved_them(tmp_path):
    write_page(tmp_path, _summary(64))
    page = (tmp_path / "summary.md").read_text()
    assert "(at most 64 per update): 12 in the updates swapped in." in page
    assert "| 100-200 | 1.00 | 1.800 | 1.500 | +20.0% |" in page
    assert "| 1.200 | yes |" in page  # the last window meets +20%
    assert json.loads((tmp_path / "summary.json").read_text())["settings"]["head_rows"] == 64
    old = tmp_path / "old"
    old.mkdir()
    write_page(old, _summary(None))
    assert "Head rows" not in (old / "summary.md").read_text()
    # the training time names the threads it ran with: 2 for pieces recorded before the
    # field (the machine's), the recorded count otherwise
    assert "(inline, 2 threads): mean 8.0 s." in page
    one = _summary(64)
    one["runs"][0]["threads"] = 1
    write_page(old, one)
    assert "(inline, 1 thread): mean 8.0 s." in (old / "summary.md").read_text()


def test_trainer_flags_reach_the_run_settings_only_when_given():
    """`bench --experiment domain-shift`'s trainer flags: a run's settings (which a resumed
    piece must match) name a flag only when it was given, so older runs still resume."""
    import argparse

    from adaserve.loadgen.bench import add_args
    from adaserve.loadgen.domain_shift import _settings

    p = argparse.ArgumentParser()
    add_args(p)
    base = ["--experiment", "domain-shift", "--requests", "200", "--max-tokens", "32"]
    plain = _settings(p.parse_args(base))
    assert plain == {"requests": 200, "batch": 16, "interval": 32, "max_tokens": 32,
                     "seed": 0}
    given = _settings(p.parse_args(base + ["--steps", "16", "--anchor-weight", "0.5",
                                           "--head-rows", "64"]))
    assert given == dict(plain, steps=16, anchor_weight=0.5, head_rows=64)
    for flag, bad in [("--steps", "-1"), ("--interval", "0"), ("--head-rows", "many")]:
        with pytest.raises(SystemExit):  # the parser's error, before any model loads
            p.parse_args(base + [flag, bad])

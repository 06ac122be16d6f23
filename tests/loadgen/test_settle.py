"""loadgen/settle.py: the fixed matmul that settles the machine before a sweep's first
server runs for the time asked and reports a rate for every window (the real matmul)."""

from __future__ import annotations

import time

from adaserve.loadgen.settle import Settled, settle


def test_settling_runs_its_windows_and_reports_each_rate():
    t0 = time.monotonic()
    s = settle(0.6, window_s=0.2)
    took = time.monotonic() - t0
    assert 0.6 <= took < 3.0  # it ends after the last window that started in time
    assert 3 <= len(s.rates) <= 4 and all(r > 0 for r in s.rates)
    assert s.note().startswith("before the first server, 1 s of a fixed fp32 matmul")


def test_the_note_gives_the_first_and_last_windows_and_their_ratio():
    note = Settled(60.0, (1400.0, 1600.0, 1750.0)).note()
    assert "1400 a second in the first 5-s window, 1750 in the last (1.25x)" in note
    assert note.endswith("windows: 1400, 1600, 1750")
    assert "no window completed" in Settled(0.0, ()).note()


def test_the_flag_takes_seconds_and_refuses_the_rest():
    import argparse

    import pytest

    from adaserve.server.options import seconds
    assert seconds("0") == 0.0 and seconds("12.5") == 12.5
    for bad in ("-1", "nan", "inf", "a minute"):
        with pytest.raises(argparse.ArgumentTypeError):
            seconds(bad)

"""scheduler/lengths.py: what a decoding request can expect to decode still, from the
finished outputs' lengths only."""

from __future__ import annotations

import numpy as np

from adaserve.scheduler.lengths import MIN_SEEN, OutputLengths


def test_nothing_is_said_before_enough_longer_outputs_finished():
    lengths = OutputLengths()
    assert np.isnan(lengths.expected_left(np.array([0, 10]))).all()
    for _ in range(MIN_SEEN - 1):
        lengths.finished(50)
    assert np.isnan(lengths.expected_left(np.array([0]))).all()
    lengths.finished(50)
    assert lengths.expected_left(np.array([0, 49, 50])).tolist()[:2] == [50.0, 1.0]
    assert np.isnan(lengths.expected_left(np.array([50]))[0])  # none was longer than 50


def test_the_median_of_what_the_longer_outputs_had_left():
    lengths = OutputLengths()
    for n in [10] * 20 + [30] * 9 + [100] * 10:
        lengths.finished(n)
    # all 39 are longer than 5 and 20 of them are 10: 5 left; past 10, the 19 longer ones'
    # lower median is 100 (9 of 30, 10 of 100); past 30, only the ten of 100
    assert lengths.expected_left(np.array([5, 10, 30, 100])).tolist()[:3] == [5.0, 90.0, 70.0]
    assert np.isnan(lengths.expected_left(np.array([100]))[0])


def test_only_the_last_window_counts():
    lengths = OutputLengths(window=8)
    for n in [500] * 8 + [20] * 8:
        lengths.finished(n)
    assert lengths.expected_left(np.array([0]))[0] == 20.0

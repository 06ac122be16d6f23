"""The dispatcher never sends a request before its scheduled time.

gevent's timers count from the event loop's cached time, so a greenlet that worked for a
while before arming them (the dispatcher builds its plan first) has them fire early by that
long; the committed records show sends up to 9 ms early. wait_until re-reads the clock."""

from __future__ import annotations

import time

import pytest

from adaserve.loadgen.arrivals import wait_until


def test_a_sleep_that_ends_early_is_slept_again():
    now = [0.0]
    asked = []

    def early_sleep(s):  # wakes 5 ms early, as a timer armed 5 ms stale would
        asked.append(s)
        assert len(asked) < 1000
        now[0] += max(s - 0.005, 0.0) + 1e-4

    got = wait_until(1.0, lambda: now[0], early_sleep)
    assert got >= 1.0 and got == now[0]
    assert asked[0] == pytest.approx(1.0 - 0.002)  # the last 2 ms are spent in sleep(0)s
    assert asked[-1] == 0


def test_past_deadlines_return_at_once():
    assert wait_until(-1.0, lambda: 0.0, lambda s: pytest.fail("slept")) == 0.0


def test_gevent_timers_armed_after_work_are_held_to_their_time():
    gevent = pytest.importorskip("gevent")
    late = []

    def dispatcher():
        gevent.sleep(0.01)
        busy = time.monotonic() + 0.02
        while time.monotonic() < busy:  # work without yielding, as building the plan is
            pass
        t0 = time.monotonic()
        clock = lambda: time.monotonic() - t0  # noqa: E731

        def send(t):
            late.append(wait_until(t, clock, gevent.sleep) - t)

        gevent.joinall([gevent.spawn_later(t, send, t) for t in (0.01, 0.03, 0.05, 0.07)])

    gevent.spawn(dispatcher).join()
    assert len(late) == 4 and min(late) >= 0

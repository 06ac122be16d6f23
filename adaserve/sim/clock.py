"""Virtual time: the simulator's clock, advanced by the executor, read by the loop."""

from __future__ import annotations

import math


class VirtualClock:
    """Seconds since the simulation started. Pass ``clock.now`` to EngineCore as its clock."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"time only moves forward: advance({seconds!r})")
        self._t += seconds

    def advance_to(self, t: float) -> None:
        """Jump to t if it lies ahead (an idle engine waiting for the next arrival)."""
        self._t = max(self._t, float(t))

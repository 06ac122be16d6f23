"""Bounded waiting pool the engine admits requests from, ordered by urgency."""

from __future__ import annotations

import itertools
import math
from typing import Generic, Hashable, Iterator, TypeVar

from sortedcontainers import SortedList

T = TypeVar("T")

ORDERS = ("fifo", "deadline")


class PoolFull(Exception):
    """The pool is at capacity; the server answers 503 with Retry-After."""


class RequestPool(Generic[T]):
    """Waiting requests keyed by urgency; push, pop, peek and remove are O(log n).

    order="fifo": earliest arrival first. order="deadline": earliest arrival_s +
    tpot_slo_s * horizon_tokens first (best-effort requests use best_effort_tpot_s), so a
    strict request jumps ahead of relaxed ones that arrived shortly before it, while the
    arrival term keeps relaxed requests from starving. Ties go to the earlier push.
    """

    def __init__(
        self,
        capacity: int,
        order: str = "fifo",
        best_effort_tpot_s: float = 1.0,
        horizon_tokens: int = 8,
    ):
        if not _is_count(capacity) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1 (waiting requests), got {capacity!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        if not (math.isfinite(best_effort_tpot_s) and best_effort_tpot_s > 0):
            raise ValueError(
                f"best_effort_tpot_s must be finite and > 0 (seconds), got {best_effort_tpot_s!r}"
            )
        if not _is_count(horizon_tokens) or horizon_tokens < 1:
            raise ValueError(f"horizon_tokens must be an int >= 1, got {horizon_tokens!r}")
        self.capacity = capacity
        self.order = order
        self.best_effort_tpot_s = float(best_effort_tpot_s)
        self.horizon_tokens = horizon_tokens
        # Keys are (urgency, push sequence, id); the sequence is unique, so ids are never
        # compared and need not be orderable.
        self._keys: SortedList = SortedList()
        self._entries: dict[Hashable, tuple[tuple[float, int, Hashable], T]] = {}
        self._seq = itertools.count()

    def key(self, arrival_s: float, tpot_slo_s: float | None) -> float:
        """Urgency of a request under this pool's order (smaller pops first)."""
        if self.order == "fifo":
            return arrival_s
        tpot = self.best_effort_tpot_s if tpot_slo_s is None else tpot_slo_s
        return arrival_s + tpot * self.horizon_tokens

    def push(
        self, request_id: Hashable, item: T, arrival_s: float, tpot_slo_s: float | None
    ) -> None:
        """Add a waiting request; PoolFull when at capacity, ValueError on a duplicate id."""
        if request_id in self._entries:
            raise ValueError(f"request id {request_id!r} is already waiting; ids must be unique")
        if not math.isfinite(arrival_s):
            raise ValueError(f"arrival_s must be finite (seconds), got {arrival_s!r}")
        if tpot_slo_s is not None and not (math.isfinite(tpot_slo_s) and tpot_slo_s > 0):
            raise ValueError(
                f"tpot_slo_s must be finite and > 0, or None for best effort; got {tpot_slo_s!r}"
            )
        if self.full:
            raise PoolFull(f"waiting pool is full ({self.capacity} requests); retry later")
        sort_key = (float(self.key(arrival_s, tpot_slo_s)), next(self._seq), request_id)
        self._keys.add(sort_key)
        self._entries[request_id] = (sort_key, item)

    def peek(self) -> tuple[Hashable, T]:
        """Most urgent (id, item) without removing it; IndexError if empty."""
        if not self._keys:
            raise IndexError("peek from an empty RequestPool")
        request_id = self._keys[0][2]
        return request_id, self._entries[request_id][1]

    def pop(self) -> tuple[Hashable, T]:
        """Remove and return the most urgent (id, item); IndexError if empty."""
        if not self._keys:
            raise IndexError("pop from an empty RequestPool")
        request_id = self._keys.pop(0)[2]
        return request_id, self._entries.pop(request_id)[1]

    def remove(self, request_id: Hashable) -> T | None:
        """Drop a waiting request (abort); returns its item, or None if it is not waiting."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return None
        sort_key, item = entry
        self._keys.remove(sort_key)
        return item

    def ids(self) -> list[Hashable]:
        """Waiting ids, most urgent first."""
        return [request_id for _, _, request_id in self._keys]

    @property
    def full(self) -> bool:
        return len(self._entries) >= self.capacity

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.ids())


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

"""Routers in front of simulated replicas (issue 28): which replica gets a request.

A router sees only what a router in front of real replicas can know: the requests it sent
to each replica and which of them have finished (SGLang's router counts the same: a
worker's load is its in-flight requests), and the request's own SLO, which rides in its
headers. It never looks inside a replica's scheduler.

- ``round-robin``, ``random``, ``power-of-two``: sglang-router's policies of those names
  (its ``power_of_two`` compares two random workers' loads);
- ``least-load``: the least in-flight requests over all replicas (sglang-router's
  ``cache_aware`` falls back to this when workers are imbalanced);
- ``slo-aware``: the least *SLO demand* in flight, where a request weighs the tokens per
  iteration it needs to stay on its SLO, about ``baseline / SLO`` (seed 002 Eq. 3 at a
  baseline iteration: A(r) grows by t_iter / t per iteration), best effort a token
  ``BEST_EFFORT_WEIGHT``. A tight request counts more than a relaxed one, so urgent
  traffic spreads evenly instead of piling where relaxed requests happen to be few;
- ``class-split``: the worker-set idea of the issue, a class header choosing a subset of
  replicas (tight SLOs to a reserved share, the rest elsewhere), least-load within it;
- ``class-affinity:<slack>``: class-split whose requests cross to the other set when
  their own set's least-loaded replica has more than ``slack`` requests in flight beyond
  the other set's, so a fixed share cannot overload one set;
- ``picker:<capacity>``: the SLO-aware endpoint picker the real fleet's front runs
  (adaserve/picker), on the reports a replica gives of itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# a best-effort request still occupies a batch slot and budget: a small weight, not zero
BEST_EFFORT_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What the router knows of one replica when a request arrives."""

    in_flight: int  # requests sent there and not finished
    demand: float  # sum of in-flight requests' SLO weights (slo_weight)


def slo_weight(slo_ms: float | None, baseline_ms: float) -> float:
    """Tokens per baseline iteration a request needs to keep its TPOT SLO (>= 1 token for
    an SLO at or under the baseline)."""
    return BEST_EFFORT_WEIGHT if slo_ms is None else baseline_ms / slo_ms


class Router:
    """Base: ``choose`` picks a replica index for a request of weight ``weight``."""

    name = ""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)

    def choose(self, weight: float, loads: Sequence[ReplicaLoad]) -> int:
        raise NotImplementedError


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, n: int, seed: int = 0) -> None:
        super().__init__(n, seed)
        self.next = 0

    def choose(self, weight, loads):
        i = self.next
        self.next = (i + 1) % self.n
        return i


class RandomRouter(Router):
    name = "random"

    def choose(self, weight, loads):
        return int(self.rng.integers(self.n))


class PowerOfTwo(Router):
    name = "power-of-two"

    def choose(self, weight, loads):
        if self.n == 1:
            return 0
        a, b = self.rng.choice(self.n, size=2, replace=False)
        return int(a if loads[a].in_flight <= loads[b].in_flight else b)


def _argmin(keys: list[tuple]) -> int:
    """The replica with the smallest key; ties to the lowest index."""
    return min(range(len(keys)), key=keys.__getitem__)


class LeastLoad(Router):
    name = "least-load"

    def choose(self, weight, loads):
        return _argmin([(ld.in_flight,) for ld in loads])


class SloAware(Router):
    name = "slo-aware"

    def choose(self, weight, loads):
        return _argmin([(ld.demand, ld.in_flight) for ld in loads])


class ClassSplit(Router):
    """Requests weighing at least ``TIGHT`` (an SLO within 1.25x the baseline) go to the
    first ``share`` of the replicas, the rest to the others; least-load within the set.
    With one replica both sets are that replica."""

    name = "class-split"
    TIGHT = 0.8
    SHARE = 0.5

    def _sets(self, weight: float) -> tuple[range, range]:
        """(the request's own replica set, the other set)."""
        k = max(1, round(self.n * self.SHARE))
        tight, rest = range(k), range(k, self.n)
        return (tight, rest) if weight >= self.TIGHT or self.n == 1 else (rest, tight)

    @staticmethod
    def _least(ids: range, loads) -> int:
        return min(ids, key=lambda i: (loads[i].in_flight, i))

    def choose(self, weight, loads):
        return self._least(self._sets(weight)[0], loads)


class ClassAffinity(ClassSplit):
    """``class-split``, with a request crossing to the other set when its own set's
    least-loaded replica has more than ``slack`` requests in flight beyond the other set's
    least-loaded one. The share of tight traffic is whatever the clients send; a fixed
    split overloads one set whenever that share is far from SHARE, and with few replicas
    a set is one replica. Named ``class-affinity:<slack>``; slack 0 is least-load with
    ties broken toward the request's own set."""

    name = "class-affinity"
    DEFAULT_SLACK = 4

    def __init__(self, n: int, seed: int = 0, slack: float | None = None) -> None:
        super().__init__(n, seed)
        self.slack = self.DEFAULT_SLACK if slack is None else slack
        if not self.slack >= 0:
            raise ValueError(f"class-affinity's slack must be >= 0, got {slack}")

    def choose(self, weight, loads):
        own, other = self._sets(weight)
        a = self._least(own, loads)
        if not other:
            return a
        b = self._least(other, loads)
        return b if loads[a].in_flight - loads[b].in_flight > self.slack else a


class SloSpill(Router):
    """``slo-aware`` while some replica's SLO demand would stay within ``cap``; once none
    would, the request goes to the replica with the *most* demand. A fleet past its
    capacity then keeps all replicas but one within reach of their SLOs and lets one take
    the overflow, instead of pushing every replica past the point where it attains little
    (the fleet-level version of adaserve's triage option). Named ``slo-spill:<cap>``; the cap is a
    replica's capacity in demand units, which depends on the hardware and the workload
    (benchmarks/fleet/sim.py tunes it on a trace it does not report)."""

    name = "slo-spill"
    DEFAULT_CAP = 25.0

    def __init__(self, n: int, seed: int = 0, cap: float | None = None) -> None:
        super().__init__(n, seed)
        self.cap = self.DEFAULT_CAP if cap is None else cap
        if not self.cap > 0:
            raise ValueError(f"slo-spill's cap must be > 0, got {cap}")

    def choose(self, weight, loads):
        under = [i for i, ld in enumerate(loads) if ld.demand + weight <= self.cap]
        if under:
            return min(under, key=lambda i: (loads[i].demand, loads[i].in_flight, i))
        return max(range(len(loads)), key=lambda i: (loads[i].demand, -i))


class Picker(Router):
    """The shared SLO-aware picker (adaserve/picker), the one the real fleet's front runs:
    the replica with the largest predicted margin for the request's SLOs, from each
    replica's report (its requests per class, waiting or decoding, and its recent TPOT
    and TTFT). The fleet hands it reports (``reads_reports``) instead of loads. Named
    ``picker:<capacity>``, the demand one replica serves within its SLOs."""

    name = "picker"
    reads_reports = True
    DEFAULT_CAPACITY = 30.0

    def __init__(self, n: int, seed: int = 0, capacity: float | None = None) -> None:
        super().__init__(n, seed)
        self.capacity = self.DEFAULT_CAPACITY if capacity is None else capacity
        if not self.capacity > 0:
            raise ValueError(f"picker's capacity must be > 0, got {capacity}")

    def choose_reported(self, ask, reports, now: float, baseline_ms: float) -> int:
        from adaserve.picker import PickerConfig, pick

        got = pick(ask, reports, now, PickerConfig(baseline_ms, self.capacity))
        return 0 if got.replica is None else got.replica  # fresh reports: never None


ROUTERS: dict[str, Callable[[int, int], Router]] = {
    cls.name: cls for cls in (RoundRobin, RandomRouter, PowerOfTwo, LeastLoad, SloAware,
                              ClassSplit, ClassAffinity, SloSpill, Picker)}
# routers named <name>:<number>, the number their one parameter
PARAMETERS = {SloSpill.name: "cap", ClassAffinity.name: "slack", Picker.name: "capacity"}


def make_router(spec: str, n: int, seed: int = 0) -> Router:
    """A router by name, ``slo-spill:<cap>`` / ``class-affinity:<slack>`` with their
    parameter; ValueError naming the choices for an unknown one."""
    name, _, param = spec.partition(":")
    if name not in ROUTERS or (param and name not in PARAMETERS):
        raise ValueError(f"unknown router {spec!r}; choose from {', '.join(ROUTERS)} ("
                         + ", ".join(f"{k} takes a {v}: {k}:<{v}>" for k, v in PARAMETERS.items())
                         + ")")
    if n < 1:
        raise ValueError(f"a fleet needs >= 1 replica, got {n}")
    if param:
        try:
            value = float(param)
        except ValueError:
            raise ValueError(f"{spec!r}: the {PARAMETERS[name]} must be a number") from None
        return ROUTERS[name](n, seed, value)
    return ROUTERS[name](n, seed)

"""One simulated run (a policy over a workload, with a seed), as `adaserve simulate` and
`adaserve bench --backend sim` make it: build the simulated server, run the workload with
a progress bar, and keep what a client would have measured and what the run cost."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from adaserve.loadgen.records import Record
from adaserve.sim.driver import SimSetup, build, simulate
from adaserve.sim.workload import SimRequest


@dataclass(frozen=True, slots=True)
class SimRun:
    policy: str
    seed: int
    records: list[Record]  # one per request, by index
    budget: int  # the B the policy ran with
    iterations: int
    simulated_s: float  # virtual time at the last finish
    wall_s: float  # what simulating it took here

    def headline(self) -> str:
        return (f"{self.policy} (seed {self.seed}): {len(self.records)} requests, "
                f"{self.iterations} iterations, {self.simulated_s:.1f} s simulated in "
                f"{self.wall_s:.1f} s wall")


def shows_progress(quiet: bool) -> bool:
    """A bar only for a person watching: not with --quiet, not into a log or a pipe."""
    return not quiet and sys.stderr.isatty()


def run(setup: SimSetup, requests: Sequence[SimRequest], seed: int = 0,
        progress: bool = False, label: str = "") -> SimRun:
    """Simulate ``requests`` under ``setup``; ``progress`` draws finished requests on
    stderr. The simulated server refuses nothing: its context limit is the longest request
    and its queue holds them all (no 400s, and a 503 only from a policy that refuses a
    request predicted to miss its TTFT SLO: option refuse)."""
    if not requests:
        raise ValueError("no requests to simulate")
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    core, clock = build(setup, max_context=longest, max_waiting=len(requests))
    steps = 0
    t0 = time.perf_counter()
    with tqdm(total=len(requests), desc=label or setup.policy, unit="req", leave=False,
              disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:

        def on_step(done: int) -> None:
            nonlocal steps
            steps += 1
            bar.update(done - bar.n)

        records = simulate(core, clock, requests, seed=seed, on_step=on_step)
    return SimRun(setup.policy, seed, records, core.cfg.budget, steps, clock.now(),
                  time.perf_counter() - t0)


def check_policies(setup: SimSetup, policies: Iterable[str]) -> None:
    """Build each policy's simulated server once, so a misspelt name fails before the first
    run rather than after hours of the others; ValueError names it."""
    for policy in policies:
        try:
            build(dataclasses.replace(setup, policy=policy), max_context=2, max_waiting=1)
        except ValueError as e:
            raise ValueError(f"policy {policy!r}: {e}") from None

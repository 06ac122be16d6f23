"""Before a sweep measures: the machine settled before its first server, a discarded
warm-up run on a server of its own (``warm_up_run``), and each server warmed (``warm``).

On the 2-core Intel VM of 2026-11-28 the first server of three sweeps in four ran slower
than the ones after it: prefill steps of 32-47 prompt tokens in a median 229-259 ms
against 178-208 ms, 8.4-9.4 requests running on average against 4-6, and 26-30% end to
end at 1.5 req/s against 41-61% for the same policy on the sweep's later seeds. A fixed
matmul timed in 5-s windows after 2.5 minutes idle ran 1,340-1,540 a second for its first
25 s and about 1,750 after a minute (docs/loadgen.md, "A machine that sat idle"). With the
policies listed in one order, the same policy paid for it every time.

So before the first server starts, the bench keeps both cores busy with the same matmul
for ``SETTLE_S`` seconds and records its rate window by window, so the page shows whether
the machine had settled (the last windows level) or not. It touches no server: every
server starts from the same state, and only the machine is warmed. It is a minute's
insurance, not a proven cure: on the first sweep that settled (results/test-served-intel-
settled, seeds 146-147) the first server still had the lowest attainment on its seed at 1.5
req/s, and a slow server also came mid-sweep (docs/loadgen.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

SETTLE_S = 60.0  # a minute: the ramp above levelled within it
WINDOW_S = 5.0  # the rate is read per window, so one slow second shows as a dip, not noise
# the matmul: 48 rows (a prefill chunk's order of rows) through one of the target's MLP
# projections (576 -> 1536, SmolLM2-135M)
ROWS, DIM, HIDDEN = 48, 576, 1536


@dataclass(frozen=True, slots=True)
class Settled:
    """What settling measured: the matmuls a second in each window, in order."""

    seconds: float
    rates: tuple[float, ...]

    def note(self) -> str:
        """One line for the page: the first and last windows' rates, and every window."""
        if not self.rates:
            return f"machine settled for {self.seconds:.0f} s: no window completed"
        first, last = self.rates[0], self.rates[-1]
        return (f"before the first server, {self.seconds:.0f} s of a fixed fp32 matmul on every "
                f"thread settled the machine (loadgen/settle.py): {first:.0f} a second in the "
                f"first {WINDOW_S:.0f}-s window, {last:.0f} in the last ({last / first:.2f}x); "
                f"windows: {', '.join(f'{r:.0f}' for r in self.rates)}")


def settle(seconds: float = SETTLE_S, window_s: float = WINDOW_S) -> Settled:
    """Keep the machine busy with the fixed matmul for about ``seconds`` and return its
    rate in each window of ``window_s``."""
    import torch  # only a sweep with real servers pays for the import

    a, w = torch.randn(ROWS, DIM), torch.randn(DIM, HIDDEN)
    rates: list[float] = []
    end = time.monotonic() + seconds
    with torch.inference_mode():
        while time.monotonic() < end:
            t0, n = time.monotonic(), 0
            while (elapsed := time.monotonic() - t0) < window_s:
                for _ in range(10):
                    a @ w
                n += 10
            rates.append(n / elapsed)
    return Settled(seconds, tuple(rates))


def settle_first(seconds: float, runs_left: bool) -> Settled | None:
    """Before a sweep's first server: settle for ``seconds`` and print the note; None (no
    settling) where it asks none (a simulated sweep asks none) or has no run left to make."""
    if seconds <= 0 or not runs_left:
        return None
    settled = settle(seconds)
    print(f"[bench] {settled.note()}", flush=True)
    return settled


# Requests in the discarded warm-up run before a sweep's first measured server
WARMUP_REQUESTS = 40
# The warm-up run's seed, past the sweep's own (a sweep's seeds are --seed + repeat index)
WARMUP_SEED_OFFSET = 100_000


def warm_up_run(start: Callable[[], object], run: Callable[[object], dict],
                label: str) -> str:
    """Serve one load point on a server of its own before the sweep's first measured
    server and discard it (``start``: the server, stopped afterwards; ``run``: the load
    on it); returns the page's note.

    Settling warmed the cores only, and the sweep's first server kept paying (module
    docstring): over the 15 sweeps on the Intel VM up to 2026-11-29, the first-listed
    policy's end-to-end margin over the best baseline on its first seed was 5.6 points
    below its margin on the sweep's later seeds (paired, SE 3.0; docs/loadgen.md). The
    cause is not known; a first load can meet the whole path cold, not only the cores (the
    load generator's start, the HTTP stack, the page cache). So a whole run of the first
    point, on a server of a policy that carries nothing over (each measured server is a
    process of its own), takes that slot."""
    server = start()
    try:
        row = run(server)["rows"][-1]
    finally:
        server.stop()
    note = (f"before the first measured server, a warm-up run ({label}) was served and "
            f"discarded (loadgen/settle.py): attainment {row['attainment']}")
    print(f"[bench] {note}", flush=True)
    return note


def warm(server) -> None:
    """A few requests to a started server (a ServeProcess) so first-use costs
    (allocations, the latency calibration) are not charged to the first load point."""
    with httpx.Client(base_url=server.url, timeout=300) as c:
        for i in range(3):
            c.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"Warm-up {i}: say hi."}],
                "max_tokens": 16})

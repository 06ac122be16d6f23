"""The fleet's baseline when none is given (issue 39): `adaserve sglang fleet-cpu` run bare.

The replicas' default SLO classes are multiples of the target's plain decode step on
SGLang, which an ADASERVE replica does not measure (it always speculates). Without
``--baseline-ms`` after the dashes, the fleet takes the step saved for this model and
thread count in the cache (``sglang-cpu-baseline.json``), or else measures it once: one
`serve-cpu --algorithm none` with the replicas' flags and threads, timed over greedy
decodes of two lengths (the step is their difference over the extra tokens, which leaves
prefill and HTTP out), stopped, and saved. Either way the fleet says it in one line:
``{"fleet": "baseline", "ms": 81.3, "from": "measured" | "<saved file>"}``.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

FILE = "sglang-cpu-baseline.json"
SHORT, LONG, REPEATS = 1, 33, 3  # new tokens of the two timed requests, each REPEATS times


def saved_path() -> Path:
    from adaserve.engine.weights import cache_root

    return cache_root() / FILE


def key(replica_args: list[str], threads: int) -> str:
    flags = dict(zip(replica_args, replica_args[1:]))
    return f"{flags.get('--model', 'default')} threads={threads}"


def saved(path: Path, k: str) -> float | None:
    try:
        return float(json.loads(path.read_text())[k]["ms"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: Path, k: str, ms: float) -> None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    doc[k] = {"ms": round(ms, 3), "date": dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), "how": f"plain SGLang greedy decode, ({LONG} - {SHORT}) tokens, "
        f"median of {REPEATS}"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def measure(replica_args: list[str], env: dict[str, str], log: Path,
            timeout_s: float) -> float:
    """SGLang's plain decode step (ms) with these replica flags, on a server started
    for it and stopped after."""
    import httpx

    from adaserve.sglang.cpu.process import ServerProcess

    argv = [sys.executable, "-m", "adaserve.cli", "sglang", "serve-cpu", *replica_args,
            "--algorithm", "none", "--host", "127.0.0.1"]
    server = ServerProcess(argv, log, env=env, timeout_s=timeout_s)
    try:
        def timed(n: int) -> float:
            t0 = time.perf_counter()
            r = httpx.post(server.url + "/generate", timeout=600, json={
                "text": "The history of the city", "sampling_params": {
                    "temperature": 0, "max_new_tokens": n, "ignore_eos": True}})
            r.raise_for_status()
            return time.perf_counter() - t0

        timed(LONG)  # warm
        steps = [(timed(LONG) - timed(SHORT)) / (LONG - SHORT) for _ in range(REPEATS)]
        return 1e3 * statistics.median(steps)
    finally:
        server.stop()

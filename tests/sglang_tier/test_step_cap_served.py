"""cap in a served SGLang (adaserve/sglang/step_cap.py, rounds.py): `adaserve sglang serve-cpu
--policy adaserve:cap=on` with four request slots and its iteration log.

Four relaxed requests at once and then one alone teach its scheduler how long a decode
round takes at four requests and at one (nothing is capped before two sizes are
measured). Then four urgent requests at once (an 80-ms TPOT SLO, shorter than any round on
this CPU): with one running, the round predicted with a second is past the SLO, so they
decode one at a time. Four relaxed requests at once after them decode together: the cap
reads the SLOs held, not a fixed size."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    from servers import CLASSES, PREFILL, SHAPE, Server

    logdir = tmp_path_factory.mktemp("cap")
    s = Server("cap", [*SHAPE, "--policy", "adaserve:cap=on", "--slo-classes", CLASSES,
                       "--default-class", "relaxed", *PREFILL, "--max-running-requests", "4",
                       "--iteration-log", str(logdir / "iterations.jsonl")],
               {}, logdir)
    s.iterations = logdir / "iterations.jsonl"
    yield s
    assert s.alive(), s.tail()
    s.stop()


def burst(server, cls: str, n: int) -> None:
    with ThreadPoolExecutor(n) as pool:
        replies = list(pool.map(lambda i: server.generate(
            f"Story number {i}: once upon a time", headers={"X-SLO-Class": cls}), range(n)))
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]


def running(server, since: int) -> list[int]:
    """The batch size of every decoding iteration logged after the first ``since``."""
    lines = server.iterations.read_text().splitlines()
    return [json.loads(line)["running"] for line in lines[since:]]


def test_tight_requests_decode_one_at_a_time_and_loose_ones_together(capped):
    burst(capped, "relaxed", 4)
    burst(capped, "relaxed", 1)
    taught = running(capped, 0)
    assert max(taught) == 4 and taught.count(1) >= 3  # both sizes measured
    mark = len(taught)
    burst(capped, "urgent", 4)
    tight = running(capped, mark)
    assert tight and max(tight) == 1, tight
    mark += len(tight)
    burst(capped, "relaxed", 4)
    assert max(running(capped, mark)) >= 2

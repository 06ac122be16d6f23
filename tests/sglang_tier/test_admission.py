"""The policy's admit=deadline inside SGLang (adaserve/sglang/admission.py): SGLang's own
SchedulePolicy, ordering a queue of SGLang's own requests, through the plugin's hook as
SGLang's loader installs it, in a scheduler context published from a resolved ADASERVE
launch (the config-only checkpoint stands in for the models)."""

from __future__ import annotations

import time
from array import array

import pytest
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

from adaserve.server.slo_ttft import PrefillRate, default_ttft_ms
from adaserve.sglang.admission import ttft_slos

CHUNK = 256


@pytest.fixture(autouse=True)
def env(slo_env):
    slo_env("20", "100")


def scheduler(model, algorithm: str | None = "ADASERVE"):
    """The scheduler process's published settings of a resolved launch."""
    kw = {"speculative_algorithm": algorithm, "speculative_draft_model_path": model} \
        if algorithm else {}
    args = ServerArgs(model_path=model, device="cuda", chunked_prefill_size=CHUNK, **kw)
    args.resolve_once()
    return create_context(args, role="scheduler")


def request(rid: str, arrived_ago_s: float, ttft_ms: float | None = None,
            prompt_tokens: int = 8, **params) -> Req:
    custom = dict(params, **({} if ttft_ms is None else {"ttft_slo_ms": ttft_ms}))
    r = Req(rid, "", array("q", range(1, prompt_tokens + 1)),  # as the scheduler makes it
            SamplingParams(max_new_tokens=4, custom_params=custom))
    r.time_stats.scheduler_recv_time = time.perf_counter() - arrived_ago_s
    return r


def queue() -> list[Req]:
    """In SGLang's first-come order: "late" arrived 10 s ago with a 1-s TTFT SLO, "lenient"
    3 s ago with a minute, "tight" just now with 2 s."""
    return [request("late", 10.0, 1000), request("lenient", 3.0, 60_000),
            request("tight", 0.0, 2000)]


def ordered(model, algorithm: str | None = "ADASERVE") -> list[str]:
    waiting = queue()
    policy = SchedulePolicy("fcfs", RadixCache.create_simulated(), False, False, False)
    with use_context(scheduler(model, algorithm)):
        policy.calc_priority(waiting)
    return [r.rid for r in waiting]


def test_the_preset_admits_by_deadline_and_defers_the_late(model, monkeypatch):
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")
    # in time first, earliest deadline first (tight's is in 2 s, lenient's in 57 s), then
    # the one whose deadline has passed
    assert ordered(model) == ["tight", "lenient", "late"]


@pytest.mark.parametrize("policy", ["adaserve:admit=fifo", "adaserve-authors", "incremental"])
def test_first_come_policies_keep_sglangs_order(model, monkeypatch, policy):
    monkeypatch.setenv("ADASERVE_POLICY", policy)
    assert ordered(model) == ["late", "lenient", "tight"]


def test_a_plain_sglang_server_keeps_its_order(model, monkeypatch):
    monkeypatch.setenv("ADASERVE_POLICY", "adaserve")
    assert ordered(model, algorithm=None) == ["late", "lenient", "tight"]


def test_a_request_without_a_ttft_slo_gets_its_class_default_or_five_seconds():
    rs = [request("own", 0.0, 750.0),
          request("class", 0.0, prompt_tokens=300, slo_class="urgent", tpot_slo_ms=30.0),
          request("best-effort", 0.0, slo_class="best-effort")]
    want = default_ttft_ms(30.0, 20.0, 300, PrefillRate(CHUNK, 0.1)) / 1e3
    assert ttft_slos(rs, CHUNK).tolist() == pytest.approx([0.75, want, 5.0])
    # chunked prefill off: no prefill rate, so no class default either
    assert ttft_slos(rs, -1).tolist() == pytest.approx([0.75, 5.0, 5.0])


@pytest.fixture(scope="module")
def one_slot(logdir):
    """The preset on a server that decodes one request at a time, so the order it admits
    its waiting requests in is the order they finish in."""
    from servers import CLASSES, PREFILL, SHAPE, Server

    s = Server("admission", [*SHAPE, "--slo-classes", CLASSES, "--default-class", "relaxed",
                             *PREFILL, "--max-running-requests", "1"], {}, logdir)
    yield s
    s.stop()


@pytest.mark.slow  # a server of its own: about a minute to start
def test_a_served_request_with_the_earlier_deadline_is_admitted_first(one_slot):
    """A request holds the one slot; "lenient" (a 10-minute TTFT SLO) is sent, then
    "tight" (5 minutes). First come, first served would run lenient next; by deadline
    tight goes first, though it came later."""
    from concurrent.futures import ThreadPoolExecutor

    finished: list[str] = []

    def send(name: str, ttft_ms: float | None, tokens: int):
        extra = {} if ttft_ms is None else {"slo": {"ttft_ms": ttft_ms}}
        r = one_slot.generate("Once upon a time", max_new_tokens=tokens, **extra)
        assert r.status_code == 200, r.text
        finished.append(name)

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(send, "first", None, 48)
        time.sleep(3.0)  # it holds the slot (SGLang prefills it in well under a second)
        later = [pool.submit(send, "lenient", 600_000, 4)]
        time.sleep(1.0)
        later.append(pool.submit(send, "tight", 300_000, 4))
        for f in [first, *later]:
            f.result()
    assert finished == ["first", "tight", "lenient"], one_slot.tail()

"""Load and faults on loopback, bounded in count and time: many streaming clients, an
overloaded queue, clients killed mid-stream."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

CLASSES = ["urgent", "moderate", "relaxed", "best-effort"]


async def _stream_one(client: httpx.AsyncClient, i: int) -> dict:
    body = {"messages": [{"role": "user", "content": f"Count from {i} to {i + 5}."}],
            "max_tokens": 6, "stream": True, "temperature": 0.7, "seed": i,
            "stream_options": {"include_usage": True}}
    final = None
    async with client.stream("POST", "/v1/chat/completions", json=body,
                             headers={"X-SLO-Class": CLASSES[i % len(CLASSES)]}) as r:
        assert r.status_code == 200, await r.aread()
        done = False
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                ev = json.loads(line[6:])
                assert "error" not in ev, ev
                if not ev["choices"]:  # the usage chunk, after the finish_reason, ends it
                    final = ev
        assert done and final is not None
    return final


@pytest.mark.slow
def test_64_concurrent_streaming_clients_with_mixed_slos(live):
    async def main():
        async with httpx.AsyncClient(base_url=live.url, timeout=300) as c:
            return await asyncio.gather(*(_stream_one(c, i) for i in range(64)))

    finals = asyncio.run(main())
    assert len(finals) == 64
    for i, f in enumerate(finals):
        assert f["slo_class"] == CLASSES[i % len(CLASSES)]
        assert f["usage"]["completion_tokens"] >= 1
    assert live.pool_whole()
    with live.client() as c:
        text = c.get("/metrics").text
    assert 'adaserve_requests_total{attained="none",slo_class="best-effort"}' in text


def test_overload_gets_503_and_admitted_requests_finish(small):
    # 2 slots + a queue of 3: of 24 simultaneous requests some must be turned away
    async def one(c: httpx.AsyncClient, i: int) -> httpx.Response:
        return await c.post("/v1/completions", json={"prompt": f"Item {i}:", "max_tokens": 8})

    async def main():
        async with httpx.AsyncClient(base_url=small.url, timeout=300) as c:
            return await asyncio.wait_for(asyncio.gather(*(one(c, i) for i in range(24))), 240)

    rs = asyncio.run(main())
    codes = [r.status_code for r in rs]
    assert set(codes) <= {200, 503}, codes
    assert codes.count(503) >= 1 and codes.count(200) >= 2
    for r in rs:
        if r.status_code == 503:
            assert int(r.headers["Retry-After"]) >= 1
            assert r.json()["error"]["type"] == "server_overloaded"
        else:
            assert r.json()["usage"]["completion_tokens"] >= 1
    assert small.pool_whole()
    with small.client() as c:
        assert 'adaserve_rejected_requests_total{reason="queue_full"}' in c.get("/metrics").text


@pytest.mark.slow
def test_a_policy_that_refuses_answers_503_for_a_predicted_late_first_token(models):
    """adaserve:refuse=on, one slot. Two requests in a row teach it how often a slot frees
    (one 200-token output every few seconds); then six at once: the k-th waits behind k
    departures, so those predicted to get their first token past the 5-s TTFT SLO (k x the
    gap > 5 s, for some k <= 5 on any CPU that takes over a second for 200 tokens) are
    refused at the door, 503 with Retry-After, and the admitted ones finish."""
    from live_server import start

    srv, stop = start(models, policy="adaserve:refuse=on", max_batch=1)
    body = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True}

    async def one(c: httpx.AsyncClient) -> httpx.Response:
        return await c.post("/v1/completions", json=body)

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=300) as c:
            first = [await one(c), await one(c)]
            return first, await asyncio.wait_for(asyncio.gather(*(one(c) for _ in range(6))),
                                                 240)

    try:
        first, rs = asyncio.run(main())
        assert [r.status_code for r in first] == [200, 200]
        codes = [r.status_code for r in rs]
        assert set(codes) <= {200, 503} and codes.count(503) >= 1 and codes.count(200) >= 1
        for r in rs:
            if r.status_code == 503:
                assert int(r.headers["Retry-After"]) >= 1
                err = r.json()["error"]
                assert err["type"] == "server_overloaded" and "TTFT SLO" in err["message"]
            else:
                assert r.json()["usage"]["completion_tokens"] == 200
        with srv.client() as c:
            assert 'adaserve_rejected_requests_total{reason="ttft"}' in c.get("/metrics").text
        assert srv.pool_whole()
    finally:
        stop()


@pytest.mark.slow
def test_a_policy_that_refuses_tpot_answers_503_for_an_slo_shorter_than_the_pace(models):
    """adaserve:refuse_tpot=on. A request asking for 0.001 ms a token (shorter than any step
    of any machine) is admitted, as nothing that tight has run yet, and runs long enough to
    fill the door's window of iterations; then a second such request is refused at the
    door, 503 with Retry-After and the reason counted, and one asking for an hour a token
    is served beside it."""
    from live_server import start

    srv, stop = start(models, policy="adaserve:refuse_tpot=on")
    long = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True,
            "slo": {"tpot_ms": 0.001}}

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=300) as c:
            started = asyncio.Event()

            async def stream() -> int:
                n = 0
                async with c.stream("POST", "/v1/completions",
                                    json={**long, "stream": True}) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        n += line.startswith("data: {")
                        if n >= 60:  # the window is 32 decoding iterations
                            started.set()
                return n

            running = asyncio.create_task(stream())
            await asyncio.wait_for(started.wait(), 240)
            body = {"prompt": "Hello", "max_tokens": 8}
            tight = await c.post("/v1/completions", json={**body, "slo": {"tpot_ms": 0.001}})
            loose = await c.post("/v1/completions", json={**body, "slo": {"tpot_ms": 3600000}})
            return tight, loose, await running

    try:
        tight, loose, first = asyncio.run(main())
        assert first >= 60 and loose.status_code == 200
        assert tight.status_code == 503 and int(tight.headers["Retry-After"]) >= 1
        err = tight.json()["error"]
        assert err["type"] == "server_overloaded" and "TPOT SLO of 0.001 ms" in err["message"]
        with srv.client() as c:
            assert 'adaserve_rejected_requests_total{reason="tpot"}' in c.get("/metrics").text
        assert srv.pool_whole()
    finally:
        stop()


def test_clients_killed_mid_stream_leak_nothing(live):
    rng = random.Random(0)

    async def killed(c: httpx.AsyncClient, i: int) -> None:
        body = {"prompt": f"Tell a long story number {i}.", "max_tokens": 200, "stream": True,
                "ignore_eos": True}
        async with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            n = 0
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    n += 1
                    if n >= rng.randint(1, 4):
                        break  # leaving the block closes the connection mid-stream

    async def main():
        for _ in range(3):  # waves of 8 clients that hang up
            async with httpx.AsyncClient(base_url=live.url, timeout=120) as c:
                await asyncio.gather(*(killed(c, i) for i in range(8)))

    asyncio.run(main())
    assert live.pool_whole(wait_s=20)
    with live.client() as c:
        assert c.get("/health").status_code == 200
        assert c.post("/v1/completions", json={"prompt": "still here", "max_tokens": 2}
                      ).status_code == 200

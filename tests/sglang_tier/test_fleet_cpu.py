"""A fleet end to end on this CPU (issue 28): `adaserve sglang fleet-cpu --replicas 2`, two
real `serve-cpu` replicas running ADASERVE behind SGLang's own router (sglang-router
0.3.2, round robin) and the SLO front, over real HTTP:

- the bare router drops every SLO a client states (the X-SLO-* headers, custom_params, the
  body `slo`): the replica serves the default class. Why the front exists;
- through the fleet, per-request SLO headers, `sampling_params.custom_params` and the body
  `slo` reach the replica that serves the request: its report says so and exactly one
  replica's `/metrics` counts it; so does a TTFT SLO (body `slo.ttft_ms`, X-SLO-TTFT-MS),
  judged by the replica, its report reaching the client;
- the body `slo` sent to a replica directly is honoured too (the contract on SGLang's
  routes);
- a bad SLO is a 400 through the router, and the fleet keeps serving;
- greedy output through the fleet is identical to one replica's, streaming too;
- a replica killed mid-run: the clients see errors only for requests that were on it
  (counted), the other replica keeps serving, and the router stops sending to it;
- stopping the fleet stops every process it started.

Lean, for CI on two cores: 16-32 new tokens, a handful of requests."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from adaserve.sglang.cpu.fleet import FleetProcess, group_alive, shared_memory_of
from adaserve.sglang.cpu.process import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three prime numbers:",
           "Once upon a time"]
REPLICA_ARGS = ["--max-running-requests", "8", "--max-total-tokens", "4096",
                "--steps", "3", "--topk", "2", "--draft-tokens", "4", "--budget", "6",
                "--slo-classes", "urgent=1,relaxed=100000,best-effort",
                "--default-class", "relaxed"]
HEALTH_CHECK_S = 2


class Fleet(FleetProcess):
    """The fleet under test, with the requests and scrapes the tests make."""

    def __init__(self, logdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADASERVE_")
               or k == "ADASERVE_CACHE_DIR"}
        super().__init__(["--replicas", "2", "--port", str(free_port()), "--replica-port", "0",
                          "--router-metrics-port", "0", "--health-check-interval",
                          str(HEALTH_CHECK_S), "--log-dir", str(logdir), "--",
                          *REPLICA_ARGS], logdir / "fleet.out", env=env, cwd=ROOT)

    def generate(self, url: str, prompt: str, *, headers=None, max_new_tokens: int = 16,
                 **extra) -> httpx.Response:
        return httpx.post(url + "/generate", headers=headers or {}, timeout=600, json={
            "text": prompt, "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                "max_new_tokens": max_new_tokens}, **extra})

    def served(self, cls: str) -> list[float]:
        """Per replica: finished requests of class ``cls`` on its /metrics (dead: nan)."""
        out = []
        for k in sorted(self.replicas):
            try:
                text = httpx.get(self.replicas[k]["url"] + "/metrics", timeout=30).text
            except httpx.HTTPError:
                out.append(float("nan"))
                continue
            out.append(sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                           if ln.startswith("adaserve_requests_total{")
                           and f'slo_class="{cls}"' in ln))
        return out

    def running(self, k: int) -> float:
        text = httpx.get(self.replicas[k]["url"] + "/metrics", timeout=30).text
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                   if ln.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("fleet_cpu"))
    yield f
    f.stop()


def test_a_fresh_fleet_counts_no_request_of_its_own(fleet):
    """Before any client: SGLang's start-up warm-up (a /generate of 8 tokens) and the
    fleet's readiness checks (/health_generate, a token each) are not in the replicas'
    per-class counters."""
    for k in range(2):  # one more health generation each, now that metrics are up
        assert httpx.get(fleet.replicas[k]["url"] + "/health_generate", timeout=120) \
            .status_code == 200
    counted = [sum(fleet.served(c)[k] for c in ("urgent", "relaxed", "best-effort", "custom"))
               for k in range(2)]
    assert counted == [0.0, 0.0], counted


def test_the_fleets_server_info_lists_the_replicas_classes(fleet):
    """The load generator reads the classes from /server_info; through the front it gets
    a replica's (sglang-router 0.3.2 answers the route with an error of its own)."""
    via = httpx.get(fleet.url + "/server_info", timeout=60).json()
    own = httpx.get(fleet.replicas[0]["url"] + "/server_info", timeout=60).json()
    assert via["slo_classes"] == own["slo_classes"]
    assert {c["name"] for c in via["slo_classes"]} >= {"urgent", "relaxed"}


def _one_more_on_one_replica(before: list[float], after: list[float]) -> bool:
    return sorted(a - b for a, b in zip(after, before)) == [0.0, 1.0]


@pytest.mark.parametrize("cls, slo_ms, headers, custom", [
    ("urgent", 1, {"X-SLO-Class": "urgent"}, None),
    ("custom", 4321, {"X-SLO-TPOT-MS": "4321"}, None),
    ("urgent", 1, {}, {"slo_class": "urgent"}),
    ("custom", 1234, {}, {"tpot_slo_ms": 1234}),
])
def test_slo_reaches_the_serving_replica(fleet, cls, slo_ms, headers, custom):
    before = fleet.served(cls)
    extra = {} if custom is None else {"sampling_params": {
        "temperature": 0, "max_new_tokens": 8, "custom_params": custom}}
    r = fleet.generate(fleet.url, PROMPTS[0], headers=headers, max_new_tokens=8, **extra)
    assert r.status_code == 200, r.text
    meta = r.json()["meta_info"]
    assert meta["slo_class"] == cls and meta["slo_tpot_ms"] == slo_ms, meta
    assert _one_more_on_one_replica(before, fleet.served(cls)), (before, fleet.served(cls))


def _ttft_counted(fleet, attained: str) -> list[float]:
    """Per replica: requests of class relaxed counted as having met (or missed) their TTFT
    SLO on its /metrics."""
    out = []
    for k in sorted(fleet.replicas):
        text = httpx.get(fleet.replicas[k]["url"] + "/metrics", timeout=30).text
        out.append(sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                       if ln.startswith("adaserve_ttft_slo_requests_total{")
                       and f'attained="{attained}"' in ln and 'slo_class="relaxed"' in ln))
    return out


@pytest.mark.parametrize("route, headers, slo, ttft_ms", [
    ("/generate", {"X-SLO-Class": "relaxed", "X-SLO-TTFT-MS": "1"}, None, 1),
    ("/generate", {}, {"class": "relaxed", "ttft_ms": 1}, 1),
    ("/generate", {"x-slo-ttft-ms": "600000"}, None, 600000),
    ("/v1/chat/completions", {}, {"class": "relaxed", "ttft_ms": 1}, 1),
    ("/v1/chat/completions", {"X-SLO-TTFT-MS": "600000"}, None, 600000),
])
def test_a_ttft_slo_reaches_the_serving_replica_and_its_report_the_client(
        fleet, route, headers, slo, ttft_ms):
    """The TTFT SLO crosses the router on the front's tracestate member, beside the class;
    the replica judges it and the report comes back: slo_attained is every objective
    (relaxed's TPOT is never missed), and one replica's /metrics counts it."""
    attained = ttft_ms > 1000
    word = str(attained).lower()
    before = _ttft_counted(fleet, word)
    body = {"text": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": 4}} \
        if route == "/generate" else {
            "model": "default", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    if slo is not None:
        body["slo"] = slo
    r = httpx.post(fleet.url + route, headers=headers, json=body, timeout=600)
    assert r.status_code == 200, r.text
    report = r.json()["meta_info"] if route == "/generate" else r.json()
    assert report["slo_class"] == "relaxed" and report["slo_ttft_ms"] == ttft_ms, report
    assert report["ttft_attained"] is attained and report["slo_attained"] is attained
    assert _one_more_on_one_replica(before, _ttft_counted(fleet, word))


def test_the_bare_router_drops_every_slo_a_client_states(fleet):
    """sglang-router 0.3.2 forwards a short list of headers and rebuilds the body from its
    own types (no custom_params, no slo): each of these is served at the default class."""
    router = fleet.router["url"]
    for headers, extra in (({"X-SLO-Class": "urgent"}, {}),
                           ({}, {"slo": {"class": "urgent"}}),
                           ({}, {"sampling_params": {"temperature": 0, "max_new_tokens": 4,
                                                     "custom_params": {"slo_class": "urgent"}}})):
        r = fleet.generate(router, PROMPTS[0], headers=headers, max_new_tokens=4, **extra)
        assert r.status_code == 200, r.text
        assert r.json()["meta_info"]["slo_class"] == "relaxed", (headers, extra)
    # what the front writes does cross it
    r = fleet.generate(router, PROMPTS[0], headers={"tracestate": "adaserve=class:urgent"},
                       max_new_tokens=4)
    assert r.json()["meta_info"]["slo_class"] == "urgent"
    r = fleet.generate(router, PROMPTS[0], max_new_tokens=4,
                       headers={"tracestate": "adaserve=class:urgent;ttft-ms:900"})
    meta = r.json()["meta_info"]
    assert (meta["slo_class"], meta["slo_ttft_ms"]) == ("urgent", 900), meta
    # without the front the X-SLO-TTFT-MS header is dropped too
    r = fleet.generate(router, PROMPTS[0], max_new_tokens=4, headers={"X-SLO-TTFT-MS": "900"})
    assert r.json()["meta_info"]["slo_ttft_ms"] is None


@pytest.mark.parametrize("route", ["/generate", "/v1/chat/completions"])
@pytest.mark.parametrize("where", ["fleet", "replica"])
def test_body_slo_object_reaches_the_serving_replica(fleet, route, where):
    before = fleet.served("urgent")
    body = {"text": PROMPTS[1], "sampling_params": {"temperature": 0, "max_new_tokens": 8}} \
        if route == "/generate" else {
            "model": "default", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    url = fleet.url if where == "fleet" else fleet.replicas[0]["url"]
    r = httpx.post(url + route, json={**body, "slo": {"class": "urgent"}}, timeout=600)
    # /generate reports the class in meta_info; an OpenAI reply has no place for it, so
    # the replicas' per-class counters say which class the request was served at
    reported = r.json()["meta_info"]["slo_class"] if route == "/generate" and \
        r.status_code == 200 else "urgent"
    honoured = r.status_code == 200 and reported == "urgent" and \
        _one_more_on_one_replica(before, fleet.served("urgent"))
    assert r.status_code == 200, r.text
    assert honoured, (reported, before, fleet.served("urgent"))


@pytest.mark.parametrize("route, headers, body", [
    ("/generate", {"X-SLO-TPOT-MS": "-5"},
     {"text": "hi", "sampling_params": {"max_new_tokens": 4}}),
    ("/generate", {"X-SLO-Class": "platinum"},
     {"text": "hi", "sampling_params": {"max_new_tokens": 4}}),
    ("/generate", {}, {"text": "hi", "sampling_params": {
        "max_new_tokens": 4, "custom_params": {"tpot_slo_ms": "fast"}}}),
    ("/v1/chat/completions", {"X-SLO-TPOT-MS": "0"},
     {"model": "default", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
])
def test_bad_slo_is_a_400_through_the_router(fleet, route, headers, body):
    r = httpx.post(fleet.url + route, headers=headers, json=body, timeout=120)
    assert r.status_code == 400, r.text
    assert "slo" in r.text.lower() or "tpot" in r.text.lower(), r.text
    assert fleet.generate(fleet.url, PROMPTS[0], max_new_tokens=2).status_code == 200


def test_the_contract_table_gets_one_answer_from_a_replica_and_the_fleet(fleet):
    """contract_table.py's rows, sent to one replica directly and through the front and
    the router: the same status, SLO or refused field (named as the client sent it, though
    past the front the body's SLO rides on tracestate) and OpenAI's error shape
    (test_contract.py holds the replica to the embedded server with the same table, the
    context rows too)."""
    from contract_table import CONTEXT_ROWS, TABLE, outcome, send

    one = fleet.replicas[0]["url"]
    differ, seen = [], {}
    for name, route, body, headers in TABLE:
        if name in CONTEXT_ROWS:  # the replicas take the model's 8,192 tokens
            continue
        direct, through = (outcome(route, send(url, route, body, headers), name)
                           for url in (one, fleet.url))
        seen[name] = through
        if direct != through:
            differ.append((name, direct, through))
    assert not differ, json.dumps(differ, indent=1)
    assert seen["body-unknown-class"][:3] == (400, "param", "slo.class")
    assert seen["body-negative"][:3] == (400, "param", "slo.tpot_ms")
    assert seen["header-class"][:2] == (200, "urgent")
    assert seen["body-ttft"] == (200, "urgent", 1.0, 800.0)
    assert seen["header-ttft"][3] == 900.0
    assert seen["body-ttft-negative"][:3] == (400, "param", "slo.ttft_ms")
    assert fleet.generate(fleet.url, PROMPTS[0], max_new_tokens=2).status_code == 200


def test_greedy_output_through_the_router_equals_one_replica(fleet):
    one = fleet.replicas[0]["url"]
    direct = {}
    for p in PROMPTS[:3]:
        r = fleet.generate(one, p)
        assert r.status_code == 200, r.text
        direct[p] = r.json()["output_ids"]
    for p in PROMPTS[:3]:  # round robin: both replicas serve some
        r = fleet.generate(fleet.url, p, headers={"X-SLO-Class": "urgent"})
        assert r.status_code == 200 and r.json()["output_ids"] == direct[p], p
    with ThreadPoolExecutor(3) as pool:
        rs = list(pool.map(lambda p: fleet.generate(fleet.url, p), PROMPTS[:3]))
    assert [r.json()["output_ids"] for r in rs] == [direct[p] for p in PROMPTS[:3]]


def test_streaming_through_the_fleet_matches_and_reports(fleet):
    """SSE through the front and the router: the same greedy tokens as one replica, and
    the final chunk reports the request's class."""
    direct = fleet.generate(fleet.replicas[0]["url"], PROMPTS[3]).json()["output_ids"]
    last = None
    with httpx.stream("POST", fleet.url + "/generate", timeout=600,
                      headers={"X-SLO-Class": "urgent"}, json={
                          "text": PROMPTS[3], "stream": True, "sampling_params": {
                              "temperature": 0, "ignore_eos": True, "max_new_tokens": 16}}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[6:])
    assert last["output_ids"] == direct
    assert last["meta_info"]["slo_class"] == "urgent"


def test_an_openai_stream_through_the_fleet_ends_with_the_report(fleet):
    """The openai client, through the front and the router, the SLO in the body: the
    finish chunk and the usage chunk carry the replica's report."""
    from openai import OpenAI

    client = OpenAI(base_url=fleet.url + "/v1", api_key="none", timeout=600)
    chunks = list(client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Say hello."}], max_tokens=6,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_body={"slo": {"class": "urgent"}}))
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].model_extra["slo_class"] == "urgent", chunks
    assert chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].model_extra["slo_class"] == "urgent"


def test_round_robin_uses_both_replicas(fleet):
    before = fleet.served("best-effort")
    for p in PROMPTS[:4]:
        assert fleet.generate(fleet.url, p, headers={"X-SLO-Class": "best-effort"},
                              max_new_tokens=4).status_code == 200
    after = fleet.served("best-effort")
    assert [a - b for a, b in zip(after, before)] == [2.0, 2.0], (before, after)


def test_a_killed_replica_fails_only_its_requests(fleet):
    """Four 24-token requests through the fleet, two per replica; once replica 1 holds
    some, its whole process group is killed. Requests on replica 0 finish; those on
    replica 1 fail with an error status, or succeed if the router retried them on replica
    0: never a wrong answer. Then the router stops sending to replica 1."""
    results: list[tuple[str, int, dict | str]] = [None] * 4

    def send(i: int) -> None:
        try:
            r = fleet.generate(fleet.url, PROMPTS[i], max_new_tokens=24)
            results[i] = ("http", r.status_code, r.json() if r.status_code == 200 else r.text)
        except httpx.HTTPError as e:  # a transport error is an error the client sees too
            results[i] = ("transport", 0, repr(e))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.3)  # in order, so round robin alternates
    t0 = time.monotonic()
    while fleet.running(1) < 1 and time.monotonic() - t0 < 120:
        time.sleep(0.2)
    on_victim = fleet.running(1)
    assert on_victim >= 1
    os.killpg(fleet.replicas[1]["pid"], signal.SIGKILL)
    for t in threads:
        t.join(600)
    ok = [r for r in results if r[1] == 200]
    failed = [r for r in results if r[1] != 200]
    print(f"\nkilled replica 1 holding {on_victim:g} requests: {len(ok)} ok, {len(failed)} "
          f"failed: {[(kind, code, str(body)[:120]) for kind, code, body in failed]}")
    assert len(failed) <= on_victim, results
    for kind, code, body in failed:  # clear errors: a 5xx with a message, or a dropped link
        assert (kind == "http" and code >= 500 and body) or kind == "transport", (kind, code)
    for _, _, body in ok:
        assert body["meta_info"]["completion_tokens"] == 24
    time.sleep(4 * HEALTH_CHECK_S)  # two failed health checks take it out
    before = fleet.served("best-effort")[0]
    for p in PROMPTS:
        r = fleet.generate(fleet.url, p, headers={"X-SLO-Class": "best-effort"},
                           max_new_tokens=4)
        assert r.status_code == 200, r.text
    assert fleet.served("best-effort")[0] - before == len(PROMPTS)


def test_stopping_the_fleet_stops_every_part(tmp_path_factory, fleet):
    pids = [ln["pid"] for ln in fleet.parts]  # replicas, router, front
    shm = shared_memory_of(pids)  # what the parts have mapped from /dev/shm
    fleet.stop()
    assert fleet.proc.returncode == 0, fleet.out.read_text()[-2000:]
    assert not any(group_alive(pid) for pid in pids)  # each part leads its own group
    assert shm, "the replicas map no shared memory: the check below would be empty"
    assert not [p for p in shm if p.exists()]  # nothing left in /dev/shm

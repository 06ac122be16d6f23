"""refuse=on in a served SGLang (adaserve/sglang/refusal.py, error_shape.py, the stream
hooks): `adaserve sglang serve-cpu --policy adaserve:refuse=on` with one request slot.

Two requests in a row teach its scheduler how often a slot frees (one short output every
few seconds on this CPU). Then a long request holds the slot, and a request of each kind
(chat and /generate, plain and streamed) asking for its first token within 1 s is
predicted to wait a departure, so each is refused at the door: 503 before any stream
starts, OpenAI's error shape, and the Retry-After the embedded server sends, each counted
in /metrics as the embedded server counts it. A request
with a minute to spare is admitted beside them, and the long one finishes whole."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from adaserve.scheduler.admission import late_of, retry_after_s

pytestmark = pytest.mark.slow

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def door(tmp_path_factory):
    from servers import CLASSES, PREFILL, SHAPE, Server

    s = Server("refuse", [*SHAPE, "--policy", "adaserve:refuse=on", "--slo-classes", CLASSES,
                          "--default-class", "relaxed", *PREFILL,
                          "--max-running-requests", "1", "--enable-metrics"],
               {}, tmp_path_factory.mktemp("refuse"))
    yield s
    assert s.alive(), s.tail()
    s.stop()


def send(url: str, route: str, stream: bool, ttft_ms: int, tokens: int) -> httpx.Response:
    slo = {"class": "relaxed", "ttft_ms": ttft_ms}
    if route == "chat":
        path, body = "/v1/chat/completions", {
            "model": "m", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": stream,
            "slo": slo}
    else:
        path, body = "/generate", {
            "text": PROMPT, "stream": stream, "slo": slo, "sampling_params": {
                "max_new_tokens": tokens, "ignore_eos": True, "temperature": 0}}
    with httpx.stream("POST", url + path, json=body, timeout=600) as r:
        r.read()
        return r


def test_a_request_predicted_late_is_refused_on_every_route_before_its_stream(door):
    for _ in range(2):  # departures the door can read
        assert send(door.url, "generate", False, 60_000, 12).status_code == 200
    long = {}
    hold = threading.Thread(target=lambda: long.update(r=send(door.url, "generate", False,
                                                              60_000, 64)))
    hold.start()
    time.sleep(1.5)  # prefilled and decoding: the one slot is held
    for route, stream in (("chat", False), ("chat", True), ("generate", False),
                          ("generate", True)):
        r = send(door.url, route, stream, 1000, 8)
        assert r.status_code == 503, (route, stream, r.text)
        assert r.headers["content-type"].startswith("application/json")
        err = r.json()["error"]
        assert err["type"] == "server_overloaded" and "TTFT SLO of 1 s" in err["message"]
        assert int(r.headers["retry-after"]) == retry_after_s(late_of(err["message"])) >= 1
    metrics = httpx.get(door.url + "/metrics", timeout=60).text
    assert 'adaserve_rejected_requests_total{reason="ttft"} 4.0' in metrics
    patient = send(door.url, "chat", False, 60_000, 8)  # a minute to spare: admitted
    assert patient.status_code == 200 and patient.json()["usage"]["completion_tokens"] == 8
    hold.join(600)
    assert long["r"].status_code == 200
    assert long["r"].json()["meta_info"]["completion_tokens"] == 64

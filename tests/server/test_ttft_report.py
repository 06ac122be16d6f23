"""The TTFT SLO end to end on a live server with the real model pair: the class's default
(derived from the engine's profile and the request's prompt, as docs/contract.md states),
a TTFT the client names, and what every response, /metrics and /server_info report."""

from __future__ import annotations

import pytest
from live_server import BASELINE_MS
from sse import stream

CHAT = {"messages": [{"role": "user", "content": "Name three primary colors."}],
        "max_tokens": 6, "temperature": 0}
REPORT = ("slo_class", "slo_tpot_ms", "slo_ttft_ms", "tpot_ms", "ttft_ms", "ttft_attained",
          "slo_attained", "accepted_tokens_per_step")
LOOSE_TPOT = {"X-SLO-TPOT-MS": "600000"}  # ten minutes a token: a TPOT no run can miss


def _by_hand(live, tpot_ms: float, prompt_tokens: int) -> float:
    """docs/contract.md's rule, computed here from the profile's coefficients: the class's
    multiple of the baseline x 2 x (a chunk's forward + the prompt at the chunk's rate)."""
    target, chunk = live.engine.profile.target, live.engine.config.prefill_chunk
    chunk_s = target.gamma * chunk + target.delta  # a chunk of new tokens, nothing cached
    return tpot_ms / BASELINE_MS * 2 * (chunk_s + prompt_tokens * chunk_s / chunk) * 1e3


@pytest.fixture()
def profiled(live):
    if live.engine.profile is None:
        pytest.skip("no saved profile for the model pair: no default TTFT to check "
                    "(`adaserve profile` saves one)")
    return live


def test_the_classes_list_their_default_ttft(profiled):
    with profiled.client() as c:
        info = c.get("/server_info").json()
    ttft = {k["name"]: k["ttft_ms"] for k in info["slo_classes"]}
    assert ttft["best-effort"] is None
    for name, tpot in (("urgent", 100.0), ("moderate", 240.0), ("relaxed", 800.0)):
        assert ttft[name] == pytest.approx(_by_hand(profiled, tpot, 64), rel=1e-6), name
    rule = info["ttft_default"]
    assert rule["queue_slack"] == 2 and rule["prompt_tokens"] == 64
    assert rule["prefill_chunk"] == profiled.engine.config.prefill_chunk


def test_a_request_gets_its_class_default_for_its_own_prompt(profiled):
    with profiled.client() as c:
        r = c.post("/v1/chat/completions", json=CHAT, headers={"X-SLO-Class": "moderate"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert all(k in body for k in REPORT)
    n = body["usage"]["prompt_tokens"]
    assert body["slo_ttft_ms"] == pytest.approx(_by_hand(profiled, 240.0, n), abs=1e-3)
    assert body["ttft_attained"] == (body["ttft_ms"] <= body["slo_ttft_ms"])
    tpot_met = body["tpot_ms"] is None or body["tpot_ms"] <= 240.0
    assert body["slo_attained"] == (tpot_met and body["ttft_attained"])


def test_best_effort_has_no_ttft_slo(live):
    with live.client() as c:
        r = c.post("/v1/completions", json={"prompt": "Free", "max_tokens": 2},
                   headers={"X-SLO-Class": "best-effort"})
    body = r.json()
    assert (body["slo_ttft_ms"], body["ttft_attained"], body["slo_attained"]) == (None, None,
                                                                                  None)


def _count(text: str, name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(w in line for w in want))


def test_an_impossible_ttft_is_a_miss_everywhere_it_is_reported(live):
    """1 ms to the first token: no prefill is that fast. The TPOT is met, the TTFT is not,
    so the request is not attained: in the whole body, the streamed report, /generate's
    meta_info, and /metrics per class."""
    with live.client() as c:
        before = c.get("/metrics").text
        whole = c.post("/v1/chat/completions", json=CHAT,
                       headers={**LOOSE_TPOT, "X-SLO-TTFT-MS": "1"}).json()
        streamed = stream(c, "/v1/chat/completions", {**CHAT, "stream": True},
                          {**LOOSE_TPOT, "x-slo-ttft-ms": "1ms"})[-2]
        native = c.post("/generate", json={"text": "The capital of France is",
                                           "slo": {"tpot_ms": 600000, "ttft_ms": 1},
                                           "sampling_params": {"max_new_tokens": 6,
                                                               "temperature": 0}}
                        ).json()["meta_info"]
        in_class = c.post("/v1/completions", json={"prompt": "One two three", "max_tokens": 3,
                                                   "slo": {"class": "moderate", "ttft_ms": 1}}
                          ).json()
        after = c.get("/metrics").text
    for report in (whole, streamed, native, in_class):
        assert all(k in report for k in REPORT), report
        assert report["slo_ttft_ms"] == 1.0 and report["ttft_ms"] > 1.0
        assert report["ttft_attained"] is False and report["slo_attained"] is False
    for report in (whole, streamed, native):
        assert report["slo_class"] == "custom" and report["slo_tpot_ms"] == 600000.0
        assert report["tpot_ms"] is None or report["tpot_ms"] <= 600000.0  # the TPOT was met
    assert in_class["slo_class"] == "moderate"
    # per class: three custom misses and one moderate, in the TTFT count and in the
    # requests' (every objective) count
    for cls, n in (("custom", 3), ("moderate", 1)):
        for name in ("adaserve_ttft_slo_requests_total", "adaserve_requests_total"):
            assert (_count(after, name, slo_class=cls, attained="false")
                    - _count(before, name, slo_class=cls, attained="false")) == n, (cls, name)
    assert 'adaserve_ttft_attainment_ratio{slo_class="moderate"}' in after


def test_a_ttft_that_holds_is_attained(live):
    with live.client() as c:
        r = c.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 3,
                                            "slo": {"ttft_ms": "600000 ms"}},
                   headers=LOOSE_TPOT).json()
    assert (r["slo_ttft_ms"], r["ttft_attained"], r["slo_attained"]) == (600000.0, True, True)


def test_the_openai_client_reads_a_ttft_error(live):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2-135m", messages=CHAT["messages"],
                                       max_tokens=2, extra_headers={"x-slo-ttft-ms": "0"})
    err = e.value.body
    assert set(err) >= {"message", "type", "param", "code"} and err["param"] == "X-SLO-TTFT-MS"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2-135m", messages=CHAT["messages"],
                                       max_tokens=2, extra_body={"slo": {"ttft_ms": -3}})
    assert e.value.body["param"] == "slo.ttft_ms"

"""The HTTP contract against a live server with the real model pair."""

from __future__ import annotations

import pytest
from live_server import BASELINE_MS, LIVE_POLICY
from sse import stream

from adaserve.engine import SamplingParams

CHAT = {"messages": [{"role": "user", "content": "Name three primary colors."}],
        "max_tokens": 12, "temperature": 0}
REPORT = ("slo_class", "slo_tpot_ms", "slo_ttft_ms", "tpot_ms", "ttft_ms", "ttft_attained",
          "slo_attained", "accepted_tokens_per_step")


def test_information_endpoints(live):
    with live.client() as c:
        assert c.get("/health").json() == {"status": "ok"}
        models = c.get("/v1/models").json()
        assert models["data"][0]["id"] == "smollm2-135m"
        info = c.get("/server_info").json()
        assert info["policy"] == LIVE_POLICY and info["draft"] == "smollm2-135m-distilled"
        assert info["budget"] >= 1 and info["max_depth"] == 8 and info["max_width"] == 16
        assert info["baseline_latency_ms"] == BASELINE_MS
        # live_server.py gives kv_cache_mb=512 for max_context 256: the pool it made
        kv = info["kv_cache"]
        assert kv["kv_cache_mb"] == 512 and kv["slots"] == info["max_batch"] >= 1
        assert kv["mib"] <= 512 and kv["sized_from"] == "kv_cache_mb=512"
        classes = {c["name"]: c["tpot_ms"] for c in info["slo_classes"]}
        assert classes == {"urgent": 100.0, "moderate": 240.0, "relaxed": 800.0,
                           "best-effort": None}
        schema = c.get("/openapi.json").json()
        slo = schema["components"]["schemas"]["SLOField"]["properties"]
        assert {"tpot_ms", "class", "ttft_ms"} <= set(slo)


def test_the_openai_client_lists_and_retrieves_the_model(live):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["smollm2-135m"]
    model = client.models.retrieve("smollm2-135m")
    assert (model.id, model.object, model.owned_by) == ("smollm2-135m", "model", "adaserve")
    # a model not served here: 404 in OpenAI's shape, which the client raises as NotFound
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.body["code"] == "model_not_found" and "gpt-4o" in e.value.body["message"]
    with live.client() as c:
        assert c.get("/v1/models/org/name").json()["error"]["param"] == "model"


def test_chat_completion_reports_slo_and_matches_the_engine(live):
    with live.client() as c:
        r = c.post("/v1/chat/completions", json=CHAT, headers={"X-SLO-Class": "urgent"})
    assert r.status_code == 200, r.text
    body = r.json()
    text = body["choices"][0]["message"]["content"]
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] in (
        "stop", "length")
    usage = body["usage"]
    assert usage["completion_tokens"] >= 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert all(k in body for k in REPORT)
    assert body["slo_class"] == "urgent" and body["slo_tpot_ms"] == 100.0
    assert body["ttft_ms"] > 0 and body["accepted_tokens_per_step"] >= 1.0
    if usage["completion_tokens"] > 1:  # every objective: the TPOT, and the TTFT if it had one
        assert body["slo_attained"] == (body["tpot_ms"] <= 100.0
                                        and body["ttft_attained"] is not False)
    # greedy: the same text as the engine's own API gives for the same chat
    ids = live.engine.encode_chat(CHAT["messages"])
    direct = live.engine.generate([ids], SamplingParams(max_tokens=12))[0]
    assert text == direct.text


def test_chat_stream_ends_with_report_and_done(live):
    with live.client() as c:
        ev = stream(c, "/v1/chat/completions", {**CHAT, "stream": True},
                    {"X-SLO-TPOT-MS": "250"})
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] in ("stop", "length")
    assert final["slo_class"] == "custom" and final["slo_tpot_ms"] == 250.0
    assert all(k in final for k in REPORT)
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks)
    with live.client() as c:
        whole = c.post("/v1/chat/completions", json=CHAT).json()
    assert text == whole["choices"][0]["message"]["content"]
    # usage only when stream_options.include_usage asks for it, as OpenAI streams it
    assert all("usage" not in ch for ch in chunks)
    with live.client() as c:
        ev = stream(c, "/v1/chat/completions",
                    {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
                    {"X-SLO-TPOT-MS": "250"})
    *body, last = ev[:-1]
    assert all(ch["usage"] is None for ch in body) and last["choices"] == []
    assert last["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert all(last[k] == body[-1][k] for k in REPORT)  # the report ends the stream too


def test_the_openai_client_reads_the_streamed_slo_report_and_usage(live):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
    for include in (False, True):
        kw = {"stream_options": {"include_usage": True}} if include else {}
        chunks = list(client.chat.completions.create(
            model="smollm2-135m", messages=CHAT["messages"], max_tokens=8, temperature=0,
            stream=True, extra_headers={"X-SLO-Class": "urgent"}, **kw))
        last = chunks[-1].model_dump()
        assert last["slo_class"] == "urgent" and isinstance(last["slo_attained"], bool)
        assert all(k in last for k in REPORT)
        assert (chunks[-1].usage is not None) == include
        if include:
            assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
        else:
            assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_text_completion_and_generate(live):
    with live.client() as c:
        r = c.post("/v1/completions", json={"prompt": "The capital of France is",
                                            "max_tokens": 6, "temperature": 0})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["text"]
        ev = stream(c, "/v1/completions", {"prompt": "The capital of France is",
                                           "max_tokens": 6, "temperature": 0, "stream": True})
        assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == text
        g = c.post("/generate", json={"text": "The capital of France is",
                                      "sampling_params": {"max_new_tokens": 6,
                                                          "temperature": 0}})
        assert g.status_code == 200, g.text
        meta = g.json()["meta_info"]
        assert g.json()["text"] == text and meta["finish_reason"]["type"] in ("stop", "length")
        assert meta["slo_class"] == "relaxed" and all(k in meta for k in REPORT)
        ev = stream(c, "/generate", {"text": "The capital of France is", "stream": True,
                                     "sampling_params": {"max_new_tokens": 6, "temperature": 0,
                                                         "custom_params": {"slo_class": "urgent"}}})
        assert ev[-1] == "[DONE]" and ev[-2]["text"] == text  # SGLang streams the text so far
        assert ev[-2]["meta_info"]["slo_class"] == "urgent"


@pytest.mark.parametrize("body_slo,headers,expect", [
    ({"tpot_ms": 50}, {"X-SLO-TPOT-MS": "70", "X-SLO-Class": "urgent"}, ("custom", 50.0)),
    ({"class": "moderate"}, {"X-SLO-TPOT-MS": "70"}, ("moderate", 240.0)),
    (None, {"X-SLO-TPOT-MS": "70", "X-SLO-Class": "urgent"}, ("custom", 70.0)),
    (None, {"X-SLO-Class": "best-effort"}, ("best-effort", None)),
    (None, {}, ("relaxed", 800.0)),
    # null: not given here, as an absent header; the next source decides
    ({"tpot_ms": None}, {}, ("relaxed", 800.0)),
    ({"tpot_ms": None}, {"X-SLO-TPOT-MS": "70"}, ("custom", 70.0)),
    # --slo-classes takes chat=30ms; so do the header and the body (slo_value.py)
    (None, {"X-SLO-TPOT-MS": "30ms"}, ("custom", 30.0)),
    (None, {"X-SLO-TPOT-MS": "30 MS"}, ("custom", 30.0)),
    (None, {"X-SLO-TPOT-MS": "3e1"}, ("custom", 30.0)),
    ({"tpot_ms": "30ms"}, {}, ("custom", 30.0)),
    ({"tpot_ms": "30"}, {}, ("custom", 30.0)),
])
def test_slo_precedence(live, body_slo, headers, expect):
    body = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
    if body_slo is not None:
        body["slo"] = body_slo
    with live.client() as c:
        r = c.post("/v1/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert (r.json()["slo_class"], r.json()["slo_tpot_ms"]) == expect
    if expect[1] is None:
        assert r.json()["slo_attained"] is None


def test_best_effort_class_exports_no_attainment(live):
    """A class without an SLO has nothing to attain: no attainment series (a 0 reads as
    failure in Grafana); its requests are still counted, and their tokens are goodput."""
    with live.client() as c:
        r = c.post("/v1/completions", json={"prompt": "Free", "max_tokens": 2},
                   headers={"X-SLO-Class": "best-effort"})
        assert r.status_code == 200 and r.json()["slo_attained"] is None
        text = c.get("/metrics").text
        data = c.get("/dashboard/data").json()
    assert 'adaserve_slo_attainment_ratio{slo_class="best-effort"}' not in text
    assert 'adaserve_slo_attainment_ratio{slo_class="urgent"}' in text
    assert 'adaserve_requests_total{attained="none",slo_class="best-effort"}' in text
    assert 'adaserve_goodput_tokens_total{slo_class="best-effort"}' in text
    assert data["attainment"].get("best-effort") is None


def test_bench_reads_the_online_draft_counters_from_metrics(live):
    """bench's per-run online draft counts (loadgen/serve_process.online_counters) read
    the names /metrics exports: all three, 0 on a server that does not adapt."""
    from adaserve.loadgen.serve_process import ONLINE_KEYS, online_counters

    with live.client() as c:
        counters = online_counters(c.get("/metrics").text)
        info = c.get("/server_info").json()
    assert counters == dict.fromkeys(ONLINE_KEYS, 0.0)
    assert info["online_draft"] is None


def test_metrics_count_requests_per_class(live):
    with live.client() as c:
        before = c.get("/metrics").text
        c.post("/v1/completions", json={"prompt": "One two three", "max_tokens": 4},
               headers={"X-SLO-Class": "moderate"})
        text = c.get("/metrics").text
    for name in ("adaserve_requests_total", "adaserve_tpot_seconds_bucket",
                 "adaserve_ttft_seconds_bucket", "adaserve_slo_attainment_ratio",
                 "adaserve_goodput_tokens_total", "adaserve_accepted_tokens_per_step",
                 "adaserve_iteration_seconds_bucket", "adaserve_batch_tokens",
                 "adaserve_spec_depth", "adaserve_spec_width", "adaserve_running_requests",
                 "adaserve_waiting_requests"):
        assert name in text, name

    def count(t: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in t.splitlines()
                   if line.startswith('adaserve_requests_total{') and 'slo_class="moderate"' in line)

    assert count(text) == count(before) + 1
    assert 'adaserve_slo_attainment_ratio{slo_class="urgent"}' in text  # listed before use


def test_dashboard_page_and_data(live):
    with live.client() as c:
        c.post("/v1/completions", json={"prompt": "Dashboard", "max_tokens": 3})
        page = c.get("/dashboard")
        data = c.get("/dashboard/data").json()
    assert page.status_code == 200 and "<canvas" in page.text and "http" not in page.text.split(
        "<script>")[1].split("fetch(")[0]  # no external script or stylesheet
    assert data["finished"] and data["seconds"] and data["budget"] >= 1
    assert {c["name"] for c in data["classes"]} >= {"urgent", "moderate", "relaxed"}

"""The SLO report lands in SGLang's meta_info for a finished request, through the hooked
TokenizerManager method, from the request's real state objects."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from sglang.srt.managers import tokenizer_manager as tm
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.observability.req_time_stats import APIServerReqTimeStats
from sglang.srt.plugins import load_plugins

from adaserve.sglang.report import slo_report


def state(custom_params, created, first, finished):
    ts = APIServerReqTimeStats()
    ts.created_time, ts.first_token_time, ts.finished_time = created, first, finished
    obj = GenerateReqInput(text="hi", sampling_params={"custom_params": custom_params})
    return tm.ReqState(out_list=[], finished=True, event=asyncio.Event(), obj=obj,
                       time_stats=ts)


@pytest.mark.parametrize("custom, finished, attained", [
    ({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 10.0 + 0.5 + 9 * 0.019, True),
    ({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 10.0 + 0.5 + 9 * 0.021, False),
    ({"slo_class": "best-effort"}, 11.0, None),
])
def test_meta_info_gets_the_report(monkeypatch, custom, finished, attained):
    load_plugins()
    monkeypatch.setattr(tm, "get_spec", lambda: SimpleNamespace(speculative_num_draft_tokens=4))
    me = SimpleNamespace(rid_to_state={"r1": state(custom, 10.0, 10.5, finished)},
                         server_args=SimpleNamespace(speculative_algorithm="ADASERVE"))
    recv = SimpleNamespace(rids=["r1"], completion_tokens=[10], spec_verify_ct=[4],
                           spec_num_correct_drafts=[6], spec_num_cap_tokens=None,
                           spec_correct_drafts_histogram=None)
    meta: dict = {}
    tm.TokenizerManager._calculate_spec_decoding_metrics(me, meta, recv, 0)
    assert meta["spec_accept_length"] == 2.5  # SGLang's own metrics are still there
    assert meta["slo_class"] == custom["slo_class"]
    assert meta["slo_tpot_ms"] == custom.get("tpot_slo_ms")
    assert meta["tpot_ms"] == pytest.approx(1e3 * (finished - 10.5) / 9)
    assert meta["ttft_ms"] == pytest.approx(500.0)
    assert meta["slo_attained"] is attained
    assert meta["accepted_tokens_per_step"] == 2.5


@pytest.mark.parametrize("custom, attained, ttft_attained", [
    # the TPOT met (19 ms a token), the first token (500 ms) within or past its SLO
    ({"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 600.0}, True, True),
    ({"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 400.0}, False, False),
    # best effort with a TTFT SLO: that is its only objective
    ({"slo_class": "best-effort", "ttft_slo_ms": 400.0}, False, False),
    ({"slo_class": "best-effort", "ttft_slo_ms": 501.0}, True, True),
])
def test_slo_attained_is_every_objective_the_request_had(custom, attained, ttft_attained):
    r = slo_report(custom, 10, 4, 10.0, 10.5, 10.5 + 9 * 0.019)
    assert r["slo_ttft_ms"] == custom["ttft_slo_ms"] and r["ttft_ms"] == pytest.approx(500.0)
    assert r["ttft_attained"] is ttft_attained and r["slo_attained"] is attained
    # a TPOT miss is a miss whatever the TTFT
    if "tpot_slo_ms" in custom:
        assert slo_report(custom, 10, 4, 10.0, 10.5, 10.5 + 9 * 0.021)["slo_attained"] is False


def test_no_first_token_misses_a_ttft_slo_and_none_is_left_out():
    r = slo_report({"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 900.0},
                   0, 0, 10.0, 0.0, 11.0)
    assert r["ttft_ms"] is None and r["ttft_attained"] is False and r["slo_attained"] is False
    r = slo_report({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 10, 4, 10.0, 10.5, 10.6)
    assert r["slo_ttft_ms"] is None and r["ttft_attained"] is None


def _finish(custom, prompt_tokens, chunk, first=10.5):
    me = SimpleNamespace(rid_to_state={"r1": state(custom, 10.0, first, first + 9 * 0.019)},
                         server_args=SimpleNamespace(speculative_algorithm="ADASERVE",
                                                     chunked_prefill_size=chunk))
    recv = SimpleNamespace(rids=["r1"], completion_tokens=[10], spec_verify_ct=[4],
                           prompt_tokens=[prompt_tokens], spec_num_correct_drafts=[6],
                           spec_num_cap_tokens=None, spec_correct_drafts_histogram=None)
    meta: dict = {}
    tm.TokenizerManager._calculate_spec_decoding_metrics(me, meta, recv, 0)
    return meta


@pytest.fixture
def prefill(monkeypatch):
    """ADASERVE_BASELINE_MS 20 and ADASERVE_PREFILL_CHUNK_MS 100 (test inputs, not a
    measurement), read afresh."""
    from adaserve.sglang.slo import configured_prefill

    load_plugins()
    monkeypatch.setattr(tm, "get_spec", lambda: SimpleNamespace(speculative_num_draft_tokens=4))
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "20")
    monkeypatch.setenv("ADASERVE_PREFILL_CHUNK_MS", "100")
    configured_prefill.cache_clear()
    yield
    configured_prefill.cache_clear()


def test_a_request_without_a_ttft_slo_gets_its_class_default_for_its_prompt(prefill):
    """The embedded server's rule (slo_ttft.default_ttft_ms) over the configured baseline
    and prefill rate and SGLang's chunk: x1 with a 64-token prompt and a chunk of 128
    tokens in 100 ms is 2 x (100 + 64 x 100 / 128) = 300 ms."""
    from adaserve.server.slo_ttft import PrefillRate, default_ttft_ms

    meta = _finish({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 64, 128)
    assert meta["slo_ttft_ms"] == pytest.approx(300.0)
    assert meta["slo_ttft_ms"] == pytest.approx(default_ttft_ms(20.0, 20.0, 64,
                                                                PrefillRate(128, 0.1)))
    assert meta["ttft_attained"] is False and meta["slo_attained"] is False  # 500 ms
    meta = _finish({"slo_class": "moderate", "tpot_slo_ms": 48.0}, 64, 128)
    assert meta["slo_ttft_ms"] == pytest.approx(720.0)  # x2.4
    assert meta["ttft_attained"] is True and meta["slo_attained"] is True
    # scaled by its own prompt
    assert _finish({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 384, 128)["slo_ttft_ms"] \
        == pytest.approx(2 * (100 + 300))
    # the request's own TTFT SLO wins; best effort has no default; chunked prefill off
    # gives nothing to reason from
    assert _finish({"slo_class": "urgent", "tpot_slo_ms": 20.0, "ttft_slo_ms": 501.0}, 64,
                   128)["slo_ttft_ms"] == 501.0
    assert _finish({"slo_class": "best-effort"}, 64, 128)["slo_ttft_ms"] is None
    assert _finish({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 64, -1)["slo_ttft_ms"] is None


def test_without_a_configured_prefill_rate_there_is_no_default(prefill, monkeypatch):
    from adaserve.sglang.slo import configured_prefill

    monkeypatch.delenv("ADASERVE_PREFILL_CHUNK_MS")
    configured_prefill.cache_clear()
    meta = _finish({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 64, 128)
    assert meta["slo_ttft_ms"] is None and meta["ttft_attained"] is None
    assert meta["slo_attained"] is True  # the TPOT alone


@pytest.mark.parametrize("value", ["fast", "0", "-3", "nan", "inf"])
def test_a_bad_prefill_chunk_ms_stops_the_launch_naming_it(monkeypatch, value):
    from adaserve.sglang.slo import configured_prefill

    monkeypatch.setenv("ADASERVE_PREFILL_CHUNK_MS", value)
    configured_prefill.cache_clear()
    with pytest.raises(ValueError, match="ADASERVE_PREFILL_CHUNK_MS"):
        configured_prefill()
    configured_prefill.cache_clear()


def test_one_token_has_no_gap_to_miss():
    r = slo_report({"slo_class": "urgent", "tpot_slo_ms": 1.0}, 1, 1, 1.0, 2.0, 2.0)
    assert r["tpot_ms"] is None and r["slo_attained"] is True


def test_openai_bodies_carry_the_report_where_the_embedded_server_puts_it():
    """SGLang builds its chat body from meta_info and left the report out; the hook puts
    it at the top level of a non-streaming body on ADASERVE servers only."""
    from types import SimpleNamespace

    from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse, UsageInfo

    from adaserve.sglang.report import openai_response_hook

    meta = {"id": "r1", "slo_class": "urgent", "slo_tpot_ms": 20.0, "slo_ttft_ms": 900.0,
            "tpot_ms": 31.5, "ttft_ms": 120.0, "ttft_attained": True, "slo_attained": False,
            "accepted_tokens_per_step": 1.5}

    def build(self, request, ret, created):
        return ChatCompletionResponse(id="r1", created=created, model="m", choices=[],
                                      usage=UsageInfo(prompt_tokens=3, completion_tokens=5,
                                                      total_tokens=8))

    def serving(algorithm):
        return SimpleNamespace(tokenizer_manager=SimpleNamespace(
            server_args=SimpleNamespace(speculative_algorithm=algorithm)))

    out = openai_response_hook(build, serving("ADASERVE"), None, [{"meta_info": meta}], 7)
    body = json.loads(out.body)
    assert body["usage"]["completion_tokens"] == 5 and body["created"] == 7
    assert {k: body[k] for k in meta if k != "id"} == {k: v for k, v in meta.items() if k != "id"}
    plain = openai_response_hook(build, serving("STANDALONE"), None, [{"meta_info": meta}], 7)
    assert isinstance(plain, ChatCompletionResponse)  # another server's body, untouched


def test_a_stream_carries_the_report_on_its_finish_and_usage_chunks():
    from adaserve.sglang import report as rep

    rep._keep("r1", {"slo_class": "urgent", "slo_tpot_ms": 50.0, "slo_ttft_ms": 80.0,
                     "tpot_ms": 40.0, "ttft_ms": 90.0, "ttft_attained": False,
                     "slo_attained": False, "accepted_tokens_per_step": 1.5})
    sse = lambda doc: f"data: {json.dumps(doc)}\n\n"  # noqa: E731
    mid = sse({"id": "r1", "choices": [{"index": 0, "delta": {"content": "a"},
                                        "finish_reason": None}]})
    assert rep.with_report(mid) == mid  # a chunk before the end: as it came
    done = json.loads(rep.with_report(sse({"id": "r1", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "length"}]}))[6:])
    assert done["slo_class"] == "urgent" and done["slo_attained"] is False
    assert done["slo_ttft_ms"] == 80.0 and done["ttft_attained"] is False
    usage = json.loads(rep.with_report(sse({"id": "r1", "choices": [],
                                             "usage": {"completion_tokens": 8}}))[6:])
    assert usage["tpot_ms"] == 40.0 and usage["usage"]["completion_tokens"] == 8
    assert usage["ttft_attained"] is False
    # the usage chunk is the last: the report is let go; an unknown request is left alone
    assert "r1" not in rep._FINISHED
    other = sse({"id": "r2", "choices": [{"index": 0, "finish_reason": "stop"}]})
    assert rep.with_report(other) == other
    assert rep.with_report("data: [DONE]\n\n") == "data: [DONE]\n\n"

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


def test_one_token_has_no_gap_to_miss():
    r = slo_report({"slo_class": "urgent", "tpot_slo_ms": 1.0}, 1, 1, 1.0, 2.0, 2.0)
    assert r["tpot_ms"] is None and r["slo_attained"] is True


def test_openai_bodies_carry_the_report_where_the_embedded_server_puts_it():
    """SGLang builds its chat body from meta_info and left the report out; the hook puts
    it at the top level of a non-streaming body on ADASERVE servers only."""
    from types import SimpleNamespace

    from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse, UsageInfo

    from adaserve.sglang.report import openai_response_hook

    meta = {"id": "r1", "slo_class": "urgent", "slo_tpot_ms": 20.0, "tpot_ms": 31.5,
            "ttft_ms": 120.0, "slo_attained": False, "accepted_tokens_per_step": 1.5}

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

    rep._keep("r1", {"slo_class": "urgent", "slo_tpot_ms": 50.0, "tpot_ms": 40.0,
                     "ttft_ms": 90.0, "slo_attained": True, "accepted_tokens_per_step": 1.5})
    sse = lambda doc: f"data: {json.dumps(doc)}\n\n"  # noqa: E731
    mid = sse({"id": "r1", "choices": [{"index": 0, "delta": {"content": "a"},
                                        "finish_reason": None}]})
    assert rep.with_report(mid) == mid  # a chunk before the end: as it came
    done = json.loads(rep.with_report(sse({"id": "r1", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "length"}]}))[6:])
    assert done["slo_class"] == "urgent" and done["slo_attained"] is True
    usage = json.loads(rep.with_report(sse({"id": "r1", "choices": [],
                                             "usage": {"completion_tokens": 8}}))[6:])
    assert usage["tpot_ms"] == 40.0 and usage["usage"]["completion_tokens"] == 8
    # the usage chunk is the last: the report is let go; an unknown request is left alone
    assert "r1" not in rep._FINISHED
    other = sse({"id": "r2", "choices": [{"index": 0, "finish_reason": "stop"}]})
    assert rep.with_report(other) == other
    assert rep.with_report("data: [DONE]\n\n") == "data: [DONE]\n\n"

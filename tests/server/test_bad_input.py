"""Bad input: a clear OpenAI-shaped error with the right status, and the server serves on."""

from __future__ import annotations

import pytest

GOOD = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
CHAT = "/v1/chat/completions"


def _with(**kw) -> dict:
    return {**GOOD, **kw}


def _without(key: str) -> dict:
    return {k: v for k, v in GOOD.items() if k != key}


BODY_CASES = [
    # (id, path, json body or raw bytes, headers, status, param the error names)
    ("slo-string", CHAT, _with(slo={"tpot_ms": "fast"}), {}, 400, "slo.tpot_ms"),
    ("slo-negative", CHAT, _with(slo={"tpot_ms": -5}), {}, 400, "slo.tpot_ms"),
    ("slo-zero", CHAT, _with(slo={"tpot_ms": 0}), {}, 400, "slo.tpot_ms"),
    ("slo-denormal", CHAT, _with(slo={"tpot_ms": 5e-324}), {}, 400, "slo.tpot_ms"),
    ("hdr-denormal", CHAT, GOOD, {"X-SLO-TPOT-MS": "5e-324"}, 400, "X-SLO-TPOT-MS"),
    ("slo-nan", CHAT, b'{"messages":[{"role":"user","content":"Hi"}],"slo":{"tpot_ms":NaN}}',
     {}, 400, "slo.tpot_ms"),
    ("slo-inf", CHAT, b'{"messages":[{"role":"user","content":"Hi"}],'
     b'"slo":{"tpot_ms":Infinity}}', {}, 400, "slo.tpot_ms"),
    ("slo-bool", CHAT, _with(slo={"tpot_ms": True}), {}, 400, "slo.tpot_ms"),
    ("slo-not-object", CHAT, _with(slo=30), {}, 400, "slo"),
    ("slo-unknown-class", CHAT, _with(slo={"class": "platinum"}), {}, 400, "slo.class"),
    ("slo-conflict", CHAT, _with(slo={"tpot_ms": 30, "class": "urgent"}), {}, 400, "slo"),
    ("slo-unknown-field", CHAT, _with(slo={"tpot": 30}), {}, 400, "slo.tpot"),
    ("hdr-string", CHAT, GOOD, {"X-SLO-TPOT-MS": "fast"}, 400, "X-SLO-TPOT-MS"),
    ("hdr-negative", CHAT, GOOD, {"X-SLO-TPOT-MS": "-1"}, 400, "X-SLO-TPOT-MS"),
    ("hdr-zero", CHAT, GOOD, {"X-SLO-TPOT-MS": "0"}, 400, "X-SLO-TPOT-MS"),
    ("hdr-nan", CHAT, GOOD, {"X-SLO-TPOT-MS": "nan"}, 400, "X-SLO-TPOT-MS"),
    ("hdr-inf", CHAT, GOOD, {"X-SLO-TPOT-MS": "inf"}, 400, "X-SLO-TPOT-MS"),
    ("hdr-unknown-class", CHAT, GOOD, {"X-SLO-Class": "platinum"}, 400, "X-SLO-Class"),
    # one range for every source (slo_value.py): huge is refused in the body as in a header
    ("hdr-huge", CHAT, GOOD, {"X-SLO-TPOT-MS": "99999999999999999999"}, 400, "X-SLO-TPOT-MS"),
    ("slo-huge", CHAT, _with(slo={"tpot_ms": 1e308}), {}, 400, "slo.tpot_ms"),
    ("slo-huge-int", CHAT, b'{"messages":[{"role":"user","content":"Hi"}],'
     b'"slo":{"tpot_ms":' + b"9" * 400 + b'}}', {}, 400, "slo.tpot_ms"),
    ("slo-over-an-hour", CHAT, _with(slo={"tpot_ms": 3_600_001}), {}, 400, "slo.tpot_ms"),
    ("slo-text-not-ms", CHAT, _with(slo={"tpot_ms": "30s"}), {}, 400, "slo.tpot_ms"),
    ("hdr-text-not-ms", CHAT, GOOD, {"X-SLO-TPOT-MS": "30s"}, 400, "X-SLO-TPOT-MS"),
    ("custom-huge", "/generate", {"text": "a", "sampling_params": {
        "custom_params": {"tpot_slo_ms": 1e308}}}, {}, 400,
     "sampling_params.custom_params.tpot_slo_ms"),
    # the TTFT SLO: the same rule, named as the client sent it (the header in any case;
    # the error names it as the contract writes it, HTTP not keeping a header's case)
    ("ttft-zero", CHAT, _with(slo={"ttft_ms": 0}), {}, 400, "slo.ttft_ms"),
    ("ttft-negative", CHAT, _with(slo={"class": "urgent", "ttft_ms": -1}), {}, 400,
     "slo.ttft_ms"),
    ("ttft-text", CHAT, _with(slo={"ttft_ms": "soon"}), {}, 400, "slo.ttft_ms"),
    ("ttft-huge", CHAT, _with(slo={"ttft_ms": 1e308}), {}, 400, "slo.ttft_ms"),
    ("ttft-bool", "/v1/completions", {"prompt": "a", "slo": {"ttft_ms": True}}, {}, 400,
     "slo.ttft_ms"),
    ("generate-ttft-zero", "/generate", {"text": "a", "slo": {"ttft_ms": 0}}, {}, 400,
     "slo.ttft_ms"),
    ("hdr-ttft-zero", CHAT, GOOD, {"X-SLO-TTFT-MS": "0"}, 400, "X-SLO-TTFT-MS"),
    ("hdr-ttft-negative-lower", CHAT, GOOD, {"x-slo-ttft-ms": "-5"}, 400, "X-SLO-TTFT-MS"),
    ("hdr-ttft-text", CHAT, GOOD, {"x-slo-ttft-ms": "soon"}, 400, "X-SLO-TTFT-MS"),
    ("hdr-ttft-huge", CHAT, GOOD, {"X-SLO-TTFT-MS": "99999999999999999999"}, 400,
     "X-SLO-TTFT-MS"),
    ("hdr-ttft-nan", "/v1/completions", {"prompt": "a"}, {"x-slo-ttft-ms": "nan"}, 400,
     "X-SLO-TTFT-MS"),
    ("generate-hdr-ttft-text", "/generate", {"text": "a"}, {"x-slo-ttft-ms": "1 s"}, 400,
     "X-SLO-TTFT-MS"),
    ("malformed-json", CHAT, b'{"messages": [', {}, 400, None),
    ("not-an-object", CHAT, b'[1, 2, 3]', {}, 400, None),
    ("non-utf8", CHAT, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', {}, 400, None),
    ("missing-messages", CHAT, _without("messages"), {}, 400, "messages"),
    ("empty-messages", CHAT, _with(messages=[]), {}, 400, "messages"),
    ("bad-role", CHAT, _with(messages=[{"role": "robot", "content": "x"}]), {}, 400,
     "messages.0.role"),
    ("missing-prompt", "/v1/completions", {"max_tokens": 2}, {}, 400, "prompt"),
    ("empty-prompt", "/v1/completions", {"prompt": "", "max_tokens": 2}, {}, 400, "prompt"),
    ("empty-ids", "/v1/completions", {"prompt": [], "max_tokens": 2}, {}, 400, "prompt"),
    ("ids-out-of-vocab", "/v1/completions", {"prompt": [1, 10 ** 9], "max_tokens": 2}, {},
     400, None),
    ("over-context", "/v1/completions", {"prompt": "word " * 400, "max_tokens": 2}, {}, 400,
     "prompt"),
    ("max-tokens-zero", CHAT, _with(max_tokens=0), {}, 400, "max_tokens"),
    ("max-tokens-negative", CHAT, _with(max_tokens=-3), {}, 400, "max_tokens"),
    ("max-tokens-huge", CHAT, _with(max_tokens=10 ** 9), {}, 400, "max_tokens"),
    ("max-tokens-float", CHAT, _with(max_tokens=2.5), {}, 400, "max_tokens"),
    ("temperature-negative", CHAT, _with(temperature=-1), {}, 400, "temperature"),
    ("temperature-high", CHAT, _with(temperature=3), {}, 400, "temperature"),
    ("temperature-string", CHAT, _with(temperature="hot"), {}, 400, "temperature"),
    ("top-p-zero", CHAT, _with(top_p=0), {}, 400, "top_p"),
    ("top-p-high", CHAT, _with(top_p=1.5), {}, 400, "top_p"),
    ("n-two", CHAT, _with(n=2), {}, 400, "n"),
    ("unknown-model", CHAT, _with(model="gpt-9"), {}, 404, "model"),
    ("generate-no-prompt", "/generate", {"sampling_params": {"max_new_tokens": 2}}, {}, 400,
     None),
    ("generate-both-prompts", "/generate", {"text": "a", "input_ids": [1]}, {}, 400, None),
    ("generate-bad-custom-slo", "/generate", {"text": "a", "sampling_params": {
        "custom_params": {"tpot_slo_ms": -1}}}, {}, 400,
     "sampling_params.custom_params.tpot_slo_ms"),
]


@pytest.mark.parametrize("case", BODY_CASES, ids=[c[0] for c in BODY_CASES])
def test_bad_request_gets_clear_error_and_server_serves_on(live, case):
    _, path, body, headers, status, param = case
    with live.client() as c:
        if isinstance(body, bytes):
            r = c.post(path, content=body, headers={"Content-Type": "application/json", **headers})
        else:
            r = c.post(path, json=body, headers=headers)
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert err["message"] and err["type"]
        if param is not None:
            assert err["param"] == param, err
        assert c.get("/health").status_code == 200
    assert live.pool_whole()


@pytest.mark.parametrize("content_type", [None, "text/plain",
                                          "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("path", [CHAT, "/v1/completions", "/generate"])
def test_a_body_not_sent_as_json_is_told_to_send_json(live, path, content_type):
    """curl -d sends form-urlencoded; other clients send text/plain or nothing. FastAPI then
    hands the model raw bytes ("Input should be a valid dictionary"): say what to change."""
    body = (b'{"prompt": "Hi", "text": "Hi", "messages": [{"role": "user", "content": "Hi"}],'
            b' "max_tokens": 1, "sampling_params": {"max_new_tokens": 1}}')
    headers = {} if content_type is None else {"Content-Type": content_type}
    with live.client() as c:
        req = c.build_request("POST", path, content=body, headers=headers)
        assert req.headers.get("Content-Type") == content_type
        r = c.send(req)
        assert r.status_code == 415, r.text
        err = r.json()["error"]
        assert "must be JSON" in err["message"], err
        assert "Content-Type: application/json" in err["message"], err
        assert err["type"] == "invalid_request_error" and "param" in err
        r = c.post(path, content=body, headers={"Content-Type": "application/json; charset=utf-8"})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,where", [
    (b'{"messages": [', "line 1 column 15 (offset 14)"),
    (b'{\n  "messages": [\n    {"role": "user", "content": "Hi",}\n  ]\n}',
     "line 3 column 38 (offset 55)"),
    (b'{"messages": [{"role": "user", "content": "\\x41"}]}', "line 1 column 44"),
    (b'{"messages": [{"role": "user", "content": "\\u12"}]}', "line 1 column 45"),
])
def test_malformed_json_error_says_where(live, body, where):
    with live.client() as c:
        r = c.post(CHAT, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert msg.startswith("the body is not valid JSON") and where in msg, msg


def test_a_body_not_in_utf8_is_told_where(live):
    body = b'{"messages":[{"role":"user","content":"\xff\xfe"}]}'
    with live.client() as c:
        r = c.post(CHAT, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "not UTF-8" in r.json()["error"]["message"] and "0xff" in r.json()["error"]["message"]


def test_odd_but_valid_sampling_values_are_served(live):
    """Values at the edges that once could crash the engine thread (and with it every
    running request): a tiny temperature, a negative or huge seed."""
    with live.client() as c:
        for extra in ({"temperature": 5e-324}, {"temperature": 1e-7, "seed": -5},
                      {"seed": 10 ** 30, "temperature": 1.0}, {"top_k": (1 << 31) - 1}):
            r = c.post(CHAT, json=_with(**extra))
            assert r.status_code == 200, (extra, r.text)
        assert c.post(CHAT, json=_with(top_k=1 << 31)).status_code == 400
    assert live.pool_whole()


def test_unknown_fields_are_ignored(live):
    body = _with(user="someone", logprobs=False, presence_penalty=0.0, frobnicate={"x": 1})
    with live.client() as c:
        r = c.post(CHAT, json=body)
    assert r.status_code == 200, r.text


def test_very_large_body_is_refused(live):
    with live.client() as c:
        big = {"prompt": "x" * (300 * 1024), "max_tokens": 2}
        r = c.post("/v1/completions", json=big)
        assert r.status_code == 413 and "bytes" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: the limit holds on a chunked body too
            for _ in range(300):
                yield b"x" * 1024

        r = c.post("/v1/completions", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert c.post(CHAT, json=GOOD).status_code == 200


def test_thousands_of_headers(live):
    headers = [(f"x-filler-{i}", "y" * 8) for i in range(5000)]
    with live.client() as c:
        # the parser buffers up to PARSER_HEADER_BYTES, so the guard answers, every time
        r = c.post(CHAT, json=GOOD, headers=headers)
        assert r.status_code == 431 and "headers" in r.json()["error"]["message"]
        assert c.get("/health").status_code == 200
        assert c.post(CHAT, json=GOOD).status_code == 200


def test_error_status_mapping_is_openai_shaped(live):
    with live.client() as c:
        r = c.get("/v1/nothing-here")
        assert r.status_code == 404 and "error" in r.json()
        r = c.get(CHAT)
        assert r.status_code == 405 and "error" in r.json()

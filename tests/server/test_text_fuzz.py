"""Every text field of every route, fed text that breaks encoders: lone UTF-16 surrogates
(JSON's half-pair escapes), NUL and control characters, invalid escapes, invalid UTF-8,
non-characters, bidi overrides. Whatever arrives, the answer is never a 5xx, an error is
OpenAI-shaped, and the server serves on. (test_fuzz.py fuzzes the schema with generated
values; this one aims at the text every field is written in.)"""

from __future__ import annotations

import json

import pytest

FUZZ = "@@FUZZ@@"  # where a nasty string goes inside a JSON template, between its quotes

# As the bytes between a JSON string's quotes. "lone" ones decode to lone surrogates.
LONE = {
    "lone-high": rb"\ud800",
    "lone-low": rb"\udfff",
    "reversed-pair": rb"\ude00\ud83d",
    "high-then-text": rb"a\ud83dz",
    "lone-at-end": rb"hello\udbff",
}
OTHER = {
    "nul": rb"\u0000",
    "nul-in-text": rb"a\u0000b",
    "controls": rb"\u0001\u0007\b\f\u001b[31m\u007f",
    "crlf": rb"line\r\nX-Injected: 1",
    "noncharacters": rb"\ufeff\ufffe\uffff",
    "bidi": rb"\u202eevil\u202c",
    "combining": b"e" + rb"\u0301" * 300,
    "astral-pair": rb"\ud83d\ude00",
    "raw-astral": "\U0001F600".encode(),
    "jinja": b"{{ 7*7 }}{% for x in range(99) %}",
    "empty": b"",
    "invalid-escape": rb"\x41",
    "truncated-escape": rb"\u12",
    "raw-control": b"a\x01b",
    "raw-invalid-utf8": b"\xc3\x28",
    "overlong-utf8": b"\xc0\xaf",
    "utf8-encoded-surrogate": b"\xed\xa0\x80",
}
NASTY = {**LONE, **OTHER}

CHAT = {"messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}
COMPLETION = {"prompt": "Hi", "max_tokens": 1, "temperature": 0, "echo": True}
GENERATE = {"text": "Hi", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

# (route, template, path to the string, what a lone surrogate there gets: "surrogate", a 400
# that says so (free text); 400, a 400 (a value: "not one of", "not a number"); None, any
# answer below 500 (a field the server ignores))
FIELDS = [
    ("/v1/chat/completions", CHAT, ("messages", 1, "content"), "surrogate"),
    ("/v1/chat/completions", CHAT, ("messages", 0, "content"), "surrogate"),
    ("/v1/chat/completions", CHAT, ("messages", 1, "role"), 400),
    ("/v1/chat/completions", CHAT, ("model",), "surrogate"),
    ("/v1/chat/completions", CHAT, ("stop",), "surrogate"),
    ("/v1/chat/completions", CHAT, ("stop", 0), "surrogate"),
    ("/v1/chat/completions", CHAT, ("slo", "class"), "surrogate"),
    ("/v1/chat/completions", CHAT, ("slo", "tpot_ms"), 400),
    ("/v1/chat/completions", CHAT, ("slo", "ttft_ms"), 400),
    ("/v1/chat/completions", CHAT, ("slo", FUZZ), 400),  # an unknown field name: "not permitted"
    ("/v1/chat/completions", CHAT, ("user",), None),  # unknown to us: ignored
    ("/v1/chat/completions", CHAT, (FUZZ,), None),
    ("/v1/completions", COMPLETION, ("prompt",), "surrogate"),
    ("/v1/completions", COMPLETION, ("model",), "surrogate"),
    ("/v1/completions", COMPLETION, ("stop",), "surrogate"),
    ("/v1/completions", COMPLETION, ("slo", "class"), "surrogate"),
    ("/v1/completions", COMPLETION, ("slo", "tpot_ms"), 400),
    ("/v1/completions", COMPLETION, ("suffix",), None),
    ("/generate", GENERATE, ("text",), "surrogate"),
    ("/generate", GENERATE, ("rid",), "surrogate"),
    ("/generate", GENERATE, ("sampling_params", "stop"), "surrogate"),
    ("/generate", GENERATE, ("sampling_params", "stop", 0), "surrogate"),
    ("/generate", GENERATE, ("sampling_params", "custom_params", "slo_class"), "surrogate"),
    ("/generate", GENERATE, ("sampling_params", "custom_params", "tpot_slo_ms"), "surrogate"),
    ("/generate", GENERATE, ("sampling_params", "custom_params", FUZZ), "surrogate"),
    ("/generate", GENERATE, ("slo", "class"), "surrogate"),
    ("/generate", GENERATE, ("slo", "ttft_ms"), 400),
]
ROUTES = sorted({f[0] for f in FIELDS})


def _body(template: dict, path: tuple, nasty: bytes) -> bytes:
    """``template`` as JSON with the string at ``path`` (created if absent; a list index
    past the end appends) replaced by ``nasty``, byte for byte."""
    doc = json.loads(json.dumps(template))
    node = doc
    for key, nxt in zip(path, path[1:]):
        if isinstance(node, list) and key >= len(node):
            node.append([] if isinstance(nxt, int) else {})
        elif isinstance(node, dict) and not isinstance(node.get(key), (dict, list)):
            node[key] = [] if isinstance(nxt, int) else {}
        node = node[key]
    last = path[-1]
    if isinstance(node, list):
        node[last:last + 1] = [FUZZ]
    elif last == FUZZ:
        node[FUZZ] = "x"
    else:
        node[last] = FUZZ
    return json.dumps(doc).encode().replace(FUZZ.encode(), nasty)


def test_body_builder_puts_the_text_where_the_field_is():
    assert json.loads(_body(CHAT, ("stop", 0), b"ab"))["stop"] == ["ab"]
    assert json.loads(_body(GENERATE, ("sampling_params", "custom_params", "slo_class"),
                            b"ab"))["sampling_params"]["custom_params"] == {"slo_class": "ab"}
    assert json.loads(_body(CHAT, ("slo", FUZZ), b"k"))["slo"] == {"k": "x"}


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES)
def test_no_text_in_any_field_gets_a_server_error(live, route):
    failures = []
    with live.client() as c:
        for _, template, path, lone in (f for f in FIELDS if f[0] == route):
            for name, nasty in NASTY.items():
                r = c.post(route, content=_body(template, path, nasty),
                           headers={"Content-Type": "application/json"})
                where = f"{'.'.join(map(str, path))} = {name}: {r.status_code} {r.text[:200]}"
                if r.status_code >= 500:
                    failures.append(where)
                elif r.status_code >= 400 and not r.json()["error"]["message"]:
                    failures.append(where)
                elif name in LONE and lone is not None and r.status_code != 400:
                    failures.append(f"expected a 400: {where}")
                elif name in LONE and lone == "surrogate" and (
                        "surrogate" not in r.json()["error"]["message"]):
                    failures.append(f"expected an error that names the surrogate: {where}")
        assert c.get("/health").status_code == 200
        good = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETION,
                "/generate": GENERATE}[route]
        assert c.post(route, json=good).status_code == 200
    assert not failures, "\n".join(failures)
    assert live.pool_whole()


HEADER_VALUES = [b"\xff\xfe", b"\x01\x7f", "é".encode(), b"30\xc2\xa0ms", b"3 0", b"30 ms"]


@pytest.mark.parametrize("header", ["X-SLO-TPOT-MS", "X-SLO-Class", "X-SLO-TTFT-MS"])
def test_no_slo_header_text_gets_a_server_error(live, header):
    with live.client() as c:
        for value in HEADER_VALUES:
            r = c.post("/v1/completions", json=COMPLETION, headers=[(header.encode(), value)])
            assert r.status_code < 500, (value, r.text)
            if r.status_code >= 400:
                assert r.json()["error"]["param"] == header, r.text
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "1e400", "x", "%00"])
def test_dashboard_query_text_gets_no_server_error(live, seconds):
    with live.client() as c:
        r = c.get(f"/dashboard/data?seconds={seconds}")
        assert r.status_code < 500, r.text


@pytest.mark.parametrize("depth", [100, 900, 5000])
def test_deeply_nested_values_get_no_server_error(live, depth):
    """A dict field (custom_params) or an ignored field nested as deep as the JSON decoder
    allows, and deeper: walking it must not overflow the stack."""
    nested = b'{"a":' * depth + b'"\\ud800"' + b"}" * depth
    with live.client() as c:
        for body in (b'{"text": "Hi", "sampling_params": {"custom_params": ' + nested + b"}}",
                     b'{"text": "Hi", "sampling_params": {"max_new_tokens": 1}, "extra": '
                     + nested + b"}"):
            r = c.post("/generate", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code < 500, r.text
        assert c.get("/health").status_code == 200

"""One contract on both backends: the same table of good and bad requests, sent to the
embedded server (`adaserve serve`) and to SGLang with ADASERVE (`adaserve sglang
serve-cpu`), both with the same SLO classes and context limit, must get the same outcome
-- the same SLO (class and milliseconds) when served, or the same status naming the same
field when refused (../shared/DESIGN.md "HTTP contract"). The error bodies keep each
route's shape (docs/sglang.md); the status and the field are the contract."""

from __future__ import annotations

import json

import httpx
import pytest
from servers import Embedded, embedded_python

pytestmark = pytest.mark.slow

CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/generate"
HI = [{"role": "user", "content": "Say hi."}]
LONG = "word " * 1200  # over the 1024-token context of both servers


def chat(**fields):
    return {"messages": HI, "max_tokens": 2, "temperature": 0, **fields}


def completion(**fields):
    return {"prompt": "Hello", "max_tokens": 2, "temperature": 0, **fields}


def generate(sampling=None, **fields):
    return {"text": "Hello", "sampling_params": {"max_new_tokens": 2, "temperature": 0,
                                                 **(sampling or {})}, **fields}


# (name, route, body (a dict, or raw bytes), headers)
TABLE = [
    # served: the SLO, first match wins (body slo, custom_params, headers, default)
    ("default-class", CHAT, chat(), {}),
    ("header-class", CHAT, chat(), {"X-SLO-Class": "urgent"}),
    ("header-ms", CHAT, chat(), {"X-SLO-TPOT-MS": "30"}),
    ("header-ms-text", CHAT, chat(), {"X-SLO-TPOT-MS": "30 ms"}),
    ("header-best-effort", CHAT, chat(), {"X-SLO-Class": "best-effort"}),
    ("body-ms", CHAT, chat(slo={"tpot_ms": 45}), {"X-SLO-Class": "urgent"}),
    ("body-ms-text", CHAT, chat(slo={"tpot_ms": "45ms"}), {}),
    ("body-class", CHAT, chat(slo={"class": "urgent"}), {"X-SLO-TPOT-MS": "99"}),
    ("body-null-falls-through", CHAT, chat(slo={"tpot_ms": None}), {"X-SLO-TPOT-MS": "40"}),
    ("custom-params", CHAT, chat(custom_params={"tpot_slo_ms": 33}), {"X-SLO-Class": "urgent"}),
    ("body-over-custom", CHAT, chat(slo={"class": "relaxed"},
                                    custom_params={"slo_class": "urgent"}), {}),
    ("completion-body-class", COMPLETIONS, completion(slo={"class": "urgent"}), {}),
    ("completion-header", COMPLETIONS, completion(), {"X-SLO-TPOT-MS": "20"}),
    ("generate-body-ms", GENERATE, generate(slo={"tpot_ms": 40}), {}),
    ("generate-custom-class", GENERATE, generate({"custom_params": {"slo_class": "urgent"}}), {}),
    ("generate-header", GENERATE, generate(), {"X-SLO-Class": "best-effort"}),
    ("max-completion-tokens", CHAT, chat(max_completion_tokens=3), {}),
    # refused: the SLO, in every place it is written
    ("body-negative", CHAT, chat(slo={"tpot_ms": -1}), {}),
    ("body-zero", CHAT, chat(slo={"tpot_ms": 0}), {}),
    ("body-text", CHAT, chat(slo={"tpot_ms": "fast"}), {}),
    ("body-nan-text", CHAT, chat(slo={"tpot_ms": "nan"}), {}),
    ("body-huge", CHAT, chat(slo={"tpot_ms": 1e308}), {}),
    ("body-bool", CHAT, chat(slo={"tpot_ms": True}), {}),
    ("body-unknown-class", CHAT, chat(slo={"class": "platinum"}), {}),
    ("body-not-an-object", CHAT, chat(slo="urgent"), {}),
    ("body-unknown-key", CHAT, chat(slo={"tpot": 30}), {}),
    ("body-both", CHAT, chat(slo={"tpot_ms": 30, "class": "urgent"}), {}),
    ("header-negative", CHAT, chat(), {"X-SLO-TPOT-MS": "-5"}),
    ("header-zero", CHAT, chat(), {"X-SLO-TPOT-MS": "0"}),
    ("header-nan", CHAT, chat(), {"X-SLO-TPOT-MS": "nan"}),
    ("header-inf", CHAT, chat(), {"X-SLO-TPOT-MS": "inf"}),
    ("header-text", CHAT, chat(), {"X-SLO-TPOT-MS": "fast"}),
    ("header-unknown-class", CHAT, chat(), {"X-SLO-Class": "platinum"}),
    ("custom-unknown-class", CHAT, chat(custom_params={"slo_class": "gold"}), {}),
    ("completion-body-negative", COMPLETIONS, completion(slo={"tpot_ms": -2}), {}),
    ("generate-body-zero", GENERATE, generate(slo={"tpot_ms": 0}), {}),
    ("generate-custom-text", GENERATE, generate({"custom_params": {"tpot_slo_ms": "x"}}), {}),
    ("generate-header-class", GENERATE, generate(), {"X-SLO-Class": "gold"}),
    # refused: the output length and the prompt
    ("max-tokens-zero", CHAT, chat(max_tokens=0), {}),
    ("max-tokens-negative", CHAT, chat(max_tokens=-1), {}),
    ("max-tokens-fraction", CHAT, chat(max_tokens=2.5), {}),
    ("max-tokens-text", CHAT, chat(max_tokens="2"), {}),
    ("max-tokens-over-context", CHAT, chat(max_tokens=5000), {}),
    ("completion-max-tokens-zero", COMPLETIONS, completion(max_tokens=0), {}),
    ("generate-max-new-tokens-zero", GENERATE, generate({"max_new_tokens": 0}), {}),
    ("generate-max-new-tokens-over", GENERATE, generate({"max_new_tokens": 5000}), {}),
    ("prompt-over-context", CHAT, chat(messages=[{"role": "user", "content": LONG}]), {}),
    ("completion-prompt-over-context", COMPLETIONS, completion(prompt=LONG), {}),
    ("generate-text-over-context", GENERATE, generate(text=LONG), {}),
    # refused: the body itself
    ("malformed-json", CHAT, b'{"messages": [', {}),
    ("generate-malformed-json", GENERATE, b'{"text": ', {}),
    ("not-an-object", CHAT, b"[1, 2, 3]", {}),
]


@pytest.fixture(scope="module")
def embedded(logdir):
    if embedded_python() is None:
        pytest.skip("no main environment (.venv: .ci/run builds it) for `adaserve serve`")
    s = Embedded(logdir)
    yield s
    s.stop()


def outcome(route: str, r: httpx.Response) -> tuple:
    """(status, the SLO served) or (status, the field refused)."""
    body = r.json()
    if r.status_code >= 400:  # {"error": {...}} (embedded, /generate) or SGLang's flat shape
        err = body.get("error", body)
        return r.status_code, "param", err.get("param")
    report = body["meta_info"] if route == GENERATE else body
    ms = report.get("slo_tpot_ms")
    return r.status_code, report.get("slo_class"), None if ms is None else round(ms, 6)


def send(url: str, route: str, body, headers: dict) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(url + route, content=body, timeout=600,
                          headers={"Content-Type": "application/json", **headers})
    return httpx.post(url + route, json=body, headers=headers, timeout=600)


def test_one_table_gets_one_answer_from_both_backends(embedded, ada):
    differ, seen = [], []
    for name, route, body, headers in TABLE:
        ours, theirs = (outcome(route, send(s.url, route, body, headers))
                        for s in (embedded, ada))
        seen.append((name, ours))
        if ours != theirs:
            differ.append((name, ours, theirs))
    assert not differ, json.dumps(differ, indent=1)
    # the table has teeth: both sides served and refused, SLOs and fields were compared
    assert {o[0] for _, o in seen} >= {200, 400}
    assert ("header-class", (200, "urgent", 1.0)) in seen
    assert ("body-ms", (200, "custom", 45.0)) in seen
    assert ("max-tokens-zero", (400, "param", "max_tokens")) in seen
    assert ("prompt-over-context", (400, "param", "messages")) in seen


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, GENERATE])
def test_a_body_not_sent_as_json_is_a_415_on_both(embedded, ada, route):
    for s in (embedded, ada):
        r = httpx.post(s.url + route, content=b'{"text": "hi"}', timeout=60,
                       headers={"Content-Type": "text/plain"})
        assert r.status_code == 415, (s.url, r.text)
    assert ada.generate("Hello", max_new_tokens=2).status_code == 200  # still serving

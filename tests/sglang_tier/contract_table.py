"""The contract's table of good and bad requests (docs/contract.md "Errors"), and how an
answer is read: sent to the embedded server and SGLang with ADASERVE by test_contract.py,
to a replica and through the fleet by test_fleet_cpu.py."""

from __future__ import annotations

import re

import httpx

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
    # served: a TTFT SLO beside it, body first (rows named *ttft* compare it: outcome)
    ("body-ttft", CHAT, chat(slo={"class": "urgent", "ttft_ms": 800}), {"X-SLO-TTFT-MS": "9"}),
    ("header-ttft", CHAT, chat(), {"X-SLO-TTFT-MS": "900"}),
    ("header-ttft-lower-case", COMPLETIONS, completion(), {"x-slo-ttft-ms": "650ms"}),
    ("generate-body-ttft", GENERATE, generate(slo={"ttft_ms": "700"}), {"X-SLO-Class": "urgent"}),
    ("custom-params-header-ttft", CHAT, chat(custom_params={"tpot_slo_ms": 33}),
     {"X-SLO-TTFT-MS": "1200"}),
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
    ("body-ttft-negative", CHAT, chat(slo={"class": "urgent", "ttft_ms": -1}), {}),
    ("body-ttft-over-an-hour", CHAT, chat(slo={"ttft_ms": 4e6}), {}),
    ("header-ttft-text", CHAT, chat(), {"X-SLO-TTFT-MS": "fast"}),
    ("generate-body-ttft-zero", GENERATE, generate(slo={"ttft_ms": 0}), {}),
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
    # refused: the sampling fields and the prompt's shape
    ("temperature-negative", CHAT, chat(temperature=-0.5), {}),
    ("top-p-over-one", CHAT, chat(top_p=1.5), {}),
    ("completion-temperature-negative", COMPLETIONS, completion(temperature=-1), {}),
    ("messages-empty", CHAT, chat(messages=[]), {}),
    ("messages-missing", CHAT, {"max_tokens": 2}, {}),
    ("messages-not-a-list", CHAT, chat(messages="hi"), {}),
    ("completion-prompt-number", COMPLETIONS, completion(prompt=42), {}),
    ("completion-prompt-missing", COMPLETIONS, {"max_tokens": 2}, {}),
    # refused: the body itself
    ("malformed-json", CHAT, b'{"messages": [', {}),
    ("malformed-json-second-line", COMPLETIONS, b'{"prompt": "hi",\n "max_tokens": }', {}),
    ("generate-malformed-json", GENERATE, b'{"text": ', {}),
    ("not-an-object", CHAT, b"[1, 2, 3]", {}),
    ("not-json", CHAT, b"messages=hi", {"Content-Type": "text/plain"}),
    ("completion-no-content-type", COMPLETIONS, b'{"prompt": "hi"}', {"Content-Type": ""}),
]
# rows that assume the servers' 1024-token context (a server with a longer one serves
# them, at length)
CONTEXT_ROWS = {"max-tokens-over-context", "generate-max-new-tokens-over",
                "prompt-over-context", "completion-prompt-over-context",
                "generate-text-over-context"}
# rows whose refusal message is compared word for word too (the rest: status and field)
SAME_WORDS = {"malformed-json", "malformed-json-second-line", "generate-malformed-json",
              "not-json", "completion-no-content-type"}
# a server's own path or a traceback in an error means it leaked its insides
LEAK = re.compile(r"Traceback|site-packages|\.py\b|File \"")


def outcome(route: str, r: httpx.Response, name: str = "") -> tuple:
    """(status, the SLO served[, the TTFT SLO]) or (status, the field refused[, the
    message]). A refusal must be in OpenAI's shape on every route and leak nothing
    (AssertionError). The TTFT SLO is compared on rows that name one (``ttft`` in the
    name): a class's default TTFT is each backend's own (the embedded server's from its
    profile, SGLang's from its configuration, docs/contract.md)."""
    body = r.json()
    if r.status_code >= 400:
        err = body.get("error")
        assert isinstance(err, dict) and isinstance(err.get("message"), str) \
            and isinstance(err.get("type"), str) and "param" in err, (name, body)
        assert not LEAK.search(err["message"]), (name, err["message"])
        if name in SAME_WORDS:
            return r.status_code, "param", err.get("param"), err["message"]
        return r.status_code, "param", err.get("param")
    report = body["meta_info"] if route == GENERATE else body
    ms = report.get("slo_tpot_ms")
    served = (r.status_code, report.get("slo_class"), None if ms is None else round(ms, 6))
    if "ttft" in name:
        ttft = report.get("slo_ttft_ms")
        served += (None if ttft is None else round(ttft, 6),)
    return served


def send(url: str, route: str, body, headers: dict) -> httpx.Response:
    if isinstance(body, bytes):
        sent = {"Content-Type": "application/json", **headers}
        return httpx.post(url + route, content=body, timeout=600,
                          headers={k: v for k, v in sent.items() if v})
    return httpx.post(url + route, json=body, headers=headers, timeout=600)

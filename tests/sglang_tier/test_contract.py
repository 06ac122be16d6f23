"""One contract on both backends: the same table of good and bad requests, sent to the
embedded server (`adaserve serve`) and to SGLang with ADASERVE (`adaserve sglang
serve-cpu`), both with the same SLO classes and context limit, must get the same outcome
-- the same SLO (class and milliseconds) when served, or the same status naming the same
field when refused, in OpenAI's error shape on every route, leaking no path or traceback
(docs/contract.md "Errors"). The table is contract_table.py's."""

from __future__ import annotations

import json

import httpx
import pytest
from contract_table import CHAT, COMPLETIONS, GENERATE, TABLE, outcome, send
from servers import Embedded, embedded_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded(logdir):
    if embedded_python() is None:
        pytest.skip("no main environment (.venv: .ci/run builds it) for `adaserve serve`")
    s = Embedded(logdir)
    yield s
    s.stop()


def test_one_table_gets_one_answer_from_both_backends(embedded, ada):
    differ, seen = [], []
    for name, route, body, headers in TABLE:
        ours, theirs = (outcome(route, send(s.url, route, body, headers), name)
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
    assert ("temperature-negative", (400, "param", "temperature")) in seen
    assert ("completion-prompt-number", (400, "param", "prompt")) in seen
    assert ("body-ttft", (200, "urgent", 1.0, 800.0)) in seen
    assert ("header-ttft-lower-case", (200, "relaxed", 100000.0, 650.0)) in seen
    assert ("body-ttft-negative", (400, "param", "slo.ttft_ms")) in seen
    assert ("header-ttft-text", (400, "param", "X-SLO-TTFT-MS")) in seen
    assert dict(seen)["not-json"][0] == 415
    words = dict(seen)["malformed-json-second-line"][3]
    assert "line 2 column" in words, words


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS, GENERATE])
def test_a_body_not_sent_as_json_is_a_415_on_both(embedded, ada, route):
    for s in (embedded, ada):
        r = httpx.post(s.url + route, content=b'{"text": "hi"}', timeout=60,
                       headers={"Content-Type": "text/plain"})
        assert r.status_code == 415, (s.url, r.text)
    assert ada.generate("Hello", max_new_tokens=2).status_code == 200  # still serving

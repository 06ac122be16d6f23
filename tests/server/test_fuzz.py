"""Fuzz every operation of the server's own OpenAPI schema (schemathesis): whatever the
body, headers or query, no 5xx. Bounded: a short context (so a valid request generates a
few tokens at most), plain decoding, a fixed number of examples per operation."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from live_server import start  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402


@pytest.fixture(scope="module")
def fuzz_server(models):
    srv, stop = start(models, policy="incremental", max_context=40, max_batch=8)
    yield srv
    stop()


@pytest.mark.slow
def test_no_server_error_for_any_generated_request(fuzz_server):
    # schemathesis' own pytest plugin does not load under this pytest; its strategies do
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    assert {op.path for op in ops} >= {"/v1/chat/completions", "/v1/completions", "/generate"}
    for op in ops:
        @settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def fuzz(case):
            case.call_and_validate(base_url=fuzz_server.url, checks=[not_a_server_error],
                                   timeout=60)

        fuzz()
    assert fuzz_server.pool_whole()

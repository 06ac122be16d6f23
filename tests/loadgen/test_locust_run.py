"""A short headless Locust run (`adaserve loadgen`) against a live embedded server: the
summary has a row per class, and what it counts comes from the real streams."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import importlib.util

import pytest

# never import locust here: it monkey-patches this process with gevent (the run is a
# subprocess); only check that it is installed
if importlib.util.find_spec("locust") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI must have locust (.ci/run installs the [loadgen] extra)")
    pytest.skip("locust is not installed (pip install -e '.[loadgen]')", allow_module_level=True)
pytest.importorskip("torch")

from live_server import start  # noqa: E402

from adaserve.loadgen.records import read_jsonl  # noqa: E402

POLICY = "adaserve:refuse_tpot=off"


@pytest.fixture(scope="module")
def server(models):
    # the long prompts are ~600 tokens. The preset's TPOT door would refuse a tight request
    # once most tight ones had missed, which on a server shared by the tests depends on
    # the test before: these tests are of the load generator, so the door is off
    srv, stop = start(models, max_context=1024, policy=POLICY)
    yield srv
    stop()


@pytest.mark.slow
def test_headless_run_summarizes_per_class_from_real_streams(server, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "adaserve.cli", "loadgen", "--host", server.url,
           "--rate", "2", "--requests", "12", "--max-tokens", "6", "--prompts", "mixed",
           "--mix", "urgent=0.5,moderate=0.25,relaxed=0.25", "--seed", "3", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["slo_class"]: r for r in summary["rows"]}
    assert set(rows) == {"urgent", "moderate", "relaxed", "overall"}
    assert rows["overall"]["sent"] == 12 == sum(rows[c]["sent"] for c in rows if c != "overall")
    assert rows["overall"]["ok"] == 12 and rows["overall"]["errors"] == 0
    assert summary["server"]["policy"] == POLICY
    md = (out / "summary.md").read_text()
    assert md.count("\n| ") >= 5 and "adaserve loadgen" in md  # header + 4 rows, the command
    records = read_jsonl(out / "records.jsonl")
    assert len(records) == 12
    for r in records:
        assert r.status == "ok" and 1 <= r.output_tokens <= 6
        assert r.server["slo_class"] == r.slo_class
        assert r.slo_ms == pytest.approx(r.server["slo_tpot_ms"])
        # open loop: never early (wait_until), and not held back by the requests still
        # outstanding (their TTFTs reach 30 s here)
        assert r.scheduled_s <= r.sent_s < r.scheduled_s + 1.0
        if r.tpot_ms is not None and r.server["tpot_ms"] is not None:
            # The client times the same first and last token as the server, at the other
            # end of a loopback socket, so the spans (TPOT x gaps) differ by the two chunks'
            # delivery jitter. In the committed records (results/{rate,urgent,slo-scale}/raw,
            # 3,900 requests of 19-64 tokens) they differed by under 1% of the span (TPOT:
            # p99 0.27 ms, max 2.4 ms = 153 ms of span); here by up to 15 ms over 5 gaps.
            # 50 ms + 2% of the span leaves room for a loaded machine. Not covered: a reply
            # whose first token has no text yet (part of a UTF-8 character, held back by the
            # server) is timed by the client from its first text: 54 committed records,
            # TPOT 1.7-13.4% low. None of this test's replies starts so.
            gaps = r.output_tokens - 1
            span_diff = abs(r.tpot_ms - r.server["tpot_ms"]) * gaps
            assert span_diff < 50 + 0.02 * r.server["tpot_ms"] * gaps, (r.index, r.tpot_ms,
                                                                        r.server)
    attained = [r for r in records if r.attained]
    for c in ("urgent", "moderate", "relaxed"):
        mine = [r for r in records if r.slo_class == c]
        assert rows[c]["attainment"] == pytest.approx(
            sum(bool(r.attained) for r in mine) / len(mine))
    assert rows["overall"]["goodput_tok_s"] > 0 or not attained
    with open(out / "locust_stats.csv") as f:
        names = {row["Name"] for row in csv.DictReader(f)}
    assert {"stream [urgent]", "stream [moderate]", "stream [relaxed]"} <= names


@pytest.mark.slow
def test_a_paper_trace_sends_its_lengths_and_slos(server, tmp_path):
    """`--arrival paper`: each request with its own TPOT SLO (X-SLO-TPOT-MS; x1.5 is of
    the server's baseline, 100 ms here), a prompt of about input_length tokens as the server
    counts them, and exactly output_length tokens (ignore_eos)."""
    trace = tmp_path / "trace.csv"
    trace.write_text("emission_time_ms,input_length,output_length,slo_ratio\n"
                     "0,60,4,1.5\n400,200,6,-80\n900,120,3,2\n1000,40,5,-300\n")
    out = tmp_path / "paper"
    cmd = [sys.executable, "-m", "adaserve.cli", "loadgen", "--host", server.url,
           "--arrival", "paper", "--trace", str(trace), "--rate", "4", "--requests", "4",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = read_jsonl(out / "records.jsonl")
    assert [r.slo_class for r in records] == ["x1.5", "80ms", "x2", "300ms"]
    assert [r.slo_ms for r in records] == pytest.approx([150, 80, 200, 300])
    assert [r.scheduled_s for r in records] == pytest.approx([0, 0.3, 0.675, 0.75])
    for r, want_in, want_out in zip(records, (60, 200, 120, 40), (4, 6, 3, 5)):
        assert r.status == "ok" and r.output_tokens == want_out
        assert r.server["slo_tpot_ms"] == pytest.approx(r.slo_ms)
        assert abs(r.prompt_tokens - want_in) <= 0.06 * want_in + 2, (r.prompt_tokens, want_in)
    rows = {r["slo_class"] for r in json.loads((out / "summary.json").read_text())["rows"]}
    assert rows == {"x1.5", "80ms", "x2", "300ms", "overall"}

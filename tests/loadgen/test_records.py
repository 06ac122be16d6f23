"""Attainment, goodput and percentiles on hand-made records (DESIGN.md "Definitions")."""

from __future__ import annotations

import math

import pytest

from adaserve.loadgen.records import OVERALL, Record, read_jsonl, summarize, summary_table, write_jsonl


def rec(i, cls, slo, sent, first, last, tokens, status="ok", fin=None):
    return Record(i, cls, slo, scheduled_s=sent, sent_s=sent, status=status, first_token_s=first,
                  last_token_s=last, finished_s=fin if fin is not None else last,
                  output_tokens=tokens)


def test_tpot_ttft_and_attainment_of_one_request():
    r = rec(0, "urgent", 50.0, 1.0, 1.25, 2.25, 21)  # 20 gaps in 1.0 s: 50 ms, exactly
    assert r.ttft_ms == 250.0 and r.tpot_ms == 50.0
    assert r.attained is True  # within means <=
    assert rec(0, "urgent", 49.9, 1.0, 1.25, 2.25, 21).attained is False
    assert rec(0, "urgent", 10.0, 0, 0.1, 0.1, 1).attained is True  # one token: no gap
    assert rec(0, "urgent", 10.0, 0, None, None, 0, status="rejected").attained is False
    assert rec(0, "free", None, 0, 0.1, 0.5, 5).attained is None
    assert r.attained_with_ttft(249.0) is False and r.attained_with_ttft(250.0) is True


def test_summary_rows_per_class_and_overall(tmp_path):
    rs = [
        rec(0, "urgent", 50.0, 0.0, 0.1, 1.1, 11),   # tpot 100: missed
        rec(1, "urgent", 50.0, 1.0, 1.1, 1.6, 11),   # tpot 50: met, 11 tokens
        rec(2, "urgent", 50.0, 2.0, None, None, 0, status="rejected", fin=2.0),
        rec(3, "relaxed", 500.0, 3.0, 3.5, 5.5, 5),  # tpot 500: met, 5 tokens
        rec(4, "free", None, 4.0, 4.2, 10.0, 30),    # best effort: counts for goodput
    ]
    rows = summarize(rs, ttft_slo_ms=150.0)
    by = {r.slo_class: r for r in rows}
    assert [r.slo_class for r in rows] == ["urgent", "relaxed", "free", OVERALL]
    u = by["urgent"]
    assert (u.sent, u.ok, u.rejected) == (3, 2, 1)
    assert u.attainment == pytest.approx(1 / 3)
    assert u.attainment_ttft == pytest.approx(1 / 3)  # the met one had TTFT 100 ms
    wall = 10.0  # first scheduled 0.0 to last finish 10.0
    assert u.goodput_tok_s == pytest.approx(11 / wall)
    assert u.throughput_tok_s == pytest.approx(22 / wall)
    assert by["relaxed"].attainment == 1.0 and by["relaxed"].attainment_ttft == 0.0  # TTFT 500
    assert by["free"].attainment is None and by["free"].goodput_tok_s == pytest.approx(3.0)
    o = by[OVERALL]
    assert o.attainment == pytest.approx(2 / 4)
    assert o.goodput_tok_s == pytest.approx((11 + 5 + 30) / wall)
    assert u.tpot_ms["p50"] == pytest.approx(75.0)
    table = summary_table(rows, 150.0)
    assert table.count("\n") == 1 + len(rows) and "| urgent | 50.0 | 3 | 2 | 1 | 0 | 33.3% |" in table
    write_jsonl(rs, tmp_path / "r.jsonl")
    back = read_jsonl(tmp_path / "r.jsonl")
    assert [(b.index, b.tpot_ms, b.attained) for b in back] == [(r.index, r.tpot_ms, r.attained) for r in rs]
    assert math.isnan(summarize([rec(0, "u", 1.0, 0, None, None, 0, status="error", fin=0)], 1.0, wall_s=0)[0].goodput_tok_s)


def test_the_end_to_end_reading_prefers_the_ttft_slo_the_server_reported():
    # TTFT 250 ms (the client's reading) against the server's 200 ms SLO: a miss, though
    # within the run's 5 s; the server's 300 ms: met; none reported: the run's threshold
    r = rec(0, "urgent", 50.0, 1.0, 1.25, 2.25, 21)
    r.server = {"slo_ttft_ms": 200.0}
    assert r.ttft_slo_held(5000.0) == 200.0 and r.attained_with_ttft(5000.0) is False
    r.server = {"slo_ttft_ms": 300.0}
    assert r.attained_with_ttft(100.0) is True
    r.server = {"slo_ttft_ms": None}
    assert r.attained_with_ttft(249.0) is False and r.attained_with_ttft(250.0) is True
    # the summary: each request held to its own, the heading says so
    met, missed = rec(0, "urgent", 50.0, 1.0, 1.25, 2.25, 21), rec(1, "urgent", 50.0, 1.0,
                                                                    1.25, 2.25, 21)
    met.server, missed.server = {"slo_ttft_ms": 1000.0}, {"slo_ttft_ms": 100.0}
    rows = summarize([met, missed], 5000.0)
    assert rows[0].attainment_ttft == 0.5 and rows[0].ttft_slo_ms is None  # mixed
    assert "+TTFT the server's SLO, else <= 5000 ms" in summary_table(rows, 5000.0)
    plain = summarize([rec(0, "urgent", 50.0, 1.0, 1.25, 2.25, 21)], 5000.0)
    assert "+TTFT <= 5000 ms" in summary_table(plain, 5000.0)


def test_write_jsonl_replaces_the_file_whole(tmp_path):
    from adaserve.loadgen.records import Record, read_jsonl, write_jsonl

    path = tmp_path / "records.jsonl"
    first = [Record(0, "urgent", 50.0, 0.0, 0.001)]
    write_jsonl(first, path)
    write_jsonl(first + [Record(1, "relaxed", 400.0, 1.0, 1.002)], path)
    assert [r.index for r in read_jsonl(path)] == [0, 1]
    assert [p.name for p in tmp_path.iterdir()] == ["records.jsonl"]  # no temporary left


def test_the_authors_test_counts_n_tokens_over_completed_requests_only():
    # 21 tokens from 1.25 to 2.30 s: TPOT 52.5 ms over 20 gaps misses a 50 ms SLO, but
    # decode latency 1,050 ms <= 50 x 21 = 1,050 ms holds (FlexFlow's n tokens)
    r = rec(0, "urgent", 50.0, 1.0, 1.25, 2.30, 21)
    assert r.attained is False and r.attained_paper is True
    assert rec(0, "urgent", 50.0, 1.0, 1.25, 2.31, 21).attained_paper is False
    # the finish, not the last token, ends the decode (an EOS step after the last token)
    assert rec(0, "urgent", 50.0, 1.0, 1.25, 2.30, 21, fin=2.4).attained_paper is False
    # a failed request is not completed: left out of the authors' denominator; one refused
    # at the door is a miss in it (FlexFlow refuses none, and a policy that refuses must
    # not shrink the denominator by refusing)
    assert rec(0, "urgent", 50.0, 0, None, None, 0, status="error").attained_paper is None
    assert rec(0, "urgent", 50.0, 0, None, None, 0, status="rejected").attained_paper is False
    rows = summarize([r, rec(1, "urgent", 50.0, 0, None, None, 0, status="error", fin=0.0),
                      rec(2, "urgent", 50.0, 0, 0.1, 2.1, 11)], ttft_slo_ms={"urgent": 5000.0})
    u = rows[0]
    assert u.attainment_paper == pytest.approx(1 / 2)  # 1 of the 2 completed
    refused = summarize([r, rec(1, "urgent", 50.0, 0, None, None, 0, status="rejected",
                                fin=0.0)], ttft_slo_ms={"urgent": 5000.0})[0]
    assert refused.attainment_paper == pytest.approx(1 / 2)  # the refusal counts, a miss
    assert u.attainment == pytest.approx(0 / 3) and u.ttft_slo_ms == 5000.0
    assert u.goodput_paper_tok_s > u.goodput_tok_s == 0.0

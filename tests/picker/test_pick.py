"""The shared SLO-aware picker (adaserve/picker) on fabricated replica reports: it sends a
request where its class has headroom, reads the recent TPOT/TTFT, counts what was sent
since a report, breaks ties by load then index, and names no replica on stale reports."""

import pytest

from adaserve.picker import (Ask, ClassLoad, PickerConfig, Recent, ReplicaReport, from_json,
                             pick, predict)

CFG = PickerConfig(baseline_ms=80, capacity=4, prefill_ms=100, stale_s=2)
URGENT = Ask("urgent", 60.0)  # weight 80 / 60 = 1.33
RELAXED = Ask("relaxed", 400.0)  # weight 0.2
BEST = Ask("best-effort", None)


def report(*loads, recent=(), at=10.0):
    return ReplicaReport(at, tuple(ClassLoad(*ld) for ld in loads), tuple(recent))


def test_an_urgent_request_goes_where_no_urgent_one_competes():
    # replica 0: three urgent requests decoding (4 of 4); replica 1: more requests, all
    # relaxed, which an urgent request is served ahead of
    a = report(("urgent", 60.0, 0, 3))
    b = report(("relaxed", 400.0, 0, 6))
    got = pick(URGENT, [a, b], 10.5, CFG)
    assert got.replica == 1, got
    assert got.predictions[1].margin >= 1 > got.predictions[0].margin


def test_a_relaxed_request_counts_every_tighter_one():
    # the same two replicas: for a relaxed request the urgent ones count in full, and
    # replica 1's six relaxed ones (1.2) weigh less than replica 0's two urgent (2.67)
    a = report(("urgent", 60.0, 0, 2))
    b = report(("relaxed", 400.0, 0, 6))
    p0, p1 = predict(RELAXED, a, CFG), predict(RELAXED, b, CFG)
    assert p0.demand == pytest.approx(0.2 + 2 * 80 / 60)
    assert p1.demand == pytest.approx(0.2 + 6 * 0.2)
    assert pick(RELAXED, [a, b], 10.0, CFG).replica == 1


def test_the_ttft_slo_avoids_a_long_queue():
    # equal TPOT headroom; replica 0 has four requests waiting for their first token
    a = report(("relaxed", 400.0, 4, 0))
    b = report(("relaxed", 400.0, 0, 4))
    ask = Ask("relaxed", 400.0, ttft_slo_ms=300.0)
    got = pick(ask, [a, b], 10.0, CFG)
    assert got.replica == 1
    assert got.predictions[0].ttft_ms == 500.0 and got.predictions[1].ttft_ms == 100.0


def test_a_replica_that_just_missed_the_class_is_predicted_to_miss_again():
    # same load; replica 0's recent urgent requests took 90 ms a token against 60
    a = report(("urgent", 60.0, 0, 1), recent=[Recent("urgent", 10, 90.0, 50.0)])
    b = report(("urgent", 60.0, 0, 1), recent=[Recent("urgent", 10, 40.0, 50.0)])
    got = pick(URGENT, [a, b], 10.0, CFG)
    assert got.replica == 1
    assert got.predictions[0].tpot_ms == 90.0 and got.predictions[0].margin < 1


def test_a_recent_tpot_of_zero_leaves_the_load_to_predict():
    # replica 0's recent urgent outputs came whole in one step (median TPOT 0 ms): no
    # pace to read, so its prediction is the load's, and it still loses to the emptier one
    a = report(("urgent", 60.0, 0, 2), recent=[Recent("urgent", 5, 0.0, 50.0)])
    b = report(("urgent", 60.0, 0, 1))
    p0 = predict(URGENT, a, CFG)
    # demand 3 x 80 / 60 = 4, the capacity: the SLO itself, margin 1
    assert p0.tpot_ms == pytest.approx(60.0) and p0.margin == pytest.approx(1.0)
    assert pick(URGENT, [a, b], 10.0, CFG).replica == 1


def test_best_effort_takes_the_most_spare_capacity():
    # best effort is served last: every request counts at its weight. Replica 0: two
    # relaxed (0.4); replica 1: five best effort (0.5)
    a = report(("relaxed", 400.0, 0, 2))
    b = report(("best-effort", None, 0, 5))
    got = pick(BEST, [a, b], 10.0, CFG)
    assert got.replica == 0
    assert got.predictions[0].margin == pytest.approx(4 / 0.5)
    assert got.predictions[0].tpot_ms is None


def test_ties_go_to_fewer_in_flight_then_the_lower_index():
    # the same demand ahead of an urgent request: one request at 30 ms (weight 2.67) on
    # replica 1, two at 60 ms (1.33 each) on replica 0; replica 1 holds fewer
    a = report(("urgent", 60.0, 0, 2))
    b = report(("", 30.0, 0, 1))
    got = pick(URGENT, [a, b], 10.0, CFG)
    assert got.predictions[0].margin == pytest.approx(got.predictions[1].margin)
    assert got.replica == 1
    assert pick(URGENT, [b, a], 10.0, CFG).replica == 0
    assert pick(URGENT, [b, b, b], 10.0, CFG).replica == 0


def test_requests_sent_since_the_last_report_count_as_waiting():
    a, b = report(), report()
    assert pick(URGENT, [a, b], 10.0, CFG).replica == 0
    a2 = a.with_sent([URGENT, URGENT])
    assert a2.waiting == 2 and a2.loads == (ClassLoad("urgent", 60.0, 2, 0),)
    assert pick(URGENT, [a2, b], 10.0, CFG).replica == 1


@pytest.mark.parametrize("reports, now, why", [
    ([report(at=10.0), report(at=7.0)], 10.0, "replica 1's report is 3.0 s old"),
    ([report(at=10.0), None], 10.0, "no report from replica 1"),
    ([], 10.0, "no replicas"),
])
def test_stale_or_missing_reports_leave_the_choice_to_the_router(reports, now, why):
    got = pick(URGENT, reports, now, CFG)
    assert got.replica is None and got.predictions == () and got.why == why


def test_a_report_reads_from_the_replica_route_body():
    doc = {"in_flight": [{"slo_class": "urgent", "tpot_slo_ms": 60, "waiting": 1,
                          "running": 2},
                         {"slo_class": "best-effort", "tpot_slo_ms": None, "waiting": 0,
                          "running": 1}],
           "recent": [{"slo_class": "urgent", "finished": 3, "tpot_ms": 55.5,
                       "ttft_ms": None}]}
    r = from_json(doc, 4.0)
    assert r.read_at == 4.0 and r.in_flight == 4 and r.waiting == 1
    assert r.recent_of("urgent") == Recent("urgent", 3, 55.5, None)
    with pytest.raises(ValueError, match="not a replica load report"):
        from_json({"in_flight": [{"slo_class": "urgent"}]}, 4.0)


@pytest.mark.parametrize("field, value", [("baseline_ms", 0), ("capacity", -1),
                                          ("stale_s", float("nan")), ("prefill_ms", 0.0)])
def test_a_bad_config_says_which_field(field, value):
    kw = {"baseline_ms": 80, "capacity": 4, field: value}
    with pytest.raises(ValueError, match=field):
        PickerConfig(**kw)

"""The fleet view's arithmetic (adaserve/sglang/fleet_page.py) on reports made here: a
replica's tallies as its report carries them, the fleet's the replicas' added up, each
attainment over the requests that had that objective, a replica that did not answer.
The view on a real fleet, in Chromium, is tests/sglang_tier/test_fleet_picker.py."""

from __future__ import annotations

from adaserve.picker.report import ClassLoad, ClassTally, Recent, ReplicaReport, from_json
from adaserve.sglang.fleet_page import fleet_view


def _tally(cls: str, outcomes) -> ClassTally:
    t = ClassTally(cls)
    for tpot, ttft in outcomes:
        met = [m for m in (tpot, ttft) if m is not None]
        t = t.with_finished(tpot, ttft, all(met) if met else None)
    return t


def test_a_tally_counts_each_objective_over_the_requests_that_had_it():
    t = _tally("urgent", [(True, True), (True, False), (False, None), (None, None)])
    assert (t.finished, t.tpot_met, t.tpot_of, t.ttft_met, t.ttft_of, t.met, t.met_of) == \
        (4, 2, 3, 1, 2, 1, 3)
    # what the replica's GET /adaserve/load carries, read back by the front
    assert from_json({"totals": [t.to_json()]}, 0.0).totals == (t,)


def test_the_fleet_adds_the_replicas_up_and_keeps_each_replicas_own():
    r0 = ReplicaReport(0.0, (ClassLoad("urgent", 60.0, 1, 2),),
                       (Recent("urgent", 3, 50.0, 400.0),),
                       (_tally("urgent", [(True, True)] * 3 + [(False, True)]),
                        _tally("relaxed", [(True, True)])))
    r1 = ReplicaReport(0.0, (), (), (_tally("urgent", [(True, False)] * 4),))
    view = fleet_view(["http://a", "http://b", "http://c"], [r0, r1, None],
                      ["urgent", "relaxed", "best-effort"], {"named": 7, "fallback": 1})
    fleet = {r["slo_class"]: r for r in view["fleet"]}
    assert list(fleet) == ["urgent", "relaxed", "best-effort"]  # the configured order
    u = fleet["urgent"]
    assert (u["finished"], u["tpot"], u["ttft"], u["e2e"]) == (8, 7 / 8, 4 / 8, 3 / 8)
    assert (u["waiting"], u["running"]) == (1, 2)
    assert fleet["best-effort"]["finished"] == 0 and fleet["best-effort"]["tpot"] is None
    rep0 = {r["slo_class"]: r for r in view["replicas"][0]["classes"]}
    assert rep0["urgent"]["tpot"] == 3 / 4 and rep0["urgent"]["recent_ttft_ms"] == 400.0
    assert view["replicas"][1]["classes"][0]["ttft"] == 0.0
    assert view["replicas"][2] == {"index": 2, "url": "http://c", "answered": False,
                                   "classes": []}
    assert view["picks"] == {"named": 7, "fallback": 1}

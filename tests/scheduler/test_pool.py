import pytest
from hypothesis import given
from hypothesis import strategies as st

from adaserve.scheduler.pool import PoolFull, RequestPool


def _drain(pool):
    out = []
    while pool:
        out.append(pool.pop()[0])
    return out


def test_fifo_pops_by_arrival_then_push_order():
    pool = RequestPool(capacity=10)
    pool.push("late", "L", arrival_s=3.0, tpot_slo_s=0.01)
    pool.push("early", "E", arrival_s=1.0, tpot_slo_s=None)
    pool.push("tie-1", "T1", arrival_s=2.0, tpot_slo_s=0.1)
    pool.push("tie-2", "T2", arrival_s=2.0, tpot_slo_s=0.001)
    assert pool.ids() == ["early", "tie-1", "tie-2", "late"]
    assert pool.peek() == ("early", "E")
    assert len(pool) == 4  # peek does not remove
    assert pool.pop() == ("early", "E")
    assert _drain(pool) == ["tie-1", "tie-2", "late"]


def test_deadline_puts_strict_requests_first():
    pool = RequestPool(capacity=10, order="deadline", best_effort_tpot_s=1.0, horizon_tokens=8)
    pool.push("relaxed", None, arrival_s=0.5, tpot_slo_s=0.1)  # key 0.5 + 0.8 = 1.3
    pool.push("best-effort", None, arrival_s=0.0, tpot_slo_s=None)  # key 0 + 8 = 8
    pool.push("strict", None, arrival_s=1.0, tpot_slo_s=0.01)  # key 1.0 + 0.08 = 1.08
    assert pool.key(1.0, 0.01) == pytest.approx(1.08)
    assert pool.key(0.0, None) == pytest.approx(8.0)
    assert _drain(pool) == ["strict", "relaxed", "best-effort"]


def test_deadline_does_not_starve_old_relaxed_requests():
    pool = RequestPool(capacity=10, order="deadline")
    pool.push("old-relaxed", None, arrival_s=0.0, tpot_slo_s=0.1)  # 0.8
    pool.push("new-strict", None, arrival_s=10.0, tpot_slo_s=0.01)  # 10.08
    assert pool.pop()[0] == "old-relaxed"


def test_capacity_and_full():
    pool = RequestPool(capacity=2)
    pool.push("a", 1, 0.0, None)
    assert not pool.full
    pool.push("b", 2, 1.0, None)
    assert pool.full
    with pytest.raises(PoolFull):
        pool.push("c", 3, 2.0, None)
    assert "c" not in pool and len(pool) == 2
    pool.pop()
    pool.push("c", 3, 2.0, None)
    assert pool.ids() == ["b", "c"]


def test_duplicate_id_rejected_even_when_full():
    pool = RequestPool(capacity=1)
    pool.push("a", 1, 0.0, None)
    with pytest.raises(ValueError, match="already waiting"):
        pool.push("a", 2, 1.0, None)
    assert pool.pop() == ("a", 1)


def test_remove_for_aborts():
    pool = RequestPool(capacity=10, order="deadline")
    for i, tpot in enumerate([0.05, 0.01, None, 0.02]):
        pool.push(f"r{i}", i, arrival_s=float(i), tpot_slo_s=tpot)
    before = pool.ids()
    assert pool.remove("r1") == 1
    assert pool.remove("r1") is None
    assert pool.remove("missing") is None
    assert "r1" not in pool and "r0" in pool
    assert pool.ids() == [rid for rid in before if rid != "r1"]
    pool.push("r1", 10, arrival_s=0.0, tpot_slo_s=0.01)  # an aborted id may come back
    assert pool.peek() == ("r1", 10)


def test_empty_pool_raises_index_error():
    pool = RequestPool(capacity=1)
    with pytest.raises(IndexError):
        pool.pop()
    with pytest.raises(IndexError):
        pool.peek()
    assert len(pool) == 0 and not pool and list(pool) == []


def test_ids_need_not_be_orderable():
    pool = RequestPool(capacity=5)
    ids = [object(), "s", 3, ("t", 1), None]
    for rid in ids:
        pool.push(rid, None, arrival_s=1.0, tpot_slo_s=None)  # all keys tie
    assert _drain(pool) == ids


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 2.5}, "capacity"),
        ({"capacity": 4, "order": "lifo"}, "order"),
        ({"capacity": 4, "best_effort_tpot_s": 0.0}, "best_effort_tpot_s"),
        ({"capacity": 4, "best_effort_tpot_s": float("inf")}, "best_effort_tpot_s"),
        ({"capacity": 4, "horizon_tokens": 0}, "horizon_tokens"),
    ],
)
def test_constructor_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RequestPool(**kwargs)


@pytest.mark.parametrize(
    "arrival, tpot, match",
    [
        (float("nan"), None, "arrival_s"),
        (0.0, 0.0, "tpot_slo_s"),
        (0.0, -1.0, "tpot_slo_s"),
        (0.0, float("nan"), "tpot_slo_s"),
    ],
)
def test_push_validation(arrival, tpot, match):
    pool = RequestPool(capacity=2)
    with pytest.raises(ValueError, match=match):
        pool.push("a", None, arrival, tpot)
    assert len(pool) == 0


requests = st.lists(
    st.tuples(
        st.floats(0, 1e4, allow_nan=False),
        st.one_of(st.none(), st.floats(1e-4, 1.0, allow_nan=False)),
    ),
    max_size=40,
)


@given(requests, st.sampled_from(["fifo", "deadline"]), st.integers(1, 64))
def test_pop_order_equals_sorted_keys(reqs, order, horizon):
    pool = RequestPool(capacity=max(1, len(reqs)), order=order, horizon_tokens=horizon)
    for i, (arrival, tpot) in enumerate(reqs):
        pool.push(i, (arrival, tpot), arrival, tpot)
    expected = sorted(range(len(reqs)), key=lambda i: (pool.key(*reqs[i]), i))
    assert pool.ids() == expected
    assert _drain(pool) == expected


@given(requests, st.lists(st.integers(0, 39), max_size=20))
def test_removals_keep_order_of_the_rest(reqs, to_remove):
    pool = RequestPool(capacity=max(1, len(reqs)), order="deadline")
    for i, (arrival, tpot) in enumerate(reqs):
        pool.push(i, None, arrival, tpot)
    order = pool.ids()
    gone = {i for i in to_remove if i < len(reqs)}
    for i in to_remove:
        pool.remove(i)
    assert _drain(pool) == [i for i in order if i not in gone]

"""Fig. 14's count of the baselines as their vLLM client counts them
(benchmarks/paper/fig14.py, `benchmark_count`): a request of an absolute-SLO class passes
once it completes, whatever its TPOT (the client reads -150 as 150 s a token); a ratio
class passes on its TPOT; the denominator is every request sent."""

from __future__ import annotations

import pytest

from benchmarks.paper import fig14
from benchmarks.paper.kit import KIT


def _classes(ratio_att: float, absolute_att: float) -> dict:
    return {"x1.2": {"sent": 10, "attainment": ratio_att},
            "150ms": {"sent": 6, "attainment": absolute_att},
            "50ms": {"sent": 4, "attainment": absolute_att},
            "overall": {"sent": 20, "attainment": 0.0}}


def test_absolute_classes_pass_whatever_their_tpot():
    assert fig14.benchmark_count(_classes(30.0, 0.0)) == pytest.approx(100 * (10 + 3) / 20)
    assert fig14.benchmark_count(_classes(30.0, 100.0)) == pytest.approx(65.0)


def test_the_ratio_class_counts_on_its_tpot_over_every_request_sent():
    assert fig14.benchmark_count(_classes(0.0, 50.0)) == pytest.approx(50.0)
    assert fig14.benchmark_count(_classes(100.0, 50.0)) == pytest.approx(100.0)


@pytest.mark.skipif(not (KIT / "traces").is_dir(), reason="needs the paper-scale kit")
def test_the_floor_is_the_absolute_classes_share_of_the_trace():
    n_abs, n = fig14.absolute_share(fig14.TRACE)
    assert (n_abs, n) == (464 + 486, 1445)

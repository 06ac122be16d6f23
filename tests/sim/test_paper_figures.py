"""The paper-figure pages' arithmetic (benchmarks/paper/goals.py, values.py):
the goals are computed from data, so a wrong comparison would publish a wrong verdict."""

from __future__ import annotations


import pytest

from benchmarks.paper import goals
from benchmarks.paper import values as _paper_values
from benchmarks.paper.figures import FIGURES

PAPER_MD = """\
### Fig. 8 [plot]
**Llama-3.1-70B-Instruct — SLO attainment (%)** (x = RPS)

| system | 2.6 | 2.8 |
|---|---|---|
| AdaServe | 98.4 | 98.6 |
| vLLM | 46.9 | 43.2 |

### Fig. 10 [plot]
**Qwen2.5-32B-Instruct — goodput (tokens/s)** (x = urgent %)

| system | 20% | 30% |
|---|---|---|
| AdaServe | 637 | 677 |
"""


def test_paper_tables_are_read_by_figure_set_up_and_metric(tmp_path):
    f = tmp_path / "paper_results.md"
    f.write_text(PAPER_MD)
    got = _paper_values.read(f)
    assert got[(8, "llama", "attainment")] == {"adaserve-authors": {2.6: 98.4, 2.8: 98.6},
                                               "vllm": {2.6: 46.9, 2.8: 43.2}}
    assert got[(10, "qwen", "goodput")] == {"adaserve-authors": {0.2: 637.0, 0.3: 677.0}}


def _curves(values: dict[str, list[float]], xs=(1.0, 2.0, 3.0)) -> dict:
    return {s: {x: [v] for x, v in zip(xs, vals)} for s, vals in values.items()}


ATT = {"adaserve-authors": [99, 90, 80], "sarathi": [70, 50, 30], "vllm": [60, 40, 20],
       "vllm-spec-4": [95, 65, 40], "vllm-spec-6": [94, 55, 35], "vllm-spec-8": [90, 50, 30]}
GOOD = {s: [10 * a for a in v] for s, v in ATT.items()}


def test_the_best_baseline_point_is_where_the_best_baseline_first_falls_below_60():
    x, best, b_att, b_good = goals.best_baseline_point(_curves(ATT), _curves(GOOD),
                                                       [1.0, 2.0, 3.0])
    assert (x, best, b_att, b_good) == (3.0, "vllm-spec-4", 40.0, 400.0)
    row = goals._ratio_rows("t", _curves(ATT), _curves(GOOD), [1.0, 2.0, 3.0])[0]
    assert "2.00x (met)" in row  # 80 / 40 attainment, 800 / 400 goodput


def test_a_best_baseline_that_never_falls_below_60_is_reported_at_the_last_point():
    att = {s: [99, 98, 97] for s in ATT}
    x, _, b_att, _ = goals.best_baseline_point(_curves(att), _curves(att), [1.0, 2.0, 3.0])
    assert x is None and b_att == 97
    assert "never drops below 60%" in goals._ratio_rows("t", _curves(att), _curves(att),
                                                        [1.0, 2.0, 3.0])[0]


def test_ordering_flags_a_pair_the_paper_separates_and_ignores_reading_error():
    paper = {(8, "llama", "attainment"): {
        "adaserve-authors": {1.0: 99.0, 2.0: 90.0, 3.0: 80.0},
        "vllm": {1.0: 98.0, 2.0: 70.0, 3.0: 20.0}}}
    ours = {"llama": {"attainment": _curves({"adaserve-authors": [97, 60, 80], "vllm": [99, 70, 20]})}}
    rows = goals.ordering(FIGURES["fig8"], ours, paper, ("adaserve-authors", "vllm"))
    row = next(r for r in rows if r.startswith("| llama"))
    # x = 1: the paper's 1 point is within its reading error, not counted;
    # x = 2: reversed (60 < 70); x = 3: agrees
    assert "| 2 of 3 | 1 of 2 | 2: adaserve-authors > vllm |" in row


def test_an_improvement_needs_five_points_without_losing_goodput():
    att = {"adaserve-authors": [90, 80, 70, 60], "adaserve-authors:triage=on": [91, 86, 74, 66],
           "adaserve-authors:calibrate=on": [90, 90, 90, 90]}
    good = {"adaserve-authors": [100] * 4, "adaserve-authors:triage=on": [100] * 4,
            "adaserve-authors:calibrate=on": [98] * 4}
    xs = (1.0, 2.0, 3.0, 4.0)
    data = {"llama": {"attainment": _curves(att, xs), "goodput": _curves(good, xs)}}
    rows = goals.improvement(FIGURES["fig8"], data, tuple(att))
    triage = [r for r in rows if r.startswith("|") and "adaserve-authors:triage=on" in r]
    assert [r.split("|")[3].strip() for r in triage] == ["2", "3", "4"]  # the top three rates
    assert [r.rstrip(" |").endswith("not met") for r in triage] == [False, True, False]
    # +30 points but 2% less goodput: not met
    assert all(r.rstrip(" |").endswith("not met") for r in rows
               if r.startswith("|") and "calibrated" in r)
    # the room: the best variant at the lightest point (triage's 91 at 1.0)
    assert any(r.startswith("- llama: at the lightest point (1)") and "(adaserve-authors:triage=on) "
               "attains 91.0%" in r for r in rows)


@pytest.mark.parametrize("key", sorted(FIGURES))
def test_every_figure_names_the_kits_trace_files(key):
    fig = FIGURES[key]
    for pair, xs in fig.xs.items():
        names = {fig.trace(x).name for x in xs}
        assert len(names) == len(xs)
        assert all(n.endswith(".csv") for n in names)


def test_closeness_counts_points_within_5_and_10_and_holds_baselines_to_10():
    xs = (1.0, 2.0, 3.0, 4.0, 5.0)
    paper = {(8, "llama", "attainment"): {
        "adaserve-authors": dict(zip(xs, [90.0] * 5)), "vllm": dict(zip(xs, [50.0] * 5))}}
    # adaserve: errors 0, +4, -5, +6, -9: 3 within 5 (60% < 80%), all within 10 -> not met;
    # vllm: errors +1, +2, -11, +3, +4: 4 of 5 within 10 (80%) -> met
    ours = {"llama": {"attainment": _curves({"adaserve-authors": [90, 94, 85, 96, 81],
                                             "vllm": [51, 52, 39, 53, 54]}, xs)}}
    rows = goals.closeness(ours, paper, ("adaserve-authors", "vllm"), 8, "attainment")
    ada = next(r for r in rows if "| adaserve-authors |" in r)
    vllm = next(r for r in rows if "| vllm |" in r)
    assert "3 of 5 | 5 of 5 | -9.0 | not met" in ada
    assert "| +9.0 |" not in ada  # the largest error keeps its sign
    assert "4 of 5 | -11.0 | met" in vllm
    # goodput is compared in percent of the paper's value
    pg = {(9, "llama", "goodput"): {"adaserve-authors": dict(zip(xs, [500.0] * 5))}}
    og = {"llama": {"goodput": _curves({"adaserve-authors": [510, 520, 480, 540, 500]}, xs)}}
    row = goals.closeness(og, pg, ("adaserve-authors",), 9, "goodput")[-2]
    assert "4 of 5 | 5 of 5 | +8.0 | met" in row


def test_the_papers_ratio_is_taken_where_each_curves_best_baseline_falls_below_60():
    xs = (1.0, 2.0, 3.0)
    paper = {(8, "llama", "attainment"): _curves(ATT, xs), (9, "llama", "goodput"):
             _curves(GOOD, xs)}
    paper = {k: {s: {x: v[0] for x, v in c.items()} for s, c in d.items()}
             for k, d in paper.items()}
    # the paper: at 2.0 spec-4 is the best baseline at 65 -> no; at 3.0 spec-4 40 < 60:
    # 80 / 40 = 2.0x. Simulated: the same but adaserve 88 at 3.0 -> 2.2x, 1.1 of the paper's
    sim = {s: list(v) for s, v in ATT.items()}
    sim["adaserve-authors"][2] = 88
    ours = {"llama": {"attainment": _curves(sim, xs), "goodput": _curves(GOOD, xs)}}
    row = goals.paper_ratio(ours, paper)[-2]
    assert "| 3, vllm-spec-4, 2.00x | 3, vllm-spec-4, 2.20x | 1.10 | met |" in row
    sim["adaserve-authors"][2] = 93  # 2.325x: 1.1625 of the paper's, beyond 15%
    ours["llama"]["attainment"] = _curves(sim, xs)
    assert goals.paper_ratio(ours, paper)[-2].endswith("| not met |")


def test_goals_compare_ratios_rounded_and_never_count_the_text_reading_as_an_improvement():
    # 15.075 is 1.5 x 10.05 exactly, but their float quotient is 1.4999999999999998
    assert 15.075 / 10.05 < 1.5
    att = {s: [99.0, 75.0, 10.05] for s in goals.BASELINES}
    att["adaserve-authors"] = [99.0, 99.0, 15.075]
    xs = (1.0, 2.0, 3.0)
    data = {"llama": {"attainment": _curves(att, xs), "goodput": _curves(att, xs)}}
    rows = goals.goals_fig8(FIGURES["fig8"], data, {}, tuple(att))
    row = next(r for r in rows if "simulated, adaserve-authors |" in r)
    assert "1.50x (met)" in row
    att2 = {"adaserve-authors": [90, 80, 70, 60], goals.TEXT: [99, 99, 99, 99]}
    data2 = {"llama": {"attainment": _curves(att2, (1.0, 2.0, 3.0, 4.0)),
                       "goodput": _curves(att2, (1.0, 2.0, 3.0, 4.0))}}
    assert goals.improvement(FIGURES["fig8"], data2, tuple(att2)) == []

"""The bench result page from hand-made runs: tables, goals computed from the data, plots."""

from __future__ import annotations

from adaserve.loadgen.records import Record, write_jsonl
from adaserve.loadgen.report import cells, goals, write_report


def _run(tmp_path, policy, point, att, good, urgent_att, e2e=None, finish_s=1.0, paper=None):
    ttft = {"p50": 120.0, "p90": 150.0, "p99": 180.0}
    rows = [{"slo_class": "urgent", "attainment": urgent_att, "attainment_ttft": e2e,
             "attainment_paper": paper, "ttft_ms": ttft},
            {"slo_class": "overall", "attainment": att, "attainment_ttft": e2e,
             "attainment_paper": paper, "goodput_tok_s": good, "ttft_ms": ttft}]
    d = f"{policy}-{point}-s0"
    # sends at 0.1 s apart over 0.4 s; the last finishes at finish_s + 0.4 s
    recs = [Record(i, "urgent", 100.0, 0.1 * (i - 1), 0.1 * (i - 1), "ok", 0.1 * i,
                   0.1 * i + 0.09 * i, 0.1 * (i - 1) + finish_s, 10)
            for i in range(1, 6)]
    write_jsonl(recs, tmp_path / "raw" / d / "records.jsonl")
    return {"policy": policy, "point": point, "seed": 0, "dir": d,
            "server": {"model": "m", "draft": "d", "budget": 16, "baseline_latency_ms": 100.0,
                       "slo_classes": [{"name": "urgent", "tpot_ms": 100.0}]},
            "summary": {"rows": rows}}


def _meta(prompts: str = "short") -> dict:
    return {"experiment": "rate", "command": "adaserve bench", "machine": "m", "date": "d",
            "wall_minutes": 1.0, "requests_per_point": 5, "repeats": 1, "mix": "urgent=1",
            "prompts": prompts}


def test_rate_goal_is_read_at_every_load_where_the_best_baseline_is_below_60(tmp_path):
    data = {  # policy: [(attainment, goodput)] at rates 0.5, 1.0, 2.0
        "adaserve": [(0.99, 10.0), (0.90, 16.0), (0.5, 9.0)],
        "incremental": [(0.98, 9.0), (0.55, 12.0), (0.2, 4.0)],
        "global-greedy": [(0.97, 9.5), (0.50, 11.0), (0.3, 5.0)],
    }
    runs = [_run(tmp_path, pol, pt, a, g, a) for pol, vals in data.items()
            for pt, (a, g) in zip(("0.5", "1.0", "2.0"), vals)]
    t = cells(runs)
    lines = goals("rate", t, list(data), ["0.5", "1.0", "2.0"])
    text = " ".join(lines)
    assert "Rate 0.5" not in text  # every baseline above 60% there
    assert "Rate 1.0: the best baseline" in text and "is incremental with 55.0%" in text
    assert "**1.64x** (goal >= 1.0x: met)" in text  # 0.90 / 0.55
    assert "1.33x the best baseline's 12.00" in text  # goodput 16 / 12
    assert "Rate 2.0: the best baseline" in text and "is global-greedy with 30.0%" in text
    assert "**1.67x**" in text  # 0.5 / 0.3
    assert "per seed" not in text  # one seed: no paired spread to give
    meta = _meta()
    write_report(tmp_path, meta, runs)
    md = (tmp_path / "summary.md").read_text()
    assert "| 1.0 | 90.0% | 55.0% | 50.0% |" in md
    for png in ("attainment_vs_rate.png", "goodput_vs_rate.png", "tpot_cdf_rate.png"):
        assert (tmp_path / png).stat().st_size > 5000 and f"]({png})" in md


def test_goals_say_when_they_are_not_met_or_not_reached(tmp_path):
    runs = [_run(tmp_path, "adaserve", "0.8", 0.9, 5.0, 0.8),
            _run(tmp_path, "incremental", "0.8", 0.95, 5.0, 0.9)]
    t = cells(runs)
    assert "NOT met" in goals("slo-scale", t, ["adaserve", "incremental"], ["0.8"])[0]
    assert "does not reach" in goals("rate", t, ["adaserve", "incremental"], ["0.8"])[0]


def test_page_gives_both_readings_ttft_and_drain_and_only_non_adaserve_baselines(tmp_path):
    # adaserve-authors attains more than adaserve but is AdaServe, not a baseline: the goal
    # compares against incremental; end to end adaserve falls behind it (0.3 vs 0.4)
    runs = [_run(tmp_path, "adaserve", "2.0", 0.5, 8.0, 0.5, e2e=0.3, finish_s=3.0),
            _run(tmp_path, "adaserve-authors", "2.0", 0.58, 9.0, 0.58, e2e=0.5),
            _run(tmp_path, "incremental", "2.0", 0.4, 6.0, 0.4, e2e=0.4)]
    t = cells(runs)
    text = " ".join(goals("rate", t, ["adaserve", "adaserve-authors", "incremental"], ["2.0"]))
    assert "incremental with 40.0%" in text and "**1.25x**" in text and ": met" in text
    assert "end to end 30.0% = **0.75x** the best baseline's 40.0% (NOT met)" in text
    meta = _meta()
    write_report(tmp_path, meta, runs)
    md = (tmp_path / "summary.md").read_text()
    assert "## End-to-end attainment" in md and "| 2.0 | 30.0% | 50.0% | 40.0% |" in md
    # per class: TPOT / end to end (these runs recorded no paper's reading)
    assert "| adaserve | 2.0 | 50.0% / 30.0% |" in md and "before the paper's reading" in md
    assert "| adaserve | 2.0 | 120 / 180 |" in md  # TTFT p50 / p99 of the class
    # drain: the sends span 0.4 s; adaserve's last request ends 3.0 s after the last send
    assert "| 2.0 | 0.4 + 3.0 | 0.4 + 1.0 | 0.4 + 1.0 |" in md


def test_goal_is_read_on_the_papers_reading_where_the_runs_recorded_it(tmp_path):
    # TPOT puts turbospec first (0.5 > 0.4) but the paper's reading incremental (0.55 >
    # 0.45): the goal takes the best baseline by the paper's reading and states TPOT beside
    runs = [_run(tmp_path, "adaserve", "3.0", 0.6, 8.0, 0.6, e2e=0.3, paper=0.66),
            _run(tmp_path, "incremental", "3.0", 0.4, 6.0, 0.4, e2e=0.35, paper=0.55),
            _run(tmp_path, "turbospec", "3.0", 0.5, 6.0, 0.5, e2e=0.2, paper=0.45)]
    policies = ["adaserve", "incremental", "turbospec"]
    text = " ".join(goals("rate", cells(runs), policies, ["3.0"]))
    assert "is incremental with 55.0% attainment" in text
    assert "adaserve: 66.0% = **1.20x** (goal >= 1.0x: met)" in text
    assert "end to end 30.0% = **0.86x** the best baseline's 35.0% (NOT met)" in text
    assert "TPOT 60.0% = 1.20x the best baseline's 50.0%" in text
    write_report(tmp_path, _meta(), runs)
    md = (tmp_path / "summary.md").read_text()
    paper = md.index("the paper's reading, against")
    tpot = md.index("TPOT within its SLO\n")
    assert paper < tpot
    assert "| 3.0 | 66.0% | 55.0% | 45.0% |" in md[paper:tpot]
    assert "| 3.0 | 60.0% | 40.0% | 50.0% |" in md[tpot:]
    assert "| adaserve | 3.0 | 66.0% / 60.0% / 30.0% |" in md


def test_rate_goal_pairs_the_seeds_and_reads_every_adaserve_entry(tmp_path):
    # two seeds: adaserve +10 and -4 points against incremental -> +3.0, SE 7.0; the arm
    # adaserve-table (another AdaServe entry, not a baseline) gets its own line
    runs = []
    for seed, (a, i, tab) in enumerate([(0.5, 0.4, 0.45), (0.36, 0.4, 0.5)]):
        for pol, att in (("adaserve", a), ("incremental", i), ("adaserve-table", tab)):
            r = _run(tmp_path, pol, "2.0", att, 5.0, att)
            runs.append({**r, "seed": seed, "dir": f"{r['dir']}{seed}"})
    t = cells(runs)
    text = " ".join(goals("rate", t, ["adaserve", "incremental", "adaserve-table"], ["2.0"]))
    assert "adaserve: 43.0% = **1.07x**" in text
    assert "(per seed +3.0 points, SE 7.0, 2 seeds)" in text
    assert "adaserve-table: 47.5% = **1.19x**" in text
    assert "(per seed +7.5 points, SE 2.5, 2 seeds)" in text


def test_the_end_to_end_ratio_is_paired_against_the_best_baseline_end_to_end(tmp_path):
    # end to end adaserve +5 and -5 points against turbospec, the best baseline end to end
    # (incremental is the best on the paper's reading): mean 0.0, SE 5.0
    runs = []
    for seed, (a, i, tb) in enumerate([(0.3, 0.1, 0.25), (0.2, 0.1, 0.25)]):
        for pol, e2e, paper in (("adaserve", a, 0.6), ("incremental", i, 0.5),
                                ("turbospec", tb, 0.4)):
            r = _run(tmp_path, pol, "2.0", paper, 5.0, paper, e2e=e2e, paper=paper)
            runs.append({**r, "seed": seed, "dir": f"{r['dir']}{seed}"})
    text = " ".join(goals("rate", cells(runs), ["adaserve", "incremental", "turbospec"],
                          ["2.0"]))
    assert "is incremental with 50.0%" in text
    assert ("end to end 25.0% = **1.00x** the best baseline's 25.0% (met) (per seed +0.0 "
            "points, SE 5.0, 2 seeds)") in text


def test_rate_goal_reads_an_adaserve_spec_with_options_without_the_preset(tmp_path):
    # a run of adaserve:prefill=yield and baselines only: the spec is AdaServe, not a
    # baseline, and is read against the best of the others
    runs = [_run(tmp_path, "adaserve:prefill=yield", "0.06", 0.8, 3.2, 0.8, e2e=0.55),
            _run(tmp_path, "turbospec", "0.06", 0.45, 1.9, 0.45, e2e=0.3),
            _run(tmp_path, "incremental", "0.06", 0.3, 1.3, 0.3, e2e=0.2)]
    policies = ["adaserve:prefill=yield", "turbospec", "incremental"]
    text = " ".join(goals("rate", cells(runs), policies, ["0.06"]))
    assert "turbospec with 45.0%" in text
    assert "adaserve:prefill=yield: 80.0% = **1.78x** (goal >= 1.0x: met)" in text
    assert "end to end 55.0% = **1.83x**" in text
    assert "needs" in goals("rate", cells(runs[1:]), policies[1:], ["0.06"])[0]


def test_page_lists_each_runs_online_draft_updates(tmp_path):
    """A run of a server adapting its draft online carries what its trainer did (bench's
    online_delta); the page shows it per run, and only for those runs."""
    runs = [_run(tmp_path, "adaserve", "1.0", 0.5, 8.0, 0.5),
            _run(tmp_path, "adaserve-online", "1.0", 0.52, 8.5, 0.52)]
    runs[1]["online_draft"] = {"updates": 2.0, "rollbacks": 1.0, "training_at_end": 1.0}
    meta = _meta("shift")
    write_report(tmp_path, meta, runs)
    md = (tmp_path / "summary.md").read_text()
    assert "## Online draft updates" in md
    assert "| adaserve-online | 1.0 | 0 | 2 | 1 | yes |" in md
    assert "| adaserve | 1.0 | 0 |" not in md
    write_report(tmp_path, meta, runs[:1])
    assert "Online draft" not in (tmp_path / "summary.md").read_text()

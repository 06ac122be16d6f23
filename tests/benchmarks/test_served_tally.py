"""benchmarks/serving/served_tally.py on hand-made sweeps: which rates it reads, the
paired per-seed differences per reading and their pooled mean and standard error."""

from __future__ import annotations

import json

import pytest

from benchmarks.serving import served_tally


def _run(policy, rate, seed, paper, e2e, tpot):
    return {"policy": policy, "point": rate, "seed": seed, "summary": {"rows": [
        {"slo_class": "overall", "attainment_paper": paper, "attainment_ttft": e2e,
         "attainment": tpot, "goodput_tok_s": 1.0}]}}


def test_tally_reads_only_overloaded_rates_and_pools_paired_differences(tmp_path):
    runs = []
    for seed, (ours_e2e, inc_e2e) in ((1, (0.5, 0.4)), (2, (0.3, 0.4))):
        runs += [_run("adaserve", "2.0", seed, 0.9, ours_e2e, 0.8),
                 _run("incremental", "2.0", seed, 0.5, inc_e2e, 0.5),
                 _run("turbospec", "2.0", seed, 0.55, 0.2, 0.45),
                 # every baseline above 60% on the paper's reading: not a goal point
                 _run("adaserve", "1.0", seed, 0.9, 0.1, 0.9),
                 _run("incremental", "1.0", seed, 0.7, 0.7, 0.7),
                 _run("turbospec", "1.0", seed, 0.65, 0.65, 0.65)]
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "summary.json").write_text(json.dumps({"commit": "c0", "runs": runs}))
    data = served_tally.tally(tmp_path, (("sweep", "adaserve"),))
    assert [r["rate"] for r in data["rows"]] == ["2.0"]
    row = data["rows"][0]
    # the best baseline per reading: turbospec on the paper's, incremental end to end
    assert row["paper"]["baseline"] == "turbospec"
    assert row["e2e"]["baseline"] == "incremental"
    assert row["e2e"]["diffs"] == pytest.approx([10.0, -10.0])
    e2e = data["pooled"]["e2e"]
    assert (e2e["pairs"], e2e["seeds_behind"], e2e["points_met"]) == (2, 1, 1)
    assert e2e["mean"] == pytest.approx(0.0) and e2e["se"] == pytest.approx(10.0)
    assert data["pooled"]["paper"]["mean"] == pytest.approx(35.0)
    text = "\n".join(served_tally.page([("Short", data)],
                                        served_tally.Made("cmd", "m", "d", "c")))
    assert "## Short" in text and "## Long contexts" not in text
    assert "within two of a tie), behind on 1 of 2 seed-points" in text


def test_the_long_context_section_reads_its_own_baselines(tmp_path):
    """The static chain is a baseline of the long-context workload only: there it can be
    the best, and the page gets a section of its own."""
    runs = []
    for seed in (1, 2):
        runs += [_run("adaserve", "0.06", seed, 0.6, 0.5, 0.6),
                 _run("incremental", "0.06", seed, 0.3, 0.3, 0.3),
                 _run("chain-4", "0.06", seed, 0.4, 0.2, 0.4)]
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "summary.json").write_text(json.dumps({"commit": "c1", "runs": runs}))
    long = served_tally.tally(tmp_path, (("long", "adaserve"),), ("incremental", "chain-4"))
    row = long["rows"][0]
    assert row["paper"]["baseline"] == "chain-4"
    assert row["e2e"]["baseline"] == "incremental"
    assert long["pooled"]["paper"]["mean"] == pytest.approx(20.0)
    with pytest.raises(KeyError):  # turbospec ran no run here: not a baseline of it
        served_tally.tally(tmp_path, (("long", "adaserve"),), ("turbospec",))
    short = served_tally.tally(tmp_path, ())
    assert short["rows"] == []
    text = "\n".join(served_tally.page([("Short", short), ("Long contexts", long)],
                                        served_tally.Made("cmd", "m", "d", "c")))
    assert "## Long contexts" in text and "`chain-4`" in text
    assert "none is a goal point" in text  # the short section had no point to read

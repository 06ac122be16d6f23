"""benchmarks/serving/served_tally.py on hand-made sweeps: which rates it reads, the
paired per-seed differences per reading and their pooled mean and standard error."""

from __future__ import annotations

import json

import pytest

from benchmarks.serving import served_tally


def _run(policy, rate, seed, paper, e2e, tpot):
    return {"policy": policy, "point": rate, "seed": seed, "summary": {"rows": [
        {"slo_class": "overall", "attainment_paper": paper, "attainment_ttft": e2e,
         "attainment": tpot}]}}


def test_tally_reads_only_overloaded_rates_and_pools_paired_differences(tmp_path, monkeypatch):
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
    monkeypatch.setattr(served_tally, "SWEEPS", (("sweep", "adaserve"),))
    data = served_tally.tally(tmp_path)
    assert [r["rate"] for r in data["rows"]] == ["2.0"]
    row = data["rows"][0]
    # the best baseline per reading: turbospec on the paper's, incremental end to end
    assert row["attainment_paper"]["baseline"] == "turbospec"
    assert row["attainment_ttft"]["baseline"] == "incremental"
    assert row["attainment_ttft"]["diffs"] == pytest.approx([10.0, -10.0])
    e2e = data["pooled"]["attainment_ttft"]
    assert (e2e["pairs"], e2e["seeds_behind"], e2e["points_met"]) == (2, 1, 1)
    assert e2e["mean"] == pytest.approx(0.0) and e2e["se"] == pytest.approx(10.0)
    assert data["pooled"]["attainment_paper"]["mean"] == pytest.approx(35.0)
    text = "\n".join(served_tally.page(data, served_tally.Made("cmd", "m", "d", "c")))
    assert "within two of a tie), behind on 1 of 2 seed-points" in text

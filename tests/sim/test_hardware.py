"""Hardware models: the shipped data files and the table cost."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from adaserve.scheduler import LatencyModel
from adaserve.sim import HardwareModel, TableCost, available, linear_fit
from adaserve.sim.hardware import DATA

KIT_LATENCY = Path(__file__).resolve().parents[3] / "shared" / "paper-scale" / "latency"
VIDUR = [n for n in available() if n.startswith("vidur-") and not n.endswith("-draft")]
PRICED = [n for n in available() if n.endswith("-draft")]


def test_shipped_models_load_and_name_their_sources():
    names = available()
    assert {"cpu-smollm2-135m", "llama3.1-70b-a100-tp4"} <= set(names)
    for name in names:
        hw = HardwareModel.load(name)
        assert hw.source and hw.gpu and hw.target_model and hw.tp >= 1 and hw.budget >= 1


def test_table_interpolates_extrapolates_and_adds_attention():
    t = TableCost((1, 128, 256), (30.0, 55.0, 85.0), attention_ms_per_1k_context=0.04)
    assert t.predict(0, 1) == pytest.approx(0.030)
    assert t.predict(0, 192) == pytest.approx(0.070)
    assert t.predict(0, 384) == pytest.approx(0.115)  # along the last segment
    assert t.predict(38_400, 64) - t.predict(0, 64) == pytest.approx(38.4 * 0.04 / 1e3)


def test_the_70b_table_is_the_artifacts():
    hw = HardwareModel.load("llama3.1-70b-a100-tp4")
    assert hw.verify_s(0, [1024]) == pytest.approx(0.205)
    assert hw.verify_s(0, [64, 64]) == pytest.approx(0.055)  # packed, not padded
    assert hw.draft_s(10_000, [64, 64]) == 0.0


def test_fusing_is_the_gpu_tables_and_not_the_cpus():
    assert HardwareModel.load("llama3.1-70b-a100-tp4").fuses_prefill
    assert not HardwareModel.load("cpu-smollm2-135m").fuses_prefill


def test_fused_verify_pays_one_forward_for_chunk_and_verify():
    hw = HardwareModel.load("llama3.1-70b-a100-tp4")
    # a 128-token chunk over 1,000 cached tokens and 64 decode roots over 38,400: 192 tokens
    # in one forward (70 ms) and both contexts' attention, less the chunk's forward charged
    # alone at prefill (55 ms and its own context)
    fused = hw.fused_verify_s(38_400, [1] * 64, 1_000, [128])
    assert hw.prefill_s(1_000, [128]) + fused == pytest.approx((70 + 39.4 * 0.0402) / 1e3)
    # apart, the 64 roots cost a forward of their own: 30 + 63/127 * 25 ms
    assert hw.verify_s(38_400, [1] * 64) - fused == pytest.approx((30 + 63 / 127 * 25 + 55 - 70)
                                                                  / 1e3)


def test_padded_rows_cost_the_longest_request():
    hw = HardwareModel.load("cpu-smollm2-135m")
    assert hw.pads_rows
    assert hw.batch_tokens([1, 5, 2]) == 15
    assert hw.verify_s(100, [1, 5, 2]) == pytest.approx(hw.target.predict(100, 15))


def test_linear_fit_reproduces_a_linear_model_and_fits_a_table():
    m = LatencyModel(1e-6, 2e-3, 5e-2)
    assert linear_fit(m) is m
    fit = linear_fit(HardwareModel.load("llama3.1-70b-a100-tp4").target)
    assert fit.predict(0, 512) == pytest.approx(0.125, rel=0.15)


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="increasing"):
        TableCost((1, 1), (2.0, 3.0))
    with pytest.raises(ValueError, match="no hardware model"):
        HardwareModel.load("no-such-gpu")


def test_the_paper_scale_models_are_shipped():
    assert len(VIDUR) == 24  # every (model, GPU, TP) Vidur profiles, per the kit README
    qwen = HardwareModel.load("qwen2.5-32b-a100-tp2")
    assert (qwen.tp, qwen.budget, qwen.baseline_latency_ms) == (2, 156, 28.0)
    assert qwen.verify_s(0, [1]) == pytest.approx(0.028)  # the baseline as the 1-token row
    assert qwen.verify_s(0, [1024]) == pytest.approx(0.188)
    assert qwen.fuses_prefill and not qwen.pads_rows and qwen.draft is None


@pytest.mark.parametrize("name", PRICED)
def test_a_priced_draft_model_is_its_base_plus_a_scaled_8b_draft(name):
    """benchmarks/sim_paper_draft.py: the base model untouched, the draft r x the 8B's
    forward + one constant per forward (the same at every batch size)."""
    hw, base = HardwareModel.load(name), HardwareModel.load(name.removesuffix("-draft"))
    assert hw.target == base.target and hw.budget == base.budget
    assert hw.baseline_latency_ms == base.baseline_latency_ms and base.draft is None
    assert hw.draft_model and hw.draft is not None
    eight_b = HardwareModel.load("vidur-llama3-8b-a100-tp1").target
    scale = (hw.draft.ms[-1] - hw.draft.ms[0]) / (eight_b.ms[-1] - eight_b.ms[0])
    constant = hw.draft.ms[0] - scale * eight_b.ms[0]
    assert 0 < scale < 0.2 and 1.0 < constant < 4.0
    for d, e in zip(hw.draft.ms, eight_b.ms):
        assert d == pytest.approx(scale * e + constant, abs=2e-4)
    # drafting now costs: a 64-token draft step is a few ms, not nothing
    assert 0.002 < hw.draft_s(0, [64]) < 0.006


@pytest.mark.skipif(not KIT_LATENCY.is_dir(), reason="no paper-scale kit")
@pytest.mark.parametrize("name", VIDUR)
def test_a_vidur_table_is_its_csvs_total(name):
    *model, gpu, tp = name.split("-")[1:]  # vidur-<model>-<gpu>-tp<k>
    with (KIT_LATENCY / f"vidur_{'-'.join(model)}_{gpu}_{tp}.csv").open() as f:
        total = {int(r["num_tokens"]): float(r["total_ms"]) for r in csv.DictReader(f)}
    hw = HardwareModel.load(name)
    for n in (1, 8, 512, 2048):
        assert hw.verify_s(0, [n]) == pytest.approx(total[n] / 1e3)
    assert hw.tp == int(tp.removeprefix("tp"))
    assert hw.budget == {"a100": 156, "h100": 582}[gpu]  # the paper's Table 1


def test_attention_terms_are_the_kv_read_at_peak_bandwidth():
    # kit README: ms per 1,000 cached tokens = 1e3 x (2 x layers x kv_heads x head_dim x 2 B)
    # / TP / BW x 1e3; the files keep the README table's 3 significant figures
    cases = {"vidur-llama2-7b-a100-tp1": (2 * 32 * 32 * 128 * 2 / 1 / 2.039e12 * 1e6, 0.257),
             "vidur-llama2-70b-h100-tp8": (2 * 80 * 8 * 128 * 2 / 8 / 3.35e12 * 1e6, 0.0122)}
    for name, (formula, readme_table) in cases.items():
        hw = HardwareModel.load(name)
        assert hw.target.attention_ms_per_1k_context == float(f"{formula:.3g}") == readme_table
        assert hw.verify_s(10_000, [1]) - hw.verify_s(0, [1]) == pytest.approx(
            10 * readme_table / 1e3)


def test_budgets_lie_within_the_tables():
    for name in available():
        hw = HardwareModel.load(name)
        if isinstance(hw.target, TableCost):
            assert hw.target.tokens[0] <= hw.budget <= hw.target.tokens[-1], name


def test_a_fused_verify_on_a_table_that_dips_costs_nothing_extra_not_negative():
    """Vidur's tables dip (all-reduce steps): a 16-token prefill fused with 16 verify
    tokens prices below the prefill alone; the verify then adds nothing, and the simulated
    clock never runs backwards."""
    hw = HardwareModel.load("vidur-llama3-70b-a100-tp4")
    assert hw.target.predict(0, 32) < hw.target.predict(0, 16)
    assert hw.fused_verify_s(0, [16], 0, [16]) == 0.0
    assert hw.fused_verify_s(0, [112], 0, [16]) > 0


@pytest.mark.parametrize("name", available())
def test_a_models_notes_agree_with_what_it_prices(name):
    """Notes are copied from a base model when a draft or a calibration is added: a note
    that drafting is free must not survive into a model that prices a draft, nor a budget
    note name another budget than the model's."""
    d = json.loads((DATA / f"{name}.json").read_text())
    notes = d.get("notes", [])
    if d.get("draft") is not None:
        assert not [n for n in notes if "charged nothing" in n]
    for n in notes:
        if n.startswith("budget "):
            assert n.split()[1].rstrip(":") == str(d["budget"])

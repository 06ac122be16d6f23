"""Hardware models: the shipped data files and the table cost."""

from __future__ import annotations

import pytest

from adaserve.scheduler import LatencyModel
from adaserve.sim import HardwareModel, TableCost, available, linear_fit


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

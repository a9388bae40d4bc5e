"""The attention factor of the training calibration describes the kernel its fit rows ran.

llm-foundry's A100 tables (the training fit rows) ran flash-attn 1.0.3's Triton kernel, a FlashAttention-1
generation kernel (scripts/calibrate_speed.py, ATTENTION_PRIOR_AMPERE). FlashAttention-2 §1 (arXiv:2307.08691)
gives FlashAttention's A100 rates as 30-50 % of peak forward and 25-35 % backward. In the speed model's
accounting (forward + backward time = 3 x forward FLOPs / (peak x eta), the kernel's backward doing 2.5x the
forward's FLOPs) that is eta = 3 / (1/f + 2.5/b), worked by hand:
    midpoints f 0.40, b 0.30:  3 / (2.5 + 8.3333)     = 0.2769
    low ends  f 0.30, b 0.25:  3 / (3.3333 + 10.0)    = 0.2250
    high ends f 0.50, b 0.35:  3 / (2.0 + 7.142857)   = 0.3281
"""
import sys
from pathlib import Path

import pytest

from gpuplan.estimate.calibration import load_efficiency

FA1_LOW, FA1_MID, FA1_HIGH = 0.2250, 0.2769, 0.3281
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _calibrate_speed():
    pytest.importorskip("scipy")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import calibrate_speed
    finally:
        sys.path.remove(str(SCRIPTS))
    return calibrate_speed


def test_fitted_attention_efficiency_lies_in_flashattention1s_published_range():
    # an independent check of the fit: the value fitted on the llm-foundry rows must be a rate the kernel
    # those rows ran can reach; a refit landing outside it would be absorbing something else
    assert FA1_LOW <= load_efficiency()["attention"]["ampere"] <= FA1_HIGH


def test_prior_is_flashattention1s_published_midpoints():
    cs = _calibrate_speed()
    assert cs.ATTENTION_PRIOR_AMPERE == pytest.approx(FA1_MID, abs=1e-4)
    assert cs.fa_attention_eta(0.30, 0.25) == pytest.approx(FA1_LOW, abs=1e-4)
    assert cs.fa_attention_eta(0.50, 0.35) == pytest.approx(FA1_HIGH, abs=1e-4)


def test_a_fold_without_training_fit_rows_prices_attention_at_the_prior():
    # leave-one-source-out: with the llm-foundry rows left out no training row is fitted and the priors stand
    cs = _calibrate_speed()
    P = cs.fit_all([], [])
    assert P["attention"]["ampere"] == pytest.approx(FA1_MID, abs=1e-4)
    assert P["attention"]["ampere"] != pytest.approx(0.5)      # FlashAttention-2's rate, the old prior


def test_llm_foundry_rows_are_priced_with_their_own_kernel_not_flashattention2():
    # the rows are marked `attention_kernel: fa1-triton` (no published rows: the calibrated factor). Priced at
    # FlashAttention-2's A100 rate instead they come out fast, worst at 65k tokens (MPT-350m: +6.8 % -> +79.6 %)
    cs = _calibrate_speed()
    P = load_efficiency()
    rows = [r for r in cs.train_rows(Path(__file__).resolve().parents[1] / "validation" / "public" / "train-throughput.csv")
            if r.source.startswith("llm-foundry") and r.label.endswith("s65536 ckpt=False")]
    assert rows
    for r in rows:
        assert abs(r.predict(P) / r.measured - 1) < 0.25, r.label

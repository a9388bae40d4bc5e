"""FP8 GEMMs take their own size constant d0_fp8 (docs/speed.md §2.1), measured against bf16 on the same shapes in one
run on one H200 (validation/device/h200-2026-12-04-expert_gemm_graph.csv). Expected values are hand arithmetic on
that file's rows and on the MAMF rows of estimate/data/max_achievable_gemm.csv, not the code under test."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import fit_gemm_size  # noqa: E402
from gpuplan.estimate import speed  # noqa: E402
from gpuplan.estimate.calibration import thaw  # noqa: E402
from gpuplan.estimate.sustained_gemm import fp8_vs_16bit_for  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402


def _p() -> dict:
    return thaw(speed.load_efficiency())


def test_the_packaged_constants_are_the_measured_ones():
    P = _p()
    assert P["matmul_dim_half"] == 128.0 and P["matmul_dim_half_fp8"] == 289.0
    assert speed.dim_half(P, "fp8") == 289.0 and speed.dim_half(P, "fp8-e4m3") == 289.0
    assert speed.dim_half(P, "bf16") == 128.0 and speed.dim_half(P, "fp4") == 1253.0  # FP4: its own (test_fp4_gemm_size)
    del P["matmul_dim_half_fp8"]
    assert speed.dim_half(P, "fp8") == 128.0            # an older calibration: FP8 takes d0


def test_fit_script_reproduces_both_constants_from_the_device_files():
    eta, d0, _ = fit_gemm_size.fit_grid()
    assert d0 == pytest.approx(128.0, abs=0.5)          # the 16-bit grid: the control
    r, d8, err = fit_gemm_size.fit_fp8(fit_gemm_size.fp8_pairs())
    assert round(d8) == 289 and err < 0.05
    assert r / 2.0 == pytest.approx(0.955, abs=0.005)     # FP8 share of its 2x peak at large size, burst


def test_narrow_shapes_gain_less_from_fp8_as_measured():
    # 4,096 rows per expert, fwd + dgrad + wgrad seconds (16 experts) from the CSV rows:
    # Qwen3-30B-A3B fc2 (K 768, N 2048): bf16 3.314176e-4 + 3.094576e-4 + 3.546896e-4 = 9.955648e-4,
    #   FP8 2.819712e-4 + 2.071952e-4 + 2.033120e-4 = 6.924784e-4 -> FP8 gain 1.43768
    # GPT-OSS-120B fc1 (K 2880, N 5760): bf16 3.155171e-3 + 3.268208e-3 + 3.325691e-3 = 9.749070e-3,
    #   FP8 1.772750e-3 + 1.851296e-3 + 1.847421e-3 = 5.471467e-3 -> FP8 gain 1.78181
    measured = (9.749070e-3 / 5.471467e-3) / (9.955648e-4 / 6.924784e-4)           # 1.2394
    assert measured == pytest.approx(1.2394, abs=1e-4)
    # the model's contrast: prod (x + 128)/(x + 289) of the wide shape over the narrow one
    # (3008/3169 · 5888/6049) / (896/1057 · 2176/2337) = 0.92393 / 0.78930 = 1.1706 (one size constant: 1.0)
    P, g = _p(), get_gpu("h200-sxm")

    def gain(k, n):
        t16 = speed.gemm_time(P, g, "bf16", 4096, k, n)
        t8 = speed.gemm_time(P, g, "fp8", 4096, k, n, eff_dtype="bf16", act_bytes=1.0)
        return t16 / t8
    model = gain(2880, 5760) / gain(768, 2048)
    assert model == pytest.approx(1.1706, abs=2e-3)
    assert abs(model - measured) < abs(1.0 - measured)


def test_fp8_over_16bit_ratio_divides_out_each_formats_size_factor():
    # H100 SXM MAMF: FP8 1402.6/1978.9 = 0.70878 at K 14336, N 9216; BF16 794.5/989.4 = 0.80301 at K 13312, N 2048
    raw = (1402.6 / 1978.9) / (794.5 / 989.4)                                     # 0.88265
    s16 = 13312 / 13440 * 2048 / 2176                                             # 0.932213
    s8 = 14336 / 14625 * 9216 / 9505                                              # 0.950436 (d0_fp8 289)
    s8_128 = 14336 / 14464 * 9216 / 9344                                          # 0.977573 (d0 128)
    h100 = get_gpu("h100-sxm")
    assert fp8_vs_16bit_for(h100) == pytest.approx(raw, rel=1e-9)                  # unchanged without dims
    assert fp8_vs_16bit_for(h100, (128.0, 289.0)) == pytest.approx(raw * s16 / s8, rel=1e-9)   # 0.8657
    assert raw * s16 / s8 == pytest.approx(0.8657, abs=5e-4)
    assert fp8_vs_16bit_for(h100, (128.0, 128.0)) == pytest.approx(raw * s16 / s8_128, rel=1e-9)  # 0.8416
    assert fp8_vs_16bit_for(get_gpu("b200"), (128.0, 289.0)) == 1.0                 # nothing published


def test_training_fp8_gemm_gives_back_the_mamf_fp8_rate_at_its_shape():
    # η16 (0.8614 = 0.80301 / 0.932213) x ratio (0.8657) x s8 (0.950436) = 0.7088 of the FP8 peak at the boost clock
    P, g = _p(), get_gpu("h100-sxm")
    ratio = fp8_vs_16bit_for(g, (128.0, 289.0))
    eta = speed.gemm_efficiency(P, "hopper", "bf16", 1024, 14336, 9216, size_dtype="fp8") * ratio
    assert eta == pytest.approx(1402.6 / 1978.9, rel=2e-3)

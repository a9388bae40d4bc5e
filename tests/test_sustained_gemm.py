"""AMD Max-Achievable FLOPs (rocm-blogs "Measuring Max-Achievable FLOPs - Part 2", Table 1):
MI300X BF16 708 / FP8 1273 TFLOP/s, MI325X BF16 843 / FP8 1519, of datasheet 1307.4 / 2614.9.
MAMF v2 tables (stas00/ml-engineering compute/accelerator/README.md @b9e29720): H100 SXM BF16 794.5 / FP8
1402.6, GH200 (141 GB, 900 W) BF16 828.6 / FP8 1535.0, of datasheet 989.4 / 1978.9."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.estimate.sustained_gemm import fp8_vs_16bit, fp8_vs_16bit_for, maf_fraction


def test_maf_fraction_of_peak_by_hand():
    assert maf_fraction("mi300x", "bf16", 1307.4e12) == pytest.approx(708 / 1307.4)       # 0.5415
    assert maf_fraction("mi300x", "fp8", 2614.9e12) == pytest.approx(1273 / 2614.9)       # 0.4868
    assert maf_fraction("h100-sxm", "bf16", 989.4e12) == pytest.approx(794.5 / 989.4)     # 0.8030
    assert maf_fraction("b200", "bf16", 2250e12) is None


def test_fp8_vs_bf16_ratio_is_the_mean_of_the_two_cdna3_parts():
    mi300x = (1273 / 2614.9) / (708 / 1307.4)      # 0.8990
    mi325x = (1519 / 2614.9) / (843 / 1307.4)      # 0.9009
    assert fp8_vs_16bit("cdna3") == pytest.approx((mi300x + mi325x) / 2, rel=1e-9)
    assert fp8_vs_16bit("cdna3") == pytest.approx(0.900, abs=5e-4)
    assert fp8_vs_16bit("blackwell") == 1.0 and fp8_vs_16bit("cdna4") == 1.0   # nothing published: unchanged


H100_RATIO = (1402.6 / 1978.9) / (794.5 / 989.4)       # 0.7088 / 0.8030 = 0.8826
GH200_RATIO = (1535.0 / 1978.9) / (828.6 / 989.4)      # 0.7757 / 0.8375 = 0.9262


def test_each_gpu_takes_the_measured_part_of_its_family_nearest_in_power_density():
    from gpuplan.hardware import get_gpu
    assert H100_RATIO == pytest.approx(0.8826, abs=5e-4) and GH200_RATIO == pytest.approx(0.9262, abs=5e-4)
    # own rows
    assert fp8_vs_16bit_for(get_gpu("h100-sxm")) == pytest.approx(H100_RATIO, rel=1e-9)
    assert fp8_vs_16bit_for(get_gpu("gh200-144gb")) == pytest.approx(GH200_RATIO, rel=1e-9)
    assert fp8_vs_16bit_for(get_gpu("mi300x")) == pytest.approx((1273 / 2614.9) / (708 / 1307.4), rel=1e-9)
    # W per 16-bit TFLOP/s: H200 700/989.4 = 0.71 and the 500 W H100 0.51 sit nearest H100 SXM (0.71), not the
    # 1000 W GH200 module (1.01); the 96 GB GH200 (1000 W) nearest the 141 GB one
    for gid in ("h200-sxm", "h100-sxm-96gb-500w"):
        assert fp8_vs_16bit_for(get_gpu(gid)) == pytest.approx(H100_RATIO, rel=1e-9)
    assert fp8_vs_16bit_for(get_gpu("gh200")) == pytest.approx(GH200_RATIO, rel=1e-9)
    assert fp8_vs_16bit_for(get_gpu("b200")) == 1.0          # Blackwell: nothing published, unchanged


def _matmul_s(gpu: str, precision: str) -> float:
    scn = {"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
           "hardware": {"gpu": gpu, "count": 8}, "parallel": {"zero": 3},
           "train": {"seq_len": 8192, "micro_batch": 1, "global_batch": 8, "precision": precision}}
    return api.estimate(scn).performance.breakdown["compute_matmul"]


def test_fp8_training_gemms_take_the_published_shortfall_on_mi300x_and_on_hopper():
    # the decoder linears run FP8 (2x peak) at the 16-bit efficiency x 0.900; the lm_head stays bf16.
    # Compute-bound GEMMs, so bf16 time / fp8 time = lm_head share + (1 - share) / (2 x ratio) inverted:
    # check the two limits rather than the split: faster than bf16, slower than a clean 2x
    for gpu in ("mi300x", "h100-sxm"):
        bf16, fp8 = _matmul_s(gpu, "bf16"), _matmul_s(gpu, "fp8")
        assert bf16 / 2 < fp8 < bf16
    # llama-3.1-8b: lm_head 4096 x 128256 = 525M of 7.50B matmul weights (7.0 %); the rest halves at 2x peak,
    # divides by the η_max ratio (the published fractions with each format's size factor divided out at its
    # measured shape, d0 128 / d0_fp8 289) and by the FP8-over-16-bit size factor of its own shapes
    # (docs/speed.md §2.1). Size factors s8/s16 of one layer's linears, weighted by weights (= FLOPs):
    #   q, o 4096x4096: (4096/4385)^2 / (4096/4224)^2 = 0.92792 (33.55M)
    #   k, v 4096x1024: (4096/4385 · 1024/1313) / (4096/4224 · 1024/1152) = 0.84516 (8.39M)
    #   gate, up, down 4096x14336: (4096/4385 · 14336/14625) / (4096/4224 · 14336/14464) = 0.95268 (176.16M)
    #   time-weighted 1/size: (33.55/0.92792 + 8.39/0.84516 + 176.16/0.95268) / 218.10 = 1.0591
    size = (33.554 / 0.92792 + 8.389 / 0.84516 + 176.161 / 0.95268) / 218.104
    # η_max ratios: H100 SXM 0.8826 · 0.93221 / 0.95044 = 0.8657 (MAMF shapes K 13312 N 2048 / K 14336 N 9216);
    # MI300X 0.8990 · (32896/33024 · 4864/4992) / (32896/33185 · 3648/3937) (MAF K 32896, N 4864 / 3648)
    h100 = H100_RATIO * (13312 / 13440 * 2048 / 2176) / (14336 / 14625 * 9216 / 9505)
    mi300x = ((1273 / 2614.9) / (708 / 1307.4) * (32896 / 33024 * 4864 / 4992)
              / (32896 / 33185 * 3648 / 3937))
    r_mi = _matmul_s("mi300x", "fp8") / _matmul_s("mi300x", "bf16")
    r_h = _matmul_s("h100-sxm", "fp8") / _matmul_s("h100-sxm", "bf16")
    assert h100 == pytest.approx(0.8657, abs=5e-4)
    assert r_mi == pytest.approx(0.070 + 0.930 * size / (2 * mi300x), rel=0.01)
    assert r_h == pytest.approx(0.070 + 0.930 * size / (2 * h100), rel=0.01)      # 0.639


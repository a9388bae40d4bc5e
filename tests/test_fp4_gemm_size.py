"""FP4 GEMMs take their own size constant d0_fp4 (docs/speed.md §2.1), measured against bf16 on the same shapes in one
collection: NVIDIA's published aiconfigurator GEMM database, TensorRT-LLM 1.3.0rc20's linear on a B200
(src/gpuplan/estimate/data/fp4_gemm_shapes.csv). Expected values are hand arithmetic on that file's rows and on the
flashinfer row of estimate/data/max_achievable_gemm.csv, not the code under test."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_speed  # noqa: E402
import fit_gemm_size  # noqa: E402
from gpuplan.estimate import speed  # noqa: E402
from gpuplan.estimate.calibration import thaw  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402

TABLE = ROOT / "src" / "gpuplan" / "estimate" / "data" / "fp4_gemm_shapes.csv"


def _p() -> dict:
    return thaw(speed.load_efficiency())


def _row(gpu, fw, m, n, k) -> dict:
    for r in csv.DictReader(TABLE.open(encoding="utf-8")):
        if (r["gpu"], r["framework"], int(r["m"]), int(r["n"]), int(r["k"])) == (gpu, fw, m, n, k):
            return r
    raise KeyError((gpu, fw, m, n, k))


def test_the_table_is_the_published_collection():
    rows = list(csv.DictReader(TABLE.open(encoding="utf-8")))
    assert len(rows) == 4 * 3 * 11 * 11                     # 4 collections x M 3 x N 11 x K 11
    assert all(r["source_url"].startswith("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a5") for r in rows)
    r = _row("b200", "trtllm", 8192, 8192, 8192)
    assert float(r["bf16_ms"]) == 0.737152 and float(r["nvfp4_ms"]) == 0.284556
    # 2 * 8192^3 / 0.284556 ms = 3864 TFLOP/s with the quantize kernel, 42.9 % of the 9 PFLOP/s dense FP4 peak
    assert 2 * 8192 ** 3 / 0.284556e-3 / 9e15 == pytest.approx(0.4293, abs=1e-4)


def test_the_packaged_constants_are_the_measured_ones():
    P = _p()
    assert P["matmul_dim_half_fp4"] == 1253.0
    assert speed.dim_half(P, "fp4") == 1253.0
    assert speed.dim_half(P, "fp8") == 289.0 and speed.dim_half(P, "bf16") == 128.0
    del P["matmul_dim_half_fp4"]
    assert speed.dim_half(P, "fp4") == 128.0                # an older calibration: FP4 takes d0


def test_fit_script_reproduces_d0_fp4_from_the_published_table():
    r, d4, err = fit_gemm_size.fit_fp4(fit_gemm_size.fp4_pairs())
    assert round(d4) == 1253 and err < 0.10
    assert r / 4.0 == pytest.approx(0.88, abs=0.005)       # NVFP4's share of its 4x peak ratio at large size
    # the other collections in the table give the same order: far above FP8's 289
    for kw in ({"gpu": "gb200"}, {"framework": "vllm"}, {"framework": "sglang"}, {"quant_rate": None}):
        assert 700 < fit_gemm_size.fit_fp4(fit_gemm_size.fp4_pairs(**kw))[1] < 1400


def test_narrow_shapes_gain_less_from_nvfp4_as_published():
    # TensorRT-LLM B200, M 8192, NVFP4 time less the quantize pass M*K*2.5625 B / 6.4e12 B/s:
    # Qwen3-30B-A3B fc2 (K 768, N 2048): 0.0190731 / (0.0220555 - 0.00251904) = 0.976282 (NVFP4 no faster than bf16)
    # K = N = 8192: 0.737152 / (0.284556 - 0.02686976) = 2.860657
    narrow, wide = _row("b200", "trtllm", 8192, 2048, 768), _row("b200", "trtllm", 8192, 8192, 8192)
    assert (float(narrow["bf16_ms"]), float(narrow["nvfp4_ms"])) == (0.0190731, 0.0220555)
    measured = 2.860657 / 0.976282                                                       # 2.9302
    # the model's contrast: prod (x + 128)/(x + 1253) of the wide shape over the narrow one
    # (8320/9445)^2 / (896/2021 * 2176/3301) = 0.775966 / 0.292250 = 2.6551 (one size constant: 1.0)
    P, g = _p(), get_gpu("b200")

    def gain(k, n):
        return speed.gemm_time(P, g, "bf16", 8192, k, n) / speed.gemm_time(P, g, "fp4", 8192, k, n)
    model = gain(8192, 8192) / gain(768, 2048)
    assert model == pytest.approx(2.6551, abs=2e-3)
    assert abs(model - measured) < 0.3 * abs(1.0 - measured)


def test_blackwell_fp4_prior_gives_back_flashinfers_rate_at_its_shape():
    # flashinfer PR #1979: CUTLASS NVFP4 3370.4 TFLOP/s at M 1024, N 7168, K 4608 on a B200 = 0.374489 of 9000;
    # size factor with d0_fp4: 4608/5861 * 7168/8421 = 0.669230 -> eta = 0.374489 / 0.669230 = 0.559582 (clock 1.0)
    P = _p()
    assert speed.clock_factor(P, get_gpu("b200")) == 1.0
    assert calibrate_speed.blackwell_fp4_prior(P) == pytest.approx(0.559582, abs=1e-5)
    P["matmul"]["blackwell"]["fp4"] = calibrate_speed.blackwell_fp4_prior(P)
    t = speed.gemm_time(P, get_gpu("b200"), "fp4", 1024, 4608, 7168)
    assert 2 * 1024 * 4608 * 7168 / t / 1e12 == pytest.approx(3370.4, rel=1e-4)


def test_the_fused_moe_scale_follows_d0_fp4():
    # the published fused-MoE curve is divided by the priced GEMMs, so it must be recomputed when d0_fp4 changes
    P = _p()
    a = speed.fp4_moe_rows_scale(P, 64.0)
    P["matmul_dim_half_fp4"] = 128.0
    b = speed.fp4_moe_rows_scale(P, 64.0)
    assert a < b                                             # wider penalty priced -> less left for the curve

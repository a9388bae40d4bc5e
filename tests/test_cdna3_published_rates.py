"""gpuplan's MI300X kernel rates against published measurements that no factor was fitted on (issue 13, docs/speed.md
§2.11). Each test fails if the model gets faster than what the hardware was measured to sustain, the direction of
the held-out MI300X bias: a GEMM or collective that beats its published rate cannot be why real runs are slower.

Sources (none of them a scored row):
- AMD, "Measuring Max-Achievable FLOPs - Part 2" (rocm-blogs, 2025-02-28, Table 1 and Appendix B): hipblaslt-bench
  at hipBLASLt db8e93b4, 750 W MI300X, BF16 708 TFLOP/s at M x N x K = 4096 x 4864 x 32896 (median clock 1207 MHz).
- Stas Bekman, ml-engineering compute/accelerator/README.md @b9e29720, MAMF v2 table: MI300X BF16 668.4 TFLOP/s,
  best shape 10240 x 15360 x 8192, torch 2.5.1+rocm6.3, PYTORCH_TUNABLEOP_ENABLED=1.
- Azure AI-benchmarking-guide, ND MI300X v5 results (copy at samuel-bohman/AI-benchmarking-guide @3de0c294,
  Azure_Results/ND_MI300X_v5_results.md): hipBLASLt FP8, random data, 10,000 warm-up iterations: 8192^3
  1159.23 TFLOP/s; RCCL all-reduce bus bandwidth on 8 GPUs 1.13 GB/s at 32 KB.
- mk1-project/quickreduce README @910e8922 (ROCm 6.2, RCCL 2.20.5, 8x MI300X): RCCL all-reduce 16.22 us at 32 KB.
"""
from __future__ import annotations

import pytest

from gpuplan.estimate.calibration import packaged
from gpuplan.estimate.comm import all_reduce_time, group_link
from gpuplan.estimate.speed import gemm_time
from gpuplan.estimate.sustained_gemm import fp8_vs_16bit_for
from gpuplan.hardware import get_gpu

MI300X = get_gpu("mi300x")


def _tflops(dtype: str, m: int, k: int, n: int, **kw) -> float:
    return 2.0 * m * k * n / gemm_time(packaged(), MI300X, dtype, m, k, n, **kw) / 1e12


@pytest.mark.parametrize("m,n,k,published", [
    (4096, 4864, 32896, 708.0),      # AMD MAF, hipblaslt-bench
    (10240, 15360, 8192, 668.4),     # MAMF, torch.matmul with TunableOp
])
def test_bf16_gemm_is_not_faster_than_the_published_sustained_rate(m, n, k, published):
    assert _tflops("bf16", m, k, n) <= published


def test_fp8_gemms_are_not_faster_than_azures_hipblaslt_measurement():
    """8192^3 only: the same table's 1024^3 and 2048^3 rows both take ~40 us per call (2.1 and 17.2 GFLOP at 53 and
    428 TFLOP/s), a per-call floor of the harness that also sits in its 4096^3 figure (144 us), so only the
    largest shape (949 us) bounds the kernel's sustained rate."""
    size, published = 8192, 1159.23
    # training times FP8 GEMMs at the 16-bit efficiency times the published FP8-vs-16-bit sustained ratio
    train = _tflops("fp8", size, size, size, eff_dtype="bf16", eta_scale=fp8_vs_16bit_for(MI300X))
    infer = _tflops("fp8", size, size, size)          # serving: the FP8 table
    assert train <= published and infer <= published


def test_eight_gpu_small_all_reduce_lies_inside_the_published_rccl_range():
    """A decode step's all-reduce (32 KB: one 405B token's hidden state in bf16) on 8 MI300X: RCCL measured
    16.22 us on bare metal (QuickReduce README) and 32768 x 2 x 7/8 / 1.13 GB/s = 50.7 us on Azure's VM."""
    link = group_link(MI300X, 8, 8, 8)
    t = all_reduce_time(32768, 8, link)
    assert 16.22e-6 <= t <= 32768 * 2 * 7 / 8 / 1.13e9

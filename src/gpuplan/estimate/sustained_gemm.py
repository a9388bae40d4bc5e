"""Vendor-published max-achievable GEMM rates (data/max_achievable_gemm.csv) and what they tell the
speed model that the calibrated efficiencies cannot: how a family's FP8 GEMMs fare against its 16-bit
ones on the same silicon.

AMD publishes Max-Achievable FLOPs (MAF) for the MI300X and MI325X: hipBLASLt on a large, CU-count
friendly shape, realistic data, after warm-up, with the median clock the power manager settled on
(rocm-blogs "Measuring Max-Achievable FLOPs - Part 2", 2025-02-28). On the MI300X (750 W) BF16
sustains 708 TFLOP/s at 1207 MHz and FP8 1273 TFLOP/s at 1230 MHz, of 1307 / 2615 peak at 2100 MHz:
FP8 delivers (1273/2615) / (708/1307) = 0.899 of the fraction of peak BF16 delivers (MI325X: 0.901).
The speed model times FP8 *training* GEMMs with the 16-bit table's efficiency (the FP8 table is
fitted on inference engines), which on CDNA3 would credit FP8 with the full 2x of its datasheet; this
ratio takes the published shortfall off. Families without MAF rows get 1.0 (unchanged).

The same rows show the dense-GEMM clock under the board limit (0.57 of boost on the MI300X, 0.69 on the
1000 W MI325X); the calibrated CDNA3 efficiency is a delivered fraction of peak that already includes
it, so the clock is documented (docs/speed.md §2.9), not applied a second time.
"""
from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def _rows() -> tuple[dict[str, str], ...]:
    path = resources.files("gpuplan.estimate").joinpath("data/max_achievable_gemm.csv")
    with path.open(encoding="utf-8") as fh:
        return tuple(csv.DictReader(fh))


def maf_fraction(gpu_id: str, dtype: str, peak_flops_per_s: float) -> float | None:
    """Published max-achievable rate of `gpu_id` in `dtype` as a fraction of its datasheet peak."""
    for r in _rows():
        if r["gpu"] == gpu_id and r["dtype"] == dtype:
            return float(r["maf_tflops_per_s"]) * 1e12 / peak_flops_per_s
    return None


@lru_cache(maxsize=None)
def fp8_vs_16bit(family: str) -> float:
    """Mean over the family's GPUs with MAF rows of (FP8 MAF / FP8 peak) / (BF16 MAF / BF16 peak);
    1.0 for a family without published rows."""
    from ..hardware import get_gpu
    ratios = []
    for gid in sorted({r["gpu"] for r in _rows()}):
        g = get_gpu(gid)
        if str(g.family).lower() != family:
            continue
        p = g.peak_flops_per_s
        f8, b16 = maf_fraction(gid, "fp8", p["fp8"]), maf_fraction(gid, "bf16", p["bf16"])
        if f8 and b16:
            ratios.append(f8 / b16)
    return sum(ratios) / len(ratios) if ratios else 1.0

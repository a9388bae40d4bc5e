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

NVIDIA publishes no such table, but Stas Bekman's MAMF finder measures both formats with one method on one
machine (ml-engineering `compute/accelerator/README.md` @b9e29720, v2 tables: torch `matmul` / `_scaled_mm`,
mean of 100 iterations after 50 warm-up, best shape of a sweep): H100 SXM (700 W) BF16 794.5 = 80.3 % and FP8
1402.6 = 70.9 % of peak, ratio 0.883; GH200 (141 GB, 900 W) 83.6 % and 77.6 %, ratio 0.928. The shortfall
shrinks as the power budget per 16-bit FLOP grows (AMD's two parts show the same: MAF runs both formats near one
power-capped clock), so a GPU takes the ratio of the measured part of its family nearest in power density
(TDP / 16-bit peak): H100 and H200 (700 W) and the 500 W H100 take H100 SXM's, a 900-1000 W GH200 its own.

The same rows show the dense-GEMM clock under the board limit (0.57 of boost on the MI300X, 0.69 on the
1000 W MI325X); the calibrated CDNA3 efficiency is a delivered fraction of peak that already includes
it, so the clock is documented (docs/speed.md §2.9), not applied a second time.
"""
from __future__ import annotations

from functools import lru_cache

from .datafiles import rows

MAF_FILE = "max_achievable_gemm.csv"


def maf_row(gpu_id: str, dtype: str) -> dict[str, str] | None:
    """The published max-achievable-GEMM row of `gpu_id` in `dtype` (its rate and the shape it was reached at)."""
    return next((r for r in rows(MAF_FILE) if r["gpu"] == gpu_id and r["dtype"] == dtype), None)


def maf_fraction(gpu_id: str, dtype: str, peak_flops_per_s: float) -> float | None:
    """Published max-achievable rate of `gpu_id` in `dtype` as a fraction of its datasheet peak."""
    r = maf_row(gpu_id, dtype)
    return None if r is None else float(r["maf_tflops_per_s"]) * 1e12 / peak_flops_per_s


@lru_cache(maxsize=None)
def fp8_vs_16bit(family: str) -> float:
    """Mean over the family's GPUs with MAF rows of (FP8 MAF / FP8 peak) / (BF16 MAF / BF16 peak);
    1.0 for a family without published rows."""
    from ..hardware import get_gpu
    ratios = []
    for gid in sorted({r["gpu"] for r in rows(MAF_FILE)}):
        g = get_gpu(gid)
        if str(g.family).lower() != family:
            continue
        f8, b16 = _fractions(g)
        if f8 and b16:
            ratios.append(f8 / b16)
    return sum(ratios) / len(ratios) if ratios else 1.0


def _fractions(g) -> tuple[float | None, float | None]:
    """(FP8, BF16) max-achievable fractions of peak of GpuSpec `g`; None where it has no row or no such unit
    (the A100 rows are BF16 only: Ampere has no FP8 tensor unit)."""
    p = g.peak_flops_per_s
    f8 = maf_fraction(g.id, "fp8", p["fp8"]) if p.get("fp8") else None
    b16 = maf_fraction(g.id, "bf16", p["bf16"]) if p.get("bf16") else None
    return f8, b16


def _ratio(gid: str) -> float | None:
    from ..hardware import get_gpu
    f8, b16 = _fractions(get_gpu(gid))
    return f8 / b16 if f8 and b16 else None


def _power_density(g) -> float | None:
    """Board power per 16-bit FLOP/s (W per TFLOP/s); None without a TDP."""
    tdp, p16 = getattr(g, "tdp_w", None), g.peak_flops_per_s.get("bf16")
    return tdp / (p16 / 1e12) if tdp and p16 else None


@lru_cache(maxsize=None)
def _measured(family: str) -> tuple[tuple[str, float | None, float], ...]:
    """(gpu id, power density, FP8-vs-16-bit ratio) of every catalog GPU of `family` with both rows."""
    from ..hardware import get_gpu
    out = []
    for gid in sorted({r["gpu"] for r in rows(MAF_FILE)}):
        g = get_gpu(gid)
        ratio = _ratio(gid)
        if str(g.family).lower() == family and ratio is not None:
            out.append((gid, _power_density(g), ratio))
    return tuple(out)


def fp8_vs_16bit_for(gpu, dims: tuple[float, float] | None = None) -> float:
    """FP8-vs-16-bit sustained ratio for `gpu` (a GpuSpec): its own published rows, else those of the
    measured GPU of its family nearest in power density (TDP / 16-bit peak), else the family mean (1.0
    for a family without published rows).

    `dims` = (d0 of 16-bit GEMMs, d0 of FP8 GEMMs): the ratio of the two formats' large-GEMM efficiencies
    η_max instead of the ratio of the published fractions, each fraction divided by the size factor
    K/(K + d0)·N/(N + d0) at the shape it was reached at (the way η_max is taken from the same rows for
    16-bit GEMMs, calibrate_speed.burst_gemm_share). This is the ratio the speed model multiplies into
    η when it also applies the FP8 size constant: its FP8 GEMM at the published FP8 shape then gives back
    the published FP8 rate. H100 SXM with (128, 289): (0.7088 / 0.9505) / (0.8030 / 0.9320) = 0.8655."""
    ratio = _nearest_ratio(gpu)
    if dims is None or ratio == 1.0:
        return ratio
    gid = _nearest_measured_id(gpu)
    if gid is None:
        return ratio
    return ratio * _size_at(gid, "bf16", dims[0]) / _size_at(gid, "fp8", dims[1])


def _nearest_ratio(gpu) -> float:
    family = str(gpu.family).lower()
    measured = _measured(family)
    for gid, _, ratio in measured:
        if gid == gpu.id:
            return ratio
    here = _power_density(gpu)
    if here is None or not measured or any(d is None for _, d, _ in measured):
        return fp8_vs_16bit(family)
    return min(measured, key=lambda t: (abs(t[1] - here), t[0]))[2]


def _nearest_measured_id(gpu) -> str | None:
    """The measured part whose rows fp8_vs_16bit_for takes for `gpu`; None where it takes a family mean."""
    measured = _measured(str(gpu.family).lower())
    if any(gid == gpu.id for gid, _, _ in measured):
        return gpu.id
    here = _power_density(gpu)
    if here is None or not measured or any(d is None for _, d, _ in measured):
        return None
    return min(measured, key=lambda t: (abs(t[1] - here), t[0]))[0]


def _size_at(gpu_id: str, dtype: str, d0: float) -> float:
    """K/(K + d0)·N/(N + d0) at the shape of `gpu_id`'s published `dtype` row."""
    r = maf_row(gpu_id, dtype)
    k, n = float(r["k"]), float(r["n"])
    return k / (k + d0) * n / (n + d0)

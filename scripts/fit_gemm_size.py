"""The GEMM size constants of docs/speed.md §2.1, measured (not fitted on any validation row), from the lent H200's
device files:

- d0 (16-bit): least squares of eta_max * K/(K + d0) * N/(N + d0) on the relative time of the 384 cuBLAS bf16
  GEMMs of validation/device/h200-2026-12-04-gemm_shapes.csv (M 4,096 and 16,384; K, N 512-28,672; the layer's
  forward, data-gradient and weight-gradient layouts): d0 = 128.
- d0_fp8: the same form for FP8 (torch._scaled_mm, per-tensor scales, bf16 out: the cuBLAS kernel of torchao's
  tensorwise recipe and Transformer Engine's current scaling), measured *against bf16 on the same shapes*:
  validation/device/h200-2026-12-04-expert_gemm_graph.csv times every shape in both formats (CUDA graph, same GPU,
  same run), so the FP8/bf16 rate ratio of a shape is r * prod_{x in K,N} (x + d0)/(x + d0_fp8) with d0 = 128 from
  the grid; least squares on the relative FP8-over-bf16 time of the pairs with M >= 4,096 rows (the grid's M):
  d0_fp8 = 289 (266-313 for other row cuts), r = 1.91 (0.955 of the 2x peak ratio), median error 3.8 %.
  The ratio cancels what both formats share (the power state of the run, M-wave effects, the expert shapes'
  own quirks) and leaves the FP8-specific size penalty: twice the math per byte and twice the K per MMA
  instruction, so fixed per-tile costs (prologue, epilogue writing the bf16 output) weigh twice as much.

    python3 scripts/fit_gemm_size.py            # prints both fits and the M-cut sensitivity

- d0_fp4: the same ratio form for NVFP4 x NVFP4 GEMMs on data-centre Blackwell, from NVIDIA's published aiconfigurator
  GEMM database (src/gpuplan/estimate/data/fp4_gemm_shapes.csv, scripts/extract_fp4_gemm_grid.py): TensorRT-LLM
  1.3.0rc20's own linear layer on a B200, bf16 and NVFP4 on the same (M, N, K) grid in one collection, CUDA-graph
  timed. The NVFP4 time is the whole quantized linear (activation fp4_quantize + GEMM); the quantize pass is priced
  the way gpuplan prices it in the fused MoE (moe.fused_moe_pass_bytes: read the 16-bit row, write 0.5 B + one FP8
  scale per 16 elements, M*K*(2 + 0.5 + 1/16) bytes) at the B200's HBM rate x the memory prior 0.8, and taken off
  before the fit. Pairs at M >= 4,096, K and N 512-16,384: d0_fp4 = 1,253, r = 3.52 (0.88 of the 4x peak ratio).

Nothing in gpuplan imports it; scripts/calibrate_speed.py PRIORS carries the numbers it prints.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "validation" / "device" / "h200-2026-12-04-gemm_shapes.csv"
PAIRS = ROOT / "validation" / "device" / "h200-2026-12-04-expert_gemm_graph.csv"
# the layer shapes (K inputs, N outputs) of scripts/bench_expert_gemm_graph.py SHAPES
LAYER_KN = {"qwen3-30b-a3b fc1": (2048.0, 1536.0), "qwen3-30b-a3b fc2": (768.0, 2048.0),
            "gpt-oss-120b fc1": (2880.0, 5760.0), "gpt-oss-120b fc2": (2880.0, 2880.0)}
FP4_GRID = ROOT / "src" / "gpuplan" / "estimate" / "data" / "fp4_gemm_shapes.csv"
GRID_D0 = 128.0        # PRIORS["matmul_dim_half"]
# the NVFP4 activation quantize pass (moe.fused_moe_pass_bytes' "dynamic quant": 16-bit read, 0.5 B + 1/16 B scale
# written per element) at the HBM rate x PRIORS["memory"]["default"]; the catalog's B200 and GB200: 8.0e12 B/s
FP4_QUANT_BYTES_PER_EL = 2.0 + 0.5 + 1.0 / 16.0
FP4_QUANT_RATE = 8.0e12 * 0.8
MIN_ROWS = 4096        # the grid's smaller M


def _size(k, n, d0):
    return k / (k + d0) * n / (n + d0)


def fit_grid(path: Path = GRID) -> tuple[float, float, float]:
    """(eta_max, d0, median |relative time error|) of the bf16 grid: residual (t_model - t_meas)/t_meas."""
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    k = np.array([float(r["k"]) for r in rows])
    n = np.array([float(r["n"]) for r in rows])
    share = np.array([float(r["tflops"]) for r in rows]) / 989.4

    def res(x):
        return share / (x[0] * _size(k, n, x[1])) - 1.0
    r = least_squares(res, [0.8, 128.0])
    return float(r.x[0]), float(r.x[1]), float(np.median(np.abs(r.fun)))


def fp8_pairs(path: Path = PAIRS, min_rows: int = MIN_ROWS) -> list[tuple[float, float, float]]:
    """(K, N, FP8-over-bf16 rate ratio) of every layer shape x GEMM x rows-per-expert >= `min_rows` timed in both
    formats (K, N: the layer's, as the speed model sees every GEMM of a linear)."""
    per = {}
    for r in csv.DictReader(path.open(encoding="utf-8")):
        if r["test"] != "per_expert_graph" or int(r["rows_per_expert"]) < min_rows:
            continue
        per.setdefault((r["shape"], r["gemm"], r["rows_per_expert"]), {})[r["format"]] = float(r["seconds"])
    out = []
    for (shape, _, _), t in sorted(per.items()):
        k, n = LAYER_KN[shape]
        out.append((k, n, t["bf16"] / t["fp8"]))
    return out


def fit_fp8(pairs: list[tuple[float, float, float]], d0: float = GRID_D0) -> tuple[float, float, float]:
    """(r, d0_fp8, median |relative error|): least squares of the relative FP8-over-bf16 time,
    residual t8_model/t8_meas - 1 with t8/t16 = 1 / (r * prod (x + d0)/(x + d0_fp8))."""
    k = np.array([p[0] for p in pairs])
    n = np.array([p[1] for p in pairs])
    ratio = np.array([p[2] for p in pairs])

    def res(x):
        model = x[0] * (k + d0) / (k + x[1]) * (n + d0) / (n + x[1])
        return ratio / model - 1.0
    r = least_squares(res, [0.9, d0])
    return float(r.x[0]), float(r.x[1]), float(np.median(np.abs(r.fun)))


def fp4_pairs(path: Path = FP4_GRID, gpu: str = "b200", framework: str = "trtllm", min_rows: int = MIN_ROWS,
              quant_rate: float | None = FP4_QUANT_RATE) -> list[tuple[float, float, float]]:
    """(K, N, NVFP4-over-bf16 rate ratio) of the published grid's shapes at M >= `min_rows` for one GPU and framework,
    the NVFP4 time less its activation quantize pass (M*K*FP4_QUANT_BYTES_PER_EL at `quant_rate`; None: kept)."""
    out = []
    for r in csv.DictReader(path.open(encoding="utf-8")):
        if r["gpu"] != gpu or r["framework"] != framework or int(r["m"]) < min_rows:
            continue
        m, k, n = float(r["m"]), float(r["k"]), float(r["n"])
        t4 = float(r["nvfp4_ms"]) * 1e-3
        if quant_rate:
            t4 -= m * k * FP4_QUANT_BYTES_PER_EL / quant_rate
        out.append((k, n, float(r["bf16_ms"]) * 1e-3 / t4))
    return out


def fit_fp4(pairs: list[tuple[float, float, float]], d0: float = GRID_D0) -> tuple[float, float, float]:
    """(r, d0_fp4, median |relative error|): fit_fp8's form on the NVFP4-over-bf16 pairs."""
    return fit_fp8(pairs, d0)


def main() -> int:
    eta, d0, err = fit_grid()
    print(f"bf16 grid ({GRID.name}): eta_max {eta:.3f}  d0 {d0:.1f}  median |err| {err:.1%}")
    for m in (512, 1024, 2048, 4096, 8192):
        pairs = fp8_pairs(min_rows=m)
        r, d8, e = fit_fp8(pairs)
        tag = "  <- PRIORS" if m == MIN_ROWS else ""
        print(f"FP8 vs bf16 ({PAIRS.name}), rows >= {m:5d}: {len(pairs):2d} pairs  r {r:.3f}  "
              f"d0_fp8 {d8:.1f}  median |err| {e:.1%}{tag}")
    sq = {r["format"]: float(r["tflops"]) for r in csv.DictReader(PAIRS.open(encoding="utf-8"))
          if r["test"] == "square_8192"}
    r, d8, _ = fit_fp8(fp8_pairs())
    pred = r * ((8192 + GRID_D0) / (8192 + d8)) ** 2
    print(f"check, 8192^3 (not in the fit): measured FP8/bf16 rate ratio {sq['fp8'] / sq['bf16']:.3f}, "
          f"model {pred:.3f}")
    r4, d4, e4 = fit_fp4(fp4_pairs())
    print(f"NVFP4 vs bf16 ({FP4_GRID.name}, TensorRT-LLM B200, rows >= {MIN_ROWS}, quantize pass off): "
          f"r {r4:.3f}  d0_fp4 {d4:.1f}  median |err| {e4:.1%}  <- PRIORS")
    for label, kw in (("same, quantize pass kept", {"quant_rate": None}),
                      ("same, rows >= 8192", {"min_rows": 8192}),
                      ("same, rows >= 16384", {"min_rows": 16384}),
                      ("GB200 TensorRT-LLM", {"gpu": "gb200"}),
                      ("B200 vLLM 0.24 (flashinfer cute-dsl)", {"framework": "vllm"}),
                      ("B200 SGLang 0.5.14 (flashinfer cute-dsl)", {"framework": "sglang"})):
        pairs = fp4_pairs(**kw)
        rr, dd, ee = fit_fp4(pairs)
        print(f"  {label:44s}: {len(pairs):3d} pairs  r {rr:.3f}  d0_fp4 {dd:7.1f}  median |err| {ee:.1%}")
    return 0 if math.isfinite(d8) and math.isfinite(d4) else 1


if __name__ == "__main__":
    raise SystemExit(main())

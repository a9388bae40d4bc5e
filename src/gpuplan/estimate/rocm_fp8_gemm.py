"""vLLM V0's per-tensor FP8 linears on ROCm at decode sizes: `torch._scaled_mm` (hipBLASLt) at its published MI300X
times (docs/speed.md §3.21).

What runs. vLLM V0 has no CUTLASS on ROCm, so a per-tensor FP8 linear (the amd/*-FP8-KV checkpoints, FP8 weights with
one scale per tensor) is `ops.scaled_fp8_quant(input, input_scale, num_token_padding=17)` followed by
`torch._scaled_mm` (vllm/model_executor/layers/quantization/utils/w8a8_utils.py `apply_fp8_linear` in the v0.6.3
source release): the activation is padded to at least 17 rows, so a decode GEMM of M sequences runs max(M, 17) rows.

How fast. Hugging Face's "Creating custom kernels for the AMD MI300" (2025-07-09, huggingface/blog @4550114d
`mi300kernels.md`, Skinny GEMM Results, the "Torch time" column) timed that call on one MI300X in AMD's
rocm/vllm:rocm6.3.1_mi300_ubuntu22.04_py3.12_vllm_0.6.6 container (a V0 release), under a CUDA graph with several weight
copies (no cache hits), on Llama 3.1 405B's TP 8 shapes at M = 1, 8, 16, 32 (estimate/data/rocm_fp8_scaled_mm.csv):
QKV (N 2304, K 16384) 14.9-16.8 us, gate/up (13312 x 16384) 75.2-82.2 us, down (16384 x 6656) 31.1-35.6 us. At M = 1 they
stream their FP8 weights at 2.53, 2.81 and 3.51 TB/s, 0.48-0.66 of the 5.3 TB/s datasheet, where the decode memory term
reads weights at the packaged memory efficiency (0.8). A shape the blog did not time (the output projection, 16384 x
2048: "its dimensions do not correspond to the skinny GEMM case") streams at the three shapes' combined M = 1 rate,
364.9 MB in 123.6 us = 2.95 TB/s. Between measured M the time is interpolated; above M = 32 the M = 32 time is the
memory side of the GEMM's roofline (the speed engine's compute term takes over as M grows).

Which stacks. The times were taken with ROCm 6.3.1's hipBLASLt in a vLLM 0.6.6 container: they price V0 scenarios
(infer.vllm_v0) on the GPU they were measured on. vLLM 0.10.2 (V1, ROCm 7.0) runs M = 1 through its own skinny kernel
(`wvSplitKQ`) and larger M through ROCm 7.0's hipBLASLt, for which no time by shape was found: V1 keeps the packaged rate.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .datafiles import rows

KERNEL = "hipblaslt-rocm6.3"
V0_PAD_ROWS = 17     # apply_fp8_linear: scaled_fp8_quant(..., num_token_padding=17)


@lru_cache(maxsize=None)
def _table(gpu_id: str) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(N, K) -> sorted [(M, seconds)] of the measured torch._scaled_mm times on `gpu_id`."""
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in rows("rocm_fp8_scaled_mm.csv"):
        if r["gpu"] == gpu_id and r["kernel"] == KERNEL:
            out.setdefault((int(r["n"]), int(r["k"])), []).append((float(r["m"]), float(r["time_us"]) * 1e-6))
    return {key: sorted(v) for key, v in out.items()}


def measured(gpu_id: str) -> bool:
    """Whether the V0 ROCm FP8 GEMM times are published for this GPU."""
    return bool(_table(gpu_id))


@lru_cache(maxsize=None)
def stream_bytes_per_s(gpu_id: str) -> float:
    """The measured shapes' combined FP8 weight-streaming rate at M = 1 (bytes over seconds, one byte a weight)."""
    pts = [(n * k, v[0][1]) for (n, k), v in _table(gpu_id).items() if v[0][0] == 1.0]
    return sum(b for b, _ in pts) / sum(t for _, t in pts)


# vLLM fuses a decoder layer's q/k/v projections into one QKVParallelLinear and gate/up into one
# MergedColumnParallelLinear (column-parallel: outputs split over the TP ranks); o_proj and down_proj are
# RowParallelLinear (inputs split). vllm/model_executor/models/llama.py, v0.6.3 source release.
_COLUMN_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
_ROW = ("o_proj", "down_proj")


def vllm_linear_shapes(blocks, tp: int, pp: int = 1) -> list[tuple[float, float, float]]:
    """(calls per step, N, K) of the dense decoder-layer linears one TP rank runs, as vLLM fuses and splits them
    (above); a linear outside those groups keeps its own shape with the larger side split."""
    out: list[tuple[float, float, float]] = []
    grouped: dict[int, list] = {}
    for b in blocks:
        if b.linear is None or b.layer_scope != "layer" or b.kind == "expert":
            continue
        k, n = b.linear
        name = b.name.rsplit(".", 1)[-1]
        g = next((i for i, grp in enumerate(_COLUMN_GROUPS) if name in grp), None)
        if g is not None:
            grouped.setdefault(g, []).append(b)
        elif name in _ROW:
            out.append((b.count / pp, float(n), k / tp))
        else:
            out.append((b.count / pp, float(n) if k >= n else n / tp, k / tp if k >= n else float(k)))
    for members in grouped.values():
        k = members[0].linear[0]
        out.append((members[0].count / pp, sum(b.linear[1] for b in members) / tp, float(k)))
    return out


def linear_seconds(gpu_id: str, m: float, n: float, k: float) -> float:
    """Seconds of one torch._scaled_mm of m rows through an FP8 weight of n outputs and k inputs on `gpu_id`: the
    measured time of that shape, linear in m between the measured rows and held beyond them; another shape streams its
    n x k bytes at the combined measured rate."""
    pts = _table(gpu_id).get((int(round(n)), int(round(k))))
    if not pts:
        return n * k / stream_bytes_per_s(gpu_id)
    return float(np.interp(m, [p[0] for p in pts], [p[1] for p in pts]))   # linear inside, held at both ends

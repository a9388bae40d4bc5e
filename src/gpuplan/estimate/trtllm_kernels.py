"""TensorRT-LLM's fixed GPU time per decoder layer of a step: the ops one Llama decoder layer runs, each at its measured
floor in a CUDA graph (docs/speed.md §3.33). The speed engine's `engines.trtllm.layer_overhead_s` is this sum
(scripts/calibrate_speed.py sets it from here; it is no longer fitted).

The ops, counted in TensorRT-LLM's PyTorch backend (NVIDIA/TensorRT-LLM; the revisions read carry PR 6205's Llama
fusions, merged 2025-07-20, before the perf-overview's v1.0):

- `LlamaDecoderLayer.forward` (tensorrt_llm/_torch/models/modeling_llama.py @3a5901cd0d77bed18baaf402d1d12fab468d44a9):
  at TP1 (no all-reduce, so no fused all-reduce + norm) a layer runs self_attn (qkv_proj, the attention op, o_proj),
  `post_attention_layernorm(hidden_states, residual)`, the GatedMLP (gate_up_proj, SwiGLU, down_proj) and the next
  layer's `input_layernorm(hidden_states, residual)` (`next_layer_layernorm`); each RMSNorm with a residual is one
  flashinfer `fused_add_rmsnorm` kernel (modules/rms_norm.py), the SwiGLU one kernel (modules/gated_mlp.py `swiglu`).
- A quantized Linear (`FP8QDQLinearMethod.apply`, modules/linear.py @00bbf71e796406ea8593a77cbfb828356182db16)
  quantizes a 16-bit input first (`static_quantize_e4m3_per_tensor`, one kernel) and then runs the GEMM
  (`cublas_scaled_mm`); an input already in FP8 goes straight to the GEMM. `NVFP4LinearMethod` the same with
  `fp4_quantize` + `nvfp4_gemm` (docs/speed.md §3.28).
- o_proj's input is already quantized: `Attention.forward` passes `out_scale = o_proj.inv_input_scale` (FP8) and the
  NVFP4 scale to the attention op, which writes o_proj's input itself (§3.28).

So per layer: three quantized Linears (qkv, gate_up, down), one GEMM on a quantized input (o_proj), one attention op,
and three element-wise kernels (two fused add + RMSNorm, one SwiGLU) -- the same count in FP8 on Hopper and NVFP4 on
Blackwell.

Each op's floor is read from NVIDIA's aiconfigurator databases (estimate/data/trtllm_op_floors.csv, written by
scripts/extract_trtllm_op_floors.py): TensorRT-LLM's own ops timed in CUDA graphs on H100/H200 (three TensorRT-LLM
versions) and B200/GB200 (three / two), the median of each table's 20 smallest latencies; per family the median over
its tables. A static FP8 Linear is the collected (dynamic) FP8 Linear minus the compute-scale part, a GEMM on an FP8
input that minus the quantize kernel too -- aiconfigurator's own `fp8_static` derivation (aic-core
operators/gemm.rs); an NVFP4 GEMM on an NVFP4 input is the NVFP4 Linear minus a quantize kernel; an element-wise
kernel is the FP8 quantize kernel (one read and one write of the activation, the one such kernel the databases time).

Not counted: MoE layers (a router GEMM, routing and the fused-MoE kernels instead of the GatedMLP: more ops than a
dense layer), tensor-parallel all-reduces (priced by the collectives' own latency term), the extra context-phase
kernels of a step that carries prompts, and steps no CUDA graph covers.
"""
from __future__ import annotations

import statistics
from functools import lru_cache

from .datafiles import rows

# per family: (op, how many per decoder layer, what) for one Llama decoder layer of a decode step at TP1
LLAMA_LAYER_OPS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "hopper": (("linear_fp8_static", 3, "qkv_proj, gate_up_proj, down_proj: FP8 quantize + cublas_scaled_mm"),
               ("gemm_fp8_input", 1, "o_proj: the attention op writes its FP8 input"),
               ("attention_decode", 1, "the attention op (generation phase, FP8 KV cache)"),
               ("elementwise", 3, "post-attention and next-layer fused add + RMSNorm, SwiGLU")),
    "blackwell": (("linear_nvfp4", 3, "qkv_proj, gate_up_proj, down_proj: fp4_quantize + nvfp4_gemm"),
                  ("gemm_nvfp4_input", 1, "o_proj: the attention op writes its NVFP4 input"),
                  ("attention_decode", 1, "the attention op (generation phase, FP8 KV cache)"),
                  ("elementwise", 3, "post-attention and next-layer fused add + RMSNorm, SwiGLU")),
}


@lru_cache(maxsize=None)
def measured_floor_us(family: str, op: str) -> float:
    """Median over `family`'s tables (GPU x TensorRT-LLM version) of a measured op floor in microseconds
    (trtllm_op_floors.csv: linear_fp8_dynamic, fp8_compute_scale, fp8_quantize, linear_nvfp4, attention_decode)."""
    vals = [float(r["floor_us"]) for r in rows("trtllm_op_floors.csv") if r["family"] == family and r["op"] == op]
    if not vals:
        raise KeyError(f"no measured TensorRT-LLM floor of {op!r} on {family!r}")
    return statistics.median(vals)


def op_floor_us(family: str, op: str) -> float:
    """Fixed time in microseconds of one op of LLAMA_LAYER_OPS on `family`, from the measured floors."""
    m = lambda name: measured_floor_us(family, name)  # noqa: E731
    if op == "linear_fp8_static":
        return m("linear_fp8_dynamic") - m("fp8_compute_scale")
    if op == "gemm_fp8_input":
        return op_floor_us(family, "linear_fp8_static") - m("fp8_quantize")
    if op == "gemm_nvfp4_input":
        return m("linear_nvfp4") - m("fp8_quantize")
    if op == "elementwise":
        return m("fp8_quantize")
    return m(op)


def layer_fixed_seconds(family: str) -> float:
    """Seconds of fixed GPU time one Llama decoder layer adds to a TensorRT-LLM step on `family`."""
    return sum(n * op_floor_us(family, op) for op, n, _ in LLAMA_LAYER_OPS[family]) * 1e-6


def layer_overhead_priors() -> dict[str, float]:
    """`engines.trtllm.layer_overhead_s` per GPU family with a measured count (hopper, blackwell), and for every other
    family ("default") their mean: no TensorRT-LLM op floors are published for it here."""
    out = {fam: float(f"{layer_fixed_seconds(fam):.4g}") for fam in LLAMA_LAYER_OPS}
    out["default"] = float(f"{statistics.fmean(out.values()):.4g}")
    return out

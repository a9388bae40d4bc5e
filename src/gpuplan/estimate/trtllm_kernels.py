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

An MoE decoder layer (MOE_LAYER_OPS) runs the same attention half and norms, and in place of the GatedMLP's three ops
(gate_up, SwiGLU, down) a router GEMM and the MoE module's forward: `Qwen3MoE.forward`
(tensorrt_llm/_torch/models/modeling_qwen3_moe.py @03441af14b6675ec38275167cfd514595defb505) runs
`router_logits = self.gate(hidden_states)` (`Qwen3Gate.forward`: one `torch.ops.trtllm.cublas_mm`, a 16-bit GEMM)
and `self.experts(hidden_states, router_logits, ...)` (create_moe's module: routing, input quantize and the fused-MoE
op with its permute, grouped GEMMs, activation and finalize). aiconfigurator times that module's forward whole, in a
CUDA graph, router logits given (collector/trtllm/collect_moe.py @095f58a5, `moe.forward(hidden_states, logits)`),
so its floor prices it as one op; the router is the 16-bit Linear's floor. `moe_layer_overhead_priors` is what an MoE
layer adds to the dense layer's cost. Not where the call already follows a published latency curve that holds its
fixed time (TensorRT-LLM's NVFP4 MoE on data-centre Blackwell, speed.fp4_moe_rows_scale, docs/speed.md §3.23): the
engine adds it only off that curve.

A layer with a QK norm (Qwen3, `Qwen3Attention(QKNormRoPEAttention)`, modules/qk_norm_attention.py
@034c3f0a0d1d5d90e5567c8d953019bdf5243b77: `fuse_qk_norm_rope=True` by default) runs one more element-wise kernel
before the attention op, `torch.ops.trtllm.fused_qk_norm_rope` (RMSNorm of each q and k head and RoPE, in place on
the qkv GEMM's output; the attention op is then built without its own RoPE fusion): QK_NORM_OPS,
`qk_norm_layer_overhead_priors`.

Not counted: tensor-parallel all-reduces (priced by the collectives' own latency term, which already charges more
than TensorRT-LLM's all-reduce kernel's measured floor, docs/speed.md §3.33), the extra context-phase kernels of a
step that carries prompts, and steps no CUDA graph covers.
"""
from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Callable, Iterable

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


# per family: the ops an MoE decoder layer runs in place of the GatedMLP's (gate_up_proj, SwiGLU, down_proj), in the
# family's format (Hopper FP8 per-tensor, Blackwell NVFP4), CUTLASS fused MoE (the perf-overview's v1.0 backend, §3.23)
MOE_MLP_OPS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "hopper": (("linear_bf16", 1, "the router: Qwen3Gate.forward's cublas_mm on the 16-bit hidden states"),
               ("moe_fp8_cutlass", 1, "the MoE module: routing, FP8 quantize, fused-MoE op (CUTLASS)")),
    "blackwell": (("linear_bf16", 1, "the router: Qwen3Gate.forward's cublas_mm on the 16-bit hidden states"),
                  ("moe_nvfp4_cutlass", 1, "the MoE module: routing, NVFP4 quantize, fused-MoE op (CUTLASS)")),
}
QK_NORM_OPS: tuple[tuple[str, int, str], ...] = (
    ("elementwise", 1, "fused_qk_norm_rope: per-head RMSNorm of q and k and RoPE, one kernel"),)
DENSE_MLP_OPS: tuple[tuple[str, int], ...] = (("linear", 2), ("elementwise", 1))   # gate_up + down, SwiGLU


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
    if op == "linear":      # the family's quantized Linear (quantize + GEMM), as LLAMA_LAYER_OPS counts it
        return op_floor_us(family, LLAMA_LAYER_OPS[family][0][0])
    return m(op)


def layer_fixed_seconds(family: str) -> float:
    """Seconds of fixed GPU time one Llama decoder layer adds to a TensorRT-LLM step on `family`."""
    return sum(n * op_floor_us(family, op) for op, n, _ in LLAMA_LAYER_OPS[family]) * 1e-6


def _per_family(seconds: Callable[[str], float], families: Iterable[str]) -> dict[str, float]:
    """`seconds(family)` for each family with measured tables (to 4 significant figures), and for every other family
    ("default") their mean: no TensorRT-LLM op floors are published for it here."""
    out = {fam: float(f"{seconds(fam):.4g}") for fam in families}
    out["default"] = float(f"{statistics.fmean(out.values()):.4g}")
    return out


def layer_overhead_priors() -> dict[str, float]:
    """`engines.trtllm.layer_overhead_s` per GPU family with a measured count (hopper, blackwell), their mean
    elsewhere."""
    return _per_family(layer_fixed_seconds, LLAMA_LAYER_OPS)


def moe_layer_extra_seconds(family: str) -> float:
    """Seconds an MoE decoder layer adds to the dense layer's fixed time on `family`: its router GEMM and MoE module
    (MOE_MLP_OPS) at their measured floors, less the GatedMLP's three ops it does not run (DENSE_MLP_OPS)."""
    moe = sum(n * op_floor_us(family, op) for op, n, _ in MOE_MLP_OPS[family])
    dense = sum(n * op_floor_us(family, op) for op, n in DENSE_MLP_OPS)
    return (moe - dense) * 1e-6


def moe_layer_overhead_priors() -> dict[str, float]:
    """`engines.trtllm.moe_layer_overhead_s` per GPU family with measured tables (hopper, blackwell), their mean
    elsewhere."""
    return _per_family(moe_layer_extra_seconds, MOE_MLP_OPS)


def qk_norm_layer_overhead_priors() -> dict[str, float]:
    """`engines.trtllm.qk_norm_layer_overhead_s`: the fused QK-norm + RoPE kernel a QK-norm layer adds (QK_NORM_OPS)
    per GPU family with measured tables, their mean elsewhere."""
    return _per_family(lambda fam: sum(n * op_floor_us(fam, op) for op, n, _ in QK_NORM_OPS) * 1e-6, LLAMA_LAYER_OPS)

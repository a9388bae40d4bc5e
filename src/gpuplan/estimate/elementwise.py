"""HBM traffic of a decoder layer's element-wise kernels, by how they are fused (docs/speed.md §2.3.1).

Norms, RoPE, the MLP activation, residual adds, dtype casts and layout copies are memory-bound: each
kernel reads its inputs from HBM and writes its outputs. How many kernels a layer launches depends on the
stack, not the model:

* eager  — PyTorch without torch.compile runs one kernel per aten op. A Llama RMSNorm written as
  x.float() → pow → mean → rsqrt → mul → type_as → mul weight is seven kernels forward and more backward,
  each passing the whole fp32 or bf16 tensor. MEASURED, not fitted: scripts/trace_elementwise.py runs one
  layer forward + backward under a TorchDispatchMode and sums the input + output bytes of every non-GEMM,
  non-attention, data-moving aten op (bf16 activations). Its totals are linear in the layer's widths,
  bytes/token = a·h + b·i + c·kv (+ a per-token constant < 1 % at real widths, left out). An HF RMSNorm layer of
  another family is the Llama layer plus what its traits add, each traced on transformers' own module
  (eager_trait_bytes: the norm class, the sandwich's extra norms, q/k norms, Phi-3's fused-projection splits).
* compiled — torch.compile (Inductor) fuses every chain of point-wise ops and one reduction into one
  kernel that reads the chain's inputs once and writes its outputs once, and fuses the residual add into
  the following norm (Inductor's pointwise/reduction fusion, torch/_inductor/scheduler.py `can_fuse`).
  Derived from the op graph: the minimal reads and writes of each fused region (COMPILED below).
* fused  — framework kernels: Megatron-LM / Transformer Engine (fused LayerNorm/RMSNorm, fused RoPE
  `apply_rope_fusion`, bias-SwiGLU / bias-GeLU fusions, bias-dropout-add; GQA inside the attention
  kernel), Liger and Unsloth (Triton RMSNorm, RoPE, SwiGLU). The norm and the residual add stay two
  kernels; otherwise the same region traffic as compiled (FUSED below).

How fast those bytes move is measured too, not fitted (estimate/data/elementwise_bandwidth.csv): on an H200 the
eager aten kernels move their traced bytes at 0.50-0.69 of the HBM bandwidth by layer kind (non-vectorised
broadcasting products in RoPE and RMSNorm, strided copies; the loss's multi-pass softmax 0.58), plain vectorised
casts and adds (peft's adapter work) at the copy rate, and torch.compile's fused kernels the regions' minimal bytes
at 0.43-0.69 (scripts/bench_elementwise_layers.py); framework-fused kernels take the compiled layers' mean. Until 2026-12-04 the
speed model priced these bytes with a pass count fitted on llm-foundry's A100 rows alone (`elementwise_passes`):
it sat at its bound (30) without that source and ran the eager kernels about 4x too fast on the H200, which a
too-slow GEMM size penalty compensated (docs/speed.md §2.3.1).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from . import datafiles

# Eager bytes per token per layer, forward + backward, bf16 activations: (a, b, c) in a·h + b·i + c·kv,
# from `PYTHONPATH=src python3 scripts/trace_elementwise.py` (torch 2.13 CPU; the op sequence is the
# source's, the device does not change which aten ops run)
EAGER_MEASURED: dict[str, tuple[float, float, float]] = {
    # torchtitan models/llama/model.py @ 9dec370: RMSNorm on x.float(), complex RoPE, repeat_kv, SwiGLU
    "torchtitan": (361.88, 29.6, 17.415),
    # transformers LlamaDecoderLayer (traced as imported): LlamaRMSNorm, rotate_half RoPE, repeat_kv, SwiGLU
    "hf": (358.188, 28.0, 52.0),
    # llm-foundry MPT layer: native LayerNorm kernel, GELU, residual adds, qkv split (no RoPE: ALiBi)
    "layernorm_gelu": (56.188, 10.0, 0.0),
    # the hf layer with peft LoRA (r 16) on its seven linears, base frozen in bf16, adapters fp32 (peft's
    # autocast_adapter_dtype), under bf16 autocast as HF Trainer runs a LoRA step: each adapter casts its input to
    # fp32 and autocast casts it back for the matmul, scales the adapter output and adds it to the base output, and
    # backward mirrors it (the excess over "hf", 233h + 67i + 34kv, is mostly _to_copy, add and mul). Measured on
    # the H200 (validation/device/h200-2026-12-04-kernels.jsonl HK04, Llama-3.1-8B LoRA): element-wise kernels
    # 324 ms of a 735 ms step, against 105-134 ms on a full fine-tune of a model with an eighth of the layer width.
    "hf_lora": (591.125, 95.0, 86.0),
}

MODES = ("eager", "compiled", "fused")

# What a model's traits add to the Llama layer of an HF RMSNorm model, eager, bytes per token per layer (fwd + bwd,
# bf16 activations), traced by the same script (`PYTHONPATH=src python3 scripts/trace_elementwise.py`, transformers
# 5.25). One RMSNorm module, forward + backward with its weight gradient, per normed element, by the norm_dtype its
# models get: LlamaRMSNorm (x.float(), normalise, cast back, * weight in bf16) 132 = forward 6 + 8 + 4 + 8 + 6 + 4 (up-
# cast, pow, mean, * rsqrt, down-cast, * weight) + backward 96; Gemma2RMSNorm (the weight multiply (1 + w) in fp32
# before the cast) 148 = forward 40 + backward 108. The whole traced layers check the sums (tests/test_elementwise.py):
# Gemma2DecoderLayer 688.0·h = 358.188 + 4·148 - 2·132 + 1.8; Qwen3 (LlamaRMSNorm-class q/k norms per head)
# +132.9·(h + kv); Olmo2DecoderLayer (Olmo2RMSNorm multiplies the weight in fp32 as Gemma's does) +180.5·h + 148.2·kv.
EAGER_NORM_BYTES: dict[str, float] = {"fp32_upcast": 132.0, "fp32": 148.0}
LLAMA_LAYER_NORMS = 2
# Phi-3's fused projections (transformers Phi3Attention slices q, k, v out of qkv_proj's output; Phi3MLP chunks
# gate_up_proj's): Phi3DecoderLayer less the Llama layer, (h, i, kv) = (18, 8, 52). The i term is the backward's cat of
# the two halves' gradients into the 2i-wide gradient (read 4 + write 4 per i); the h and kv terms are the q/k/v split's.
EAGER_FUSED_SPLIT_BYTES: tuple[float, float, float] = (18.0, 8.0, 52.0)
# Gemma-2's final logit softcap (transformers models/gemma2/modeling_gemma2.py Gemma2ForCausalLM.forward: logits / cap,
# tanh, * cap) on the bf16 logits, bytes per logit: forward 4 + 4 + 4, backward (* cap) 4 + tanh_backward (read grad and
# output, write) 6 + (/ cap) 4 = 26 (traced: softcap_bytes_per_logit). Contiguous same-shape bf16 unary kernels
# (aten's vectorized_elementwise_kernel<8>), priced at the copy rate (bandwidth_share "vectorized").
SOFTCAP_BYTES_PER_LOGIT = 26.0

# The loss of a stack that upcasts the 16-bit logits and runs aten's cross entropy, in bytes per logit, forward +
# backward: logits.float() (read 2, write 4), log_softmax (read 4, write 4), the zero-filled gradient of nll_loss's
# backward (write 4), log_softmax's backward (read the gradient and the output 8, write 4), the upcast's backward
# (read 4, write 2) = 36. transformers 5.25 loss/loss_utils.py ForCausalLMLoss (`logits = logits.float()` before
# fixed_cross_entropy -> F.cross_entropy); torchtitan @9dec370 train.py `cross_entropy(pred.flatten(0, 1).float(),
# labels)`. Other stacks keep efficiency.json's loss_bytes_per_logit (fused or compiled cross entropy).
EAGER_LOSS_BYTES_PER_LOGIT = 36.0
# Megatron-Core's gated activation with bias_activation_fusion off (megatron/core/transformer/mlp.py L146-155 and
# moe/experts.py TEGroupedMLP L786-808 at terrykong/Megatron-LM @2ff0f099: `x = torch.chunk(x, 2, dim=-1);
# activation_func(x[0]) * x[1]`), bytes per element of i, fwd + bwd: the eager SwiGLU's aten ops as traced in the hf
# layer (silu 4, mul 6, backward two products 12 and silu_backward 6 = 28: EAGER_MEASURED["hf"] i term) plus the
# chunk's backward, the cat of the two halves' gradients into the 2i-wide gradient (read 4 + write 4: the i term of
# EAGER_FUSED_SPLIT_BYTES, Phi-3's same split). The fused bias-SwiGLU region is 16 (region_bytes).
UNFUSED_GLU_BYTES = EAGER_MEASURED["hf"][1] + EAGER_FUSED_SPLIT_BYTES[1]
EAGER_LOSS_FRAMEWORKS = ("hf", "torchtitan")
# Megatron-Core's unfused RoPE (megatron/core/models/common/embeddings/rope_utils.py `_apply_rotary_pos_emb_bshd` and
# `_rotate_half` at NVIDIA/Megatron-LM@b0cc2706d, the Megatron-LM of Megatron-Bridge v0.3.0; the same at 0d8e0714c):
# `t * cos_ + cat(-x2, x1) * sin_`, then `cat((t, t_pass))`, applied to q and to k separately. YaRN runs it: with
# apply_rope_fusion on, apply_rotary_pos_emb takes the unfused path whenever mscale != 1 ("mscale=... is not
# supported by TE's fused RoPE. Using unfused implementation"), and YaRN's mscale is 0.1 ln(factor) + 1 (attention.py
# passes `_yarn_get_concentration_factor_from_config`); Megatron-Bridge also turns the fusion off for any
# position_embedding_type other than "rope" (src/megatron/bridge/utils/fusions.py validate_rope_fusion_compatibility,
# v0.2.0 and v0.3.0; gpt-oss is "yarn"). Bytes per element of q and of k, bf16, traced on CPU under a
# TorchDispatchMode (torch 2.13; slices and chunks are views; the cos/sin of the (s, d) frequencies are per position,
# not per head, and left out): forward mul 4, neg of the half 2, cat 4, mul 4, add 6, cat with the empty t_pass 4 = 24;
# backward mul 4, neg 2, cat (the chunk's backward) 4, mul 4, add of the two gradients 6, the empty t_pass slice's
# zero-filled gradient 2, add 6 = 28. The fused region's RoPE is 8 (region_bytes).
UNFUSED_ROPE_BYTES = (24.0, 28.0)
FUSED_ROPE_BYTES = 8.0


def megatron_unfused_rope(framework: str, traits: Any, mla: bool) -> bool:
    """True when Megatron applies RoPE with its unfused torch ops: YaRN scaling with a factor above 1 (mscale != 1),
    outside MLA (whose rotary part is applied by its own code)."""
    return (framework == "megatron" and not mla and getattr(traits, "position", "rope") == "rope"
            and bool(getattr(traits, "yarn_scaled", False)))


def residual_region_bytes(mode: str, h: float) -> float:
    """Bytes per token per layer (fwd + bwd, 2-byte activations) of the layer's two residual add + norm regions
    alone (region_bytes' first term): 2 x 20 h compiled, 2 x 22 h fused. These are the ops Megatron's sequence
    parallelism splits over the tensor-parallel ranks; without it every TP rank runs them over the whole sequence
    (speed._elementwise_time)."""
    return 2 * (20.0 if mode == "compiled" else 22.0) * h


def region_bytes(mode: str, h: float, i: float, kv: float, *, gated: bool, rope: bool,
                 gqa_copies: bool, extra_norm_elements: float = 0.0, activation_fused: bool = True) -> float:
    """Bytes per token per layer (fwd + bwd, 2-byte activations) when every fused region reads its inputs
    and writes its outputs once (compiled, fused). Per region, forward + backward:
      residual add + norm, twice a layer: compiled one kernel fwd (read x and the branch output, write
        the sum and the normed: 8 B/elt), bwd one kernel for grad_x (read x, grad_y, the residual grad,
        write: 8) and one reduction over tokens for the norm weight (read x, grad_y: 4) = 20 per norm;
        fused (separate kernels): fwd add 6 + norm 4, bwd norm 6 (weight grad in the same kernel) +
        the residual grad accumulation 6 = 22 per norm
      RoPE on q (h) and k (kv): read + write, fwd and bwd: 8 per element
      gated MLP activation act(gate)·up: fwd read 2 write 1 (6 B per i), bwd read 3 write 2 (10) = 16;
        plain activation: fwd 4, bwd read x and grad, write grad (6) = 10
      GQA copies (repeat_kv before SDPA, compiled only): k and v read kv write h fwd, the reverse bwd =
        8 per element of (h + kv)
      a norm beyond the two add + norm regions (sandwich post-norms, q/k norms; `extra_norm_elements` per token):
        a region of its own without an add, compiled fwd read + write 4, bwd grad_x 6 and the weight reduction 4 =
        14 per element; fused fwd 4, bwd 6 (weight grad in the same kernel) = 10
    `activation_fused` False (fused mode, gated MLP): Megatron's activation as torch ops, UNFUSED_GLU_BYTES per i
    instead of the fused region's 16 (a plain activation is one aten kernel each way either way)"""
    if mode not in ("compiled", "fused"):
        raise ValueError(f"region_bytes: mode {mode!r} is not a fused mode (compiled | fused)")
    b = residual_region_bytes(mode, h)
    if rope:
        b += 8.0 * (h + kv)
    b += ((16.0 if activation_fused or mode != "fused" else UNFUSED_GLU_BYTES) if gated else 10.0) * i
    if gqa_copies and mode == "compiled":
        b += 8.0 * (h + kv)
    return b + (14.0 if mode == "compiled" else 10.0) * extra_norm_elements


def eager_recipe(framework: str, norm: str) -> str:
    """Which measured op sequence an eager stack runs: torchtitan's or transformers' Llama layer for
    RMSNorm models, the MPT/GPT layer (native LayerNorm kernel) for LayerNorm models. Also the layer kind whose
    measured bandwidth share a compiled stack takes."""
    if norm != "rms":
        return "layernorm_gelu"
    return "torchtitan" if framework == "torchtitan" else "hf"


def eager_bytes(framework: str, norm: str, h: float, i: float, kv: float, *, gated: bool, rope: bool,
                lora: bool = False) -> float:
    """Measured eager bytes per token per layer (fwd + bwd, 2-byte activations). The h term comes from the
    recipe of this norm kind; the i term from a gated or plain MLP's measured activation; the kv term only
    with RoPE (it is RoPE on k and the GQA copies). `lora`: peft adapters on every linear of an HF layer."""
    rec = eager_recipe(framework, norm)
    if lora and rec == "hf":
        rec = "hf_lora"
    a, _, c = EAGER_MEASURED[rec]
    b = EAGER_MEASURED[rec if rec != "layernorm_gelu" else "hf"][1] if gated else EAGER_MEASURED["layernorm_gelu"][1]
    return a * h + b * i + (c if rope else 0.0) * kv


def stack_mode(framework: str, compile: bool, tool: str | None = None, loss: str = "full") -> str:
    """eager | compiled | fused for a training stack. torch.compile wins when on; Megatron-LM runs
    Transformer Engine's fused norms and its own fused RoPE/SwiGLU/bias-dropout-add; Unsloth patches in its
    Triton RMSNorm/RoPE/SwiGLU kernels and a Liger fused-linear loss means Liger's kernels are applied
    (apply_liger_kernel_to_* patches rms_norm, rope and swiglu by default); everything else is eager."""
    if compile:
        return "compiled"
    if framework == "megatron" or tool == "unsloth" or loss == "fused-linear":
        return "fused"
    return "eager"


def layer_bytes(mode: str, framework: str, norm: str, h: float, i: float, kv: float, *, gated: bool,
                rope: bool, gqa: bool, lora: bool = False) -> float:
    if mode == "eager":
        return eager_bytes(framework, norm, h, i, kv, gated=gated, rope=rope, lora=lora)
    return region_bytes(mode, h, i, kv, gated=gated, rope=rope, gqa_copies=gqa)


def extra_norms(traits: Any) -> int:
    """Norms on the residual stream beyond the Llama layer's two: the sandwich's post-norms (Gemma-2/3)."""
    return 2 if getattr(traits, "norm_placement", "pre") == "sandwich" else 0


def qk_norm_elements(traits: Any, q: float, kv: float) -> float:
    """Elements per token the q/k norms normalise (per head or over the whole projection: the same elements)."""
    return q + kv if getattr(traits, "qk_norm", "none") != "none" else 0.0


def eager_trait_bytes(traits: Any, h: float, i: float, kv: float, q: float) -> float:
    """What an HF RMSNorm model's traits add to the traced Llama layer, eager, bytes per token per layer: the norms'
    class (norm_dtype) on the two residual-stream norms, the sandwich's two more, q/k norms on q (heads x head_dim)
    and k, Phi-3's fused-projection splits. GeLU-tanh (gelu_pytorch_tanh) adds nothing: one aten kernel each way, as
    SiLU (Gemma2DecoderLayer's traced i term is the Llama layer's 28)."""
    if traits is None:
        return 0.0
    per_norm = EAGER_NORM_BYTES.get(traits.norm_dtype, EAGER_NORM_BYTES["fp32_upcast"])
    b = ((LLAMA_LAYER_NORMS + extra_norms(traits)) * per_norm - LLAMA_LAYER_NORMS * EAGER_NORM_BYTES["fp32_upcast"]) * h
    b += per_norm * qk_norm_elements(traits, q, kv)
    fh, fi, fkv = EAGER_FUSED_SPLIT_BYTES
    if getattr(traits, "fused_qkv", False):
        b += fh * h + fkv * kv
    if getattr(traits, "fused_gate_up", False):
        b += fi * i
    return b


def eager_loss_bytes_per_logit(framework: str, mode: str) -> float | None:
    """Bytes per logit of the stack's loss when it is aten's cross entropy on upcast logits (eager hf and
    torchtitan), else None (the stack's fused or compiled loss: efficiency.json loss_bytes_per_logit)."""
    return EAGER_LOSS_BYTES_PER_LOGIT if mode == "eager" and framework in EAGER_LOSS_FRAMEWORKS else None


@lru_cache(maxsize=1)
def _shares() -> dict[tuple[str, str], float]:
    return {(r["stack_mode"], r["recipe"]): float(r["bandwidth_share_of_spec"])
            for r in datafiles.rows("elementwise_bandwidth.csv")}


def bandwidth_share(mode: str, recipe: str = "") -> float:
    """The share of a GPU's spec HBM bandwidth at which this mode's element-wise kernels move the bytes gpuplan
    prices for them, for the layer `recipe` (eager_recipe's names, or "loss"); a recipe without a row of its own takes
    the mode's row (estimate/data/elementwise_bandwidth.csv: measured, the run and the arithmetic per row)."""
    table = _shares()
    for key in ((mode, recipe), (mode, "")):
        if key in table:
            return table[key]
    raise ValueError(f"elementwise.bandwidth_share: no measured row for mode {mode!r}, recipe {recipe!r} "
                     f"(modes: {', '.join(sorted({m for m, _ in table}))})")


def model_layer_bytes(model: Any, i_active: float, framework: str, mode: str, lora: bool = False,
                      activation_fused: bool = True) -> float:
    """Element-wise HBM bytes per token per layer, forward + backward, 2-byte activations, for a ModelSpec (its
    norm, MLP gating, position encoding and GQA) on this stack; `lora`: peft adapters on every linear. An HF RMSNorm
    layer (the "hf" recipe) adds what its traits add to the Llama layer (eager_trait_bytes); a compiled or fused
    stack adds the extra norms' regions (region_bytes)."""
    h = float(model.hidden_size)
    kv = float(model.num_kv_heads * model.head_dim)
    q = float(model.num_heads * model.head_dim)
    traits = getattr(model, "traits", None)
    rope = getattr(traits, "position", "rope") == "rope"
    gqa = model.num_kv_heads < model.num_heads
    if mode == "eager":
        b = eager_bytes(framework, model.norm, h, i_active, kv, gated=model.gated_mlp, rope=rope, lora=lora)
        if eager_recipe(framework, model.norm) == "hf":
            b += eager_trait_bytes(traits, h, i_active, kv, q)
        return b
    extra = extra_norms(traits) * h + qk_norm_elements(traits, q, kv) if traits is not None else 0.0
    return region_bytes(mode, h, i_active, kv, gated=model.gated_mlp, rope=rope, gqa_copies=gqa,
                        extra_norm_elements=extra, activation_fused=activation_fused)


def softcap_bytes_per_logit(model: Any, framework: str, mode: str) -> float:
    """Bytes per logit of the final logit softcap where the model has one and the stack runs transformers' own
    forward eagerly (an eager HF step; compiled or fused losses fold it into their kernels), else 0."""
    cap = getattr(getattr(model, "traits", None), "final_logit_softcap", None)
    return SOFTCAP_BYTES_PER_LOGIT if cap and mode == "eager" and framework == "hf" else 0.0

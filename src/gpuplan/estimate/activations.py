"""Activation bytes saved for backward, per token, derived tensor by tensor.

The decomposition follows Korthikanti et al. 2022 (arXiv:2205.05198 §4: every tensor a layer saves
for its backward) adapted to modern blocks (RMSNorm, gated MLP, GQA, flash attention) and to what
HF transformers actually saves, checked against fake-tensor traces (docs/model.md):

* RMSNorm (HF Llama style) upcasts to fp32 and saves that copy (4h) and the normalized 16-bit value
  before the weight multiply (2h); Gemma's norm stays in fp32 (4h + 4h).
* A linear saves its input (for the weight gradient) unless its weight is frozen. Under autocast
  (fp32 master weights) each consumer casts the fp32 residual stream separately, so q, k and v save
  three 16-bit copies of the same input.
* Flash/SDPA attention saves q, k, v, the output and an fp32 log-sum-exp per head; eager attention
  also keeps the fp32 softmax and its 16-bit copy (~6 bytes per score).
* A gated MLP saves gate, act(gate) and up (3 x i) plus the product feeding down_proj.
* LoRA: the frozen base linear keeps nothing for its weight gradient, but the adapter's first matrix
  keeps its input. With 16-bit adapters that is the tensor the layer already holds; with peft's
  default fp32 adapters under autocast, each adapter keeps its own 16-bit cast of the input.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..models.spec import ModelSpec


@dataclass(frozen=True)
class ActivationSetup:
    compute_bytes: int = 2         # dtype of matmul outputs (2 for bf16/fp16 incl. autocast, 4 for fp32)
    residual_bytes: int = 2        # dtype of the residual stream (4 under fp32-master autocast)
    autocast: bool = False         # fp32 params + 16-bit autocast
    frozen_base: bool = False      # LoRA/QLoRA: base linears do not keep their inputs
    lora_targets: frozenset[str] = frozenset()   # which linears carry adapters (q,k,v,o,gate,up,down)
    lora_rank: int = 0
    lora_copy_per_target: bool = False   # autocast: each adapter casts its input separately (traced)
    lora_dropout: bool = False           # adapters apply dropout to their input (keeps output + mask)
    base_saves_input: bool = False       # bitsandbytes 4-bit matmul saves its input even when frozen
    compile: bool = False                # torch.compile: fused norm and activation kernels
    attention: str = "flash"       # flash | sdpa | eager
    framework: str = "hf"
    ssm_kernels: bool = True       # SSM mixers run mamba_ssm's fused kernels (False: transformers' torch path)


@dataclass(frozen=True)
class LayerActivations:
    """Bytes per token per layer, split into what TP shards and what it replicates (no SP)."""
    replicated: float              # h-sized tensors (norms, residual-stream copies)
    sharded: float                 # heads- and intermediate-sized tensors
    score_bytes: float             # bytes per attention score (eager), multiply by heads*context

    @property
    def total(self) -> float:
        return self.replicated + self.sharded


# i-sized 16-bit tensors a plain (non-gated) MLP saves between fc1 and fc2, fc2's input included:
# torch's GELU saves its input (fc1 output) and fc2 keeps the activation output: 2. transformers'
# Python tanh approximations save their intermediates (traced, saved_tensors listing):
# NewGELUActivation 0.5*x*(1+tanh(c*(x+0.044715*x**3))) keeps x (pow), two Mul operands and the tanh
# result: 5 with fc2's input; FastGELUActivation 0.5*x*(1+tanh(x*c*(1+0.044715*x*x))) keeps 8.
# ReLU saves its result, which is also fc2's input: 1 (traced: OPT-1.3B through models/generic.py).
PLAIN_MLP_SAVES = {"gelu_new": 5, "gelu_fast": 8, "relu": 1}
PLAIN_MLP_SAVES_DEFAULT = 2     # an activation kernel that saves only its input

EAGER_SCORE_BYTES = 6.0         # eager attention: fp32 softmax + its 16-bit copy per score
MATH_PATH_SCORE_BYTES = 4.0     # SDPA math path: the fp32 probabilities per score
LSE_BYTES = 4                   # flash/efficient attention: fp32 log-sum-exp per head
ROUTER_BYTES_PER_EXPERT = 8     # router logits and probabilities in fp32, per expert
DROPOUT_MASK_BYTES = 1          # CUDA's fused native_dropout keeps a bool mask
# prefix of a routed expert's role in a resolved LoRA target set (memory._lora_targets): "experts.gate", ...
EXPERT_ROLE = "experts."


def math_path_attention(model: ModelSpec, s: ActivationSetup | None = None) -> bool:
    """HF Falcon-7B style multi-query attention under SDPA: one K/V head passed un-expanded (implicit
    broadcast, no enable_gqa) together with the causal mask Falcon always materialises. torch 2.13's
    fused kernels all require equal head counts unless enable_gqa (sdp_utils_cpp.h
    check_batch_size_and_num_heads_dense, used by the CUDA flash, memory-efficient and cuDNN checks
    alike), so SDPA runs its math path on CUDA as on CPU and keeps the S x S probabilities (traced;
    pytorch#191085 lets fused kernels take implicit MQA in later releases)."""
    if s is not None and (s.framework != "hf" or s.attention == "eager"):
        return False
    return model.traits.sdpa_broadcast_kv


def dropout_mask_bytes(model: ModelSpec) -> float:
    """Bytes per token per layer of dropout masks (CUDA's fused native_dropout keeps a 1-byte bool
    mask): residual dropout after attention and after the MLP when the config enables it (GPT-2
    resid_pdrop 0.1). Attention dropout happens inside the flash kernel (no mask)."""
    return 2.0 * DROPOUT_MASK_BYTES * model.hidden_size if model.traits.dropout.residual > 0 else 0.0


def embedding_dropout_bytes(model: ModelSpec) -> float:
    return float(DROPOUT_MASK_BYTES * model.hidden_size) if model.traits.dropout.embedding > 0 else 0.0


def _norm_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Saved bytes of one RMSNorm/LayerNorm per hidden element."""
    if s.compile:
        return float(s.residual_bytes)  # a fused norm keeps its input (and a per-token rstd)
    if s.frozen_base and s.residual_bytes == 2 and model.norm == "rms":
        return 4.0                      # frozen norm weight: only the fp32 upcast is kept
    if s.residual_bytes == 4 and not (model.norm == "layernorm" and s.framework == "hf"):
        return 8.0                  # fp32 input saved + normalized fp32
    if model.traits.norm_dtype == "fp32":
        return 8.0                  # the whole norm in fp32 (Gemma)
    if s.framework == "litgpt" and model.norm == "rms" and not s.frozen_base:
        return 8.0                  # litgpt RMSNorm: (x_normed * weight.float()).to(dtype): fp32 x and x_normed
    if model.norm == "layernorm" and s.framework == "hf":
        # torch's native_layer_norm saves only its input; mean and rstd (per token) are added by
        # layer_activations (traced: GPT-2, GPT-NeoX, Falcon)
        return float(s.residual_bytes)
    if model.norm == "layernorm":
        return 2.0 + 4.0            # other frameworks: earlier fit, not re-traced (litgpt rows)
    return 6.0                      # fp32 upcast + normalized 16-bit


def _mlp_mix(model: ModelSpec) -> tuple[float, float]:
    """Share of layers that are MoE, and the per-layer average MLP width a token passes through:
    dense first layers (DeepSeek first_k_dense_replace, Qwen3-MoE mlp_only_layers) keep a dense MLP,
    MoE layers k routed experts plus the shared ones."""
    if not model.is_moe:
        return 0.0, float(model.intermediate_size)
    moe_frac = (model.num_moe_layers or model.num_layers) / max(model.num_layers, 1)
    i_moe = model.moe_intermediate_size * model.experts_per_tok + model.shared_expert_intermediate
    return moe_frac, moe_frac * i_moe + (1 - moe_frac) * model.intermediate_size


def megatron_layer_activations(model: ModelSpec, s: ActivationSetup) -> LayerActivations:
    """Megatron-core with fused norms and flash attention (Korthikanti et al. 2022 Table 2, no
    dropout masks, gated MLP as in training-notes §2.2.4): norm inputs and linear inputs in 16-bit,
    q/k/v/output, the fp32 log-sum-exp, fc1's 2f-wide output (gate|up) and the activation output."""
    h, a, kv, d, vd = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim, model.v_head_dim
    b = s.compute_bytes
    moe_frac, f = _mlp_mix(model)
    rep = 4 * b * h                                   # two norm inputs, QKV input, fc1 input (2h each)
    if model.is_moe:
        rep += moe_frac * (model.experts_per_tok * b * h + ROUTER_BYTES_PER_EXPERT * model.num_experts)
    shard = b * (a * d + kv * d + kv * vd + a * vd) + LSE_BYTES * a
    shard += (3 if model.gated_mlp else 2) * b * f    # fc1 output (2f gated) + activation output
    return LayerActivations(replicated=rep, sharded=shard,
                            score_bytes=EAGER_SCORE_BYTES if s.attention == "eager" else 0.0)


# ---- HF-style layers, piece by piece (each returns bytes per token per layer) -------------------

def norm_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Replicated bytes of the layer's norms: the two pre-norms (sandwich placement adds two
    post-norms on the residual path), LayerNorm's per-token mean and rstd, residual dropout masks."""
    h = model.hidden_size
    norms = model.traits.layer_norms      # 1 when a parallel block shares one norm (GPT-J, phi, Cohere)
    out = norms * _norm_bytes(model, s) * h
    if model.traits.norm_placement == "sandwich":
        out += 2 * _norm_bytes(model, s) * h
    if model.norm == "layernorm" and not s.compile and s.framework == "hf":
        out += norms * 2 * (4 if s.residual_bytes == 4 else s.compute_bytes)   # mean + rstd per token, per norm
    return out + dropout_mask_bytes(model)


def qk_norm_bytes(model: ModelSpec) -> float:
    """q/k RMSNorms (per head: Qwen3, Gemma-3; over the whole projection: OLMo-2): the fp32 upcast
    and the normalized 16-bit value of q and k."""
    if model.traits.qk_norm == "none":
        return 0.0
    return 6 * (model.num_heads + model.num_kv_heads) * model.head_dim


def _attention_kv_heads(model: ModelSpec, s: ActivationSetup) -> int:
    """K/V heads attention saves: torchtune MultiHeadAttention (k.unsqueeze(2).expand(...).flatten(1, 2))
    and litgpt CausalSelfAttention (k.expand(...).reshape(...)) copy K/V to all query heads before
    SDPA; HF passes kv heads with enable_gqa."""
    if model.is_mla or s.framework in ("torchtune", "litgpt"):
        return model.num_heads      # (MLA materialises per-head K/V)
    return model.num_kv_heads


def mla_attention_bytes(model: ModelSpec, s: ActivationSetup) -> tuple[float, float]:
    """(replicated, sharded) of HF DeepSeek-V2/V3 multi-latent attention (traced, saved_tensors
    listing + CUDA memory-efficient SDPA): q is the concatenation of its nope and rope parts (a new
    a x d_qk tensor); k is a new a x d_qk tensor (k_nope copied next to the broadcast k_rope); v is a
    view of kv_b_proj's output, which therefore stays alive whole (a x (nope + v)); the attention
    output (o_proj's input) and the fp32 lse. The latent RMSNorms (kv_a_layernorm over kv_lora_rank,
    q_a_layernorm over q_lora_rank) keep the norm's fp32 upcast and normalized value plus the
    weighted output kept by kv_b_proj / q_b_proj."""
    a, d, vd, b = model.num_heads, model.head_dim, model.v_head_dim, s.compute_bytes
    shard = b * (2 * a * d + a * (model.qk_nope_head_dim + vd) + a * vd) + LSE_BYTES * a
    rep = 0.0
    for rank in (model.kv_lora_rank, model.q_lora_rank):
        rep += (_norm_bytes(model, s) + (0 if s.frozen_base else b)) * rank
    return rep, shard


def attention_bytes(model: ModelSpec, s: ActivationSetup) -> tuple[float, float]:
    """(replicated, sharded) bytes of the attention core: q, k, v, output and the fp32 log-sum-exp."""
    a, d, vd, b = model.num_heads, model.head_dim, model.v_head_dim, s.compute_bytes
    kv = a if model.is_mla else model.num_kv_heads     # MLA materialises per-head K/V
    if math_path_attention(model, s):
        # SDPA's math path (torch 2.13 math backend upcasts 16-bit inputs to fp32): the scaled fp32 q,
        # the fp32 scaled k and v (kv heads, broadcast) and the output (o_proj's input); the fp32
        # probabilities (a x S per token) are the score bytes. No log-sum-exp.
        shard = 4 * a * d + 4 * kv * (d + vd) + b * a * vd
        rep = 0.0
    elif model.is_mla and s.framework not in ("torchtune", "litgpt"):
        rep, shard = mla_attention_bytes(model, s)
    else:
        kv_att = _attention_kv_heads(model, s)
        shard = b * (a * d + kv_att * d + kv_att * vd + a * vd) + LSE_BYTES * a
        rep = 0.0
    if model.traits.fused_qkv_output_kept:
        # rotary makes new q and k, while v stays a view of the fused qkv projection output, which
        # therefore stays alive whole: q and k are held twice (traced)
        shard += b * (a * d + kv * d)
    return rep, shard


def mlp_bytes(model: ModelSpec, s: ActivationSetup, i_eff: float) -> float:
    """Sharded bytes inside the MLP, fc2's input excluded (counted with the linear inputs): gated
    MLPs keep gate, act(gate) and up; a plain MLP what its activation function saves."""
    b = s.compute_bytes
    if model.gated_mlp:
        return (2 if s.compile else 3) * b * i_eff   # compiled SwiGLU recomputes act(gate) in backward
    saves = PLAIN_MLP_SAVES.get(model.traits.activation, PLAIN_MLP_SAVES_DEFAULT)
    return (saves - 1) * b * i_eff


def moe_routing_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Replicated bytes of one MoE layer's routing: each routed copy of a token gathers its input;
    router logits and probabilities in fp32."""
    if not model.is_moe:
        return 0.0
    h, b, k = model.hidden_size, s.compute_bytes, model.experts_per_tok
    moe = k * b * h + ROUTER_BYTES_PER_EXPERT * model.num_experts
    if s.framework == "hf":
        # transformers' MoE combine `proj_out * sample_weights` (integrations/moe.py): the routing
        # weights take a gradient, so every routed copy's expert output (k x h) is saved (traced)
        moe += k * b * h
        if model.traits.router_fp32:
            # the gate runs F.linear(hidden.float(), weight.float()): the fp32 input is saved
            moe += 4 * h
    return moe


def _consumers(model: ModelSpec) -> dict[str, tuple[str, ...]]:
    return {"attn_in": ("q", "k", "v"), "o_in": ("o",), "mlp_in": ("gate", "up") if model.gated_mlp else ("up",),
            "down_in": ("down",)}


def base_input_bytes(model: ModelSpec, s: ActivationSetup, tensor: str, width: float) -> float:
    """Bytes the base linears consuming `tensor` save of it for their weight gradient."""
    if s.frozen_base and not s.base_saves_input:
        return 0.0
    b = s.compute_bytes
    if tensor == "o_in":
        return 0.0                                      # the attention output, already kept
    if tensor == "down_in":
        return b * width                                # gated: the product; plain: the activation output
    if s.autocast:
        n_casts = 1 if (tensor == "attn_in" and model.traits.fused_qkv) else len(_consumers(model)[tensor])
        return n_casts * b * width                      # one 16-bit cast per consumer
    return b * width


def adapter_input_bytes(model: ModelSpec, s: ActivationSetup, tensor: str, width: float) -> float:
    """Bytes LoRA adapters on the linears consuming `tensor` save: their input copies and the
    rank-sized intermediate of each adapter."""
    names = _consumers(model)[tensor]
    if not s.frozen_base or not any(n in s.lora_targets for n in names):
        return 0.0
    if s.base_saves_input and not s.lora_copy_per_target and not s.lora_dropout:
        # a 4-bit base that saves its input shares it with 16-bit adapters (unless the adapters apply
        # dropout: then dropout(x) and its mask are new tensors, as without quantization)
        return 0.0
    b = s.compute_bytes
    hits = sum(1 for n in names if n in s.lora_targets)
    # one adapter module per target, except a fused q/k/v projection (litgpt's model code,
    # GPT-2/NeoX/Falcon/Phi-3) whose single LoRA module serves all three
    fused = tensor == "attn_in" and (s.framework == "litgpt" or model.traits.fused_qkv)
    modules = 1 if fused else hits
    saved = 0.0
    if s.lora_copy_per_target:
        # peft casts the input to the fp32 adapter dtype and autocast casts it back to 16-bit:
        # every adapted linear keeps its own 16-bit copy (+ dropout's 1-byte mask)
        saved += modules * (b + (DROPOUT_MASK_BYTES if s.lora_dropout else 0)) * width
    elif s.lora_dropout:
        saved += modules * (b + DROPOUT_MASK_BYTES) * width   # each adapter keeps dropout(x) and its mask
    elif tensor != "o_in":
        saved += b * width            # 16-bit adapters share the input the layer already holds
    return saved + hits * b * s.lora_rank


def _adapter_bytes(model: ModelSpec, s: ActivationSetup, tensor: str, width: float) -> float:
    """adapter_input_bytes, with a MoE's routed experts adapted apart from its dense and shared MLPs (roles
    "experts.<role>" in lora_targets: peft on transformers 5 adapts the shared expert but not the fused routed
    experts, memory.peft_fused_experts). MLP inputs: a MoE layer keeps adapter inputs when either kind is adapted;
    down_proj's input counts only the adapted kinds' width."""
    if not model.is_moe or tensor not in ("mlp_in", "down_in") or not s.frozen_base:
        return adapter_input_bytes(model, s, tensor, width)
    routed_roles = frozenset(r[len(EXPERT_ROLE):] for r in s.lora_targets if r.startswith(EXPERT_ROLE))
    routed = any(r in routed_roles for r in _consumers(model)[tensor])
    dense = any(r in s.lora_targets for r in _consumers(model)[tensor])
    if not (routed or dense):
        return 0.0
    merged = dataclasses.replace(s, lora_targets=s.lora_targets | routed_roles)
    moe_frac, _ = _mlp_mix(model)
    shared = model.shared_expert_intermediate
    if tensor == "mlp_in":
        in_moe = routed or (dense and shared > 0)
        share = moe_frac * in_moe + (1.0 - moe_frac) * dense
        return share * adapter_input_bytes(model, merged, tensor, width)
    adapted = (moe_frac * (routed * model.moe_intermediate_size * model.experts_per_tok + dense * shared)
               + (1.0 - moe_frac) * dense * model.intermediate_size)
    return adapter_input_bytes(model, merged, tensor, adapted) if adapted > 0 else 0.0


def linear_input_bytes(model: ModelSpec, s: ActivationSetup, i_eff: float) -> tuple[float, float]:
    """(replicated, sharded) bytes the linears save of their inputs: h-wide inputs (attention and MLP
    input) are replicated under TP, the attention output and the MLP product are sharded."""
    widths = {"attn_in": model.hidden_size, "o_in": model.num_heads * model.v_head_dim,
              "mlp_in": model.hidden_size, "down_in": i_eff}
    rep = shard = 0.0
    for tensor, width in widths.items():
        if tensor == "mlp_in" and model.traits.layer_norms == 1 and not s.autocast and not s.frozen_base:
            # one shared norm feeds attention and MLP: its output is one tensor, kept once (under
            # autocast each consumer still casts its own copy)
            continue
        saved = base_input_bytes(model, s, tensor, width) + _adapter_bytes(model, s, tensor, width)
        if tensor in ("attn_in", "mlp_in"):
            rep += saved
        else:
            shard += saved
    return rep, shard


def score_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Bytes kept per attention score (multiply by heads x context): eager softmax, or SDPA's math path.
    A family transformers runs only eagerly (BLOOM: baddbmm + ALiBi, fp32 softmax, 16-bit probabilities
    for the bmm) keeps them whatever attention the scenario asks for (traced: bloom-560m)."""
    if s.attention == "eager" or (model.traits.eager_attention_only and s.framework == "hf"):
        return EAGER_SCORE_BYTES
    return MATH_PATH_SCORE_BYTES if math_path_attention(model, s) else 0.0


def layer_activations(model: ModelSpec, s: ActivationSetup) -> LayerActivations:
    """Bytes per token per layer saved for backward, summed from the pieces above."""
    if model.recurrent is not None:
        return recurrent_layer_activations(model, s)
    if model.ssm is not None:
        return ssm_layer_activations(model, s)
    if s.framework == "megatron":
        return megatron_layer_activations(model, s)
    moe_frac, i_eff = _mlp_mix(model)
    att_rep, att_shard = attention_bytes(model, s)
    lin_rep, lin_shard = linear_input_bytes(model, s, i_eff)
    rep = norm_bytes(model, s) + att_rep + moe_frac * moe_routing_bytes(model, s) + lin_rep
    shard = qk_norm_bytes(model) + att_shard + mlp_bytes(model, s, i_eff) + lin_shard
    return LayerActivations(replicated=rep, sharded=shard, score_bytes=score_bytes(model, s))


# ---- state-space (Mamba) mixers ----------------------------------------------------------------------
# Bytes per token of one SSM layer's mixer saved for backward, 16-bit compute (b = 2), no autocast.
# Symbols: d = d_inner, N = d_state, R = dt_rank, H = Mamba-2 heads, G = groups, Q = chunk length.
#
# Fused kernels (state-spaces/mamba v2.2.4 @95d8aba, unchanged at e9594ce: ops/selective_scan_interface.py
# MambaInnerFn with checkpoint_lvl=1, the default, and ops/triton/ssd_combined.py
# MambaSplitConv1dScanCombinedFn; chunk states every 2048 tokens: csrc/selective_scan/selective_scan.cpp
# n_chunks = ceil(seqlen / 2048)): the conv output and dt are
# recomputed in backward; saved are the in_proj output (xz / zxbcdt), x_proj's output and contiguous
# copies of B and C (Mamba-1), the scan output before the gate (Mamba-1) or before the gated norm (Mamba-2,
# + fp32 rstd per group), and the scan's fp32 chunk states (Mamba-1: 2N per channel per 2048 tokens).
#
# transformers' torch path (what runs without the kernels, and what the fake-tensor trace runs):
# Mamba-1 (modeling_mamba.py mamba_selective_scan, sequential loop) materialises exp(dt·A) and dt·B in
# fp32 for every (channel, state) and saves the fp32 state of every step plus its 16-bit copy:
# 14·d·N, next to ~24·d of d-wide tensors. Mamba-2 (modeling_mamba2.py mamba2_chunk_scan) builds the
# chunk's Q x Q decay L, C·Bᵀ (G) and their product M in fp32 per head (12·H·Q); its einsums save
# contiguous fp32 copies of B, C (repeated to every head) and B·decay (20·H·N); ~42·d of d-wide tensors
# (x·dt, its chunked copy, the fp32 gated RMSNorm ...) and the chunk states (8·d·N/Q).
# Both torch-path terms come from saved_tensors_hooks listings of one mixer on real CPU tensors
# (tests/test_ssm.py re-checks them against fake-tensor traces).
SELECTIVE_SCAN_CHUNK = 2048     # mamba_ssm selective_scan_cuda: chunk states every 2048 tokens


def ssm_mixer_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Bytes per token saved inside one SSM mixer, its input (in_proj's, counted with the norms) excluded."""
    ssm = model.ssm
    assert ssm is not None
    d, N, R, G = ssm.d_inner, ssm.d_state, ssm.dt_rank, ssm.n_groups
    H, Q = ssm.num_heads, ssm.chunk_size
    if ssm.variant == "mamba1":
        if s.ssm_kernels:
            return 2 * 2 * d + 2 * (R + 2 * N) + 2 * 2 * N + 2 * d + 4 * 2 * N * d / SELECTIVE_SCAN_CHUNK
        out = 24.0 * d + 2 * (R + 2 * N) + 4 * N + 14.0 * d * N
        if ssm.inner_norms == "weighted":
            # Jamba: RMSNorms on dt, B and C keep their fp32 upcast and normalized value (6 bytes per
            # element); dt's and C's outputs are kept in place of x_proj's output
            # (+ an fp32 rsqrt per token each)
            out += -2 * (R + 2 * N) + 6 * (R + 2 * N) + 2 * R + 2 * N + 3 * 4
        elif ssm.inner_norms == "weightless":
            out += 4 * (R + 2 * N)        # Falcon-Mamba: the fp32 upcast of each (not traced)
        return out
    proj = 2 * d + 2 * G * N + H
    if s.ssm_kernels:
        return 2 * proj + 2 * d + 4 * G
    out = 2 * proj + 2 * ssm.conv_dim + 42.0 * d + 20 * H + 12 * H * Q + 20 * H * N + 8.0 * d * N / Q + 4 * G
    if not ssm.gated_norm:
        # Falcon-H1 with mamba_rms_norm false: y * silu(z) replaces the fp32 gated RMSNorm, which keeps 14 d + 4 G
        # bytes more (saved_tensors_hooks listing of transformers 5.24 FalconH1Mixer on CPU bf16 tensors, with
        # and without the norm: +7,180 bytes per token at d 512, G 2)
        out -= 14.0 * d + 4 * G
    return out


def ssm_layer_activations(model: ModelSpec, s: ActivationSetup) -> LayerActivations:
    """Per-layer average of an SSM or hybrid model: SSM layers keep their norm, in_proj's input and the
    mixer's tensors; attention layers (Jamba) what a Llama-like attention block keeps; the MLP (Jamba: every
    layer, experts on alternate ones) what layer_activations counts for it. TP shards the mixer (vLLM and
    Megatron split d_inner), so the mixer's tensors count as sharded."""
    L = max(model.num_layers, 1)
    f_ssm, f_attn = model.num_ssm_layers / L, model.num_attention_layers / L
    norm1 = _norm_bytes(model, s) * model.hidden_size
    rep = norm1 + f_ssm * base_input_bytes(model, s, "mlp_in", model.hidden_size)   # in_proj's input
    shard = f_ssm * ssm_mixer_bytes(model, s)
    score = 0.0
    if f_attn:
        att_rep, att_shard = attention_bytes(model, s)
        rep += f_attn * (att_rep + base_input_bytes(model, s, "attn_in", model.hidden_size))
        shard += f_attn * att_shard
        score = f_attn * score_bytes(model, s)
    if model.intermediate_size:
        # Jamba: an MLP with its own norm after every mixer; Nemotron-H: MLP-only blocks (their one norm is
        # norm1 above)
        f_mlp = model.layer_mixers.count("mlp") / L if "mlp" in model.layer_mixers else 1.0
        own_norm = 0.0 if "mlp" in model.layer_mixers else _norm_bytes(model, s) * model.hidden_size
        moe_frac, i_eff = _mlp_mix(model)
        rep += f_mlp * (own_norm + moe_frac * moe_routing_bytes(model, s)
                        + base_input_bytes(model, s, "mlp_in", model.hidden_size))
        shard += f_mlp * (mlp_bytes(model, s, i_eff) + base_input_bytes(model, s, "down_in", i_eff))
    return LayerActivations(replicated=rep, sharded=shard, score_bytes=score)


# ---- fixed-state mixers other than Mamba (models/spec.py RecurrentMixer) -------------------------------------
# Bytes per token one mixer saves for backward in transformers' torch path, 16-bit compute, its input (the norm
# output) excluded: saved_tensors_hooks listings of one module on real CPU bf16 tensors (transformers 5.25), at
# two widths (hidden 64 / 96 against a mixer width 96 / 64) and two lengths (32 / 64 tokens), the difference
# per token; every term is a whole number of tensors.
# * short_conv (modeling_lfm3.py Lfm3ShortConv.forward): the in_proj output B|C|x (6 w), B·x (2 w), the conv's
#   padded output (2 w) and C·conv transposed contiguous, out_proj's input (2 w): 12 w.
# * rg_lru (modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock + RecurrentGemmaRglru): linear_y's output
#   and its gelu, linear_x's output, the conv output, the gates' inputs and sigmoids, the decay and gamma
#   multipliers (16-bit w-wide tensors), and in _rnn_scan's token loop two fp32 w-wide values per step (the
#   recurrence gate's upcast and the state); the reset mask (2 bool bytes): 36 w + 2.
# * rwkv (modeling_rwkv.py RwkvSelfAttention with rwkv_linear_attention_cpu's token loop, and RwkvFeedForward):
#   time mix 8 h + 56 w (the token-shift mixes, key/value/receptance, and per step the fp32 key, max, exponentials
#   and running numerator/denominator), channel mix 10 h + 4 f (f = its key width: the shift mixes, relu(key)
#   and its square, sigmoid(receptance)).
# A GPU run may take a fused kernel instead (causal_conv1d for short_conv, RWKV's WKV CUDA kernel); its bytes are
# not modelled separately: the torch path's are used.
def recurrent_mixer_bytes(model: ModelSpec) -> float:
    """Bytes per token saved inside one RecurrentMixer layer's mixer (RWKV: time and channel mix)."""
    r = model.recurrent
    assert r is not None
    w, h = r.width, model.hidden_size
    if r.variant == "short_conv":
        return 12.0 * w
    if r.variant == "rg_lru":
        return 36.0 * w + 2
    return 8.0 * h + 56.0 * w + 10.0 * h + 4.0 * r.ffn_width


def recurrent_layer_activations(model: ModelSpec, s: ActivationSetup) -> LayerActivations:
    """Per-layer average of a model with RecurrentMixer layers: a recurrent layer keeps its norm, its mixer's input
    and the mixer's tensors; an attention layer (RecurrentGemma's local attention, LFM's attention layers) what a
    Llama-like attention block keeps; the MLP what layer_activations counts for it (RWKV's channel mix is counted
    with its mixer, its input and norm here). TP shards the mixer's channels."""
    L = max(model.num_layers, 1)
    f_rec, f_attn = model.num_recurrent_layers / L, model.num_attention_layers / L
    rwkv = model.recurrent.variant == "rwkv"
    h = model.hidden_size
    # the layer's norms (both pre-norms, sandwich post-norms: LFM3) and the mixer's input (RWKV: also the channel
    # mix's)
    rep = norm_bytes(model, s) + f_rec * (2 if rwkv else 1) * base_input_bytes(model, s, "attn_in", h)
    shard = f_rec * recurrent_mixer_bytes(model)
    score = 0.0
    if f_attn:
        att_rep, att_shard = attention_bytes(model, s)
        rep += f_attn * (att_rep + base_input_bytes(model, s, "attn_in", h))
        shard += f_attn * (att_shard + qk_norm_bytes(model))
        score = f_attn * score_bytes(model, s)
    if model.intermediate_size and not rwkv:
        moe_frac, i_eff = _mlp_mix(model)
        rep += moe_frac * moe_routing_bytes(model, s) + base_input_bytes(model, s, "mlp_in", h)
        shard += mlp_bytes(model, s, i_eff) + base_input_bytes(model, s, "down_in", i_eff)
    return LayerActivations(replicated=rep, sharded=shard, score_bytes=score)


def unsloth_layer_bytes(model: ModelSpec, lora_addmm: bool = True, flash_attn: bool = True) -> float | None:
    """Bytes per token of one Llama-style layer during its backward under Unsloth (16-bit activations), or None
    where its fused kernels do not apply (MoE, MLA, LayerNorm, ungated MLP).

    Saved for backward (unslothai/unsloth `unsloth/kernels/fast_lora.py` @f4633d8: LoRA_QKV saves X, LoRA_W
    saves X, LoRA_MLP saves X, e, g; Fast_RMS_Layernorm saves its input and the fp32 inverse RMS per row; flash
    attention saves Q, K, V, O and the fp32 log-sum-exp per head; RoPE is applied in place): the layer input and
    the attention residual (norm inputs, 2 x 2h), the normed inputs of QKV and MLP (2 x 2h), Q (2h), K and V
    (4 kv d), O (2h, shared with o_proj's input), e and g (4i), 2 x 4 bytes of inverse RMS and 4 a of LSE. In
    backward the layer also holds the incoming gradient (2h) and DW = dY @ W_down^T (2i); the SwiGLU backward
    kernel then writes h, df and de over DW, e and g, and dX over X (inplace=True).

    `lora_addmm=False`: Unsloth releases before 4f166026d7 (2025-03-01; e.g. d9ed4bef, 2024-12-12) added the
    adapter path out of place in `matmul_lora` (`out += (X @ A.to(dtype)) @ (s * B.to(dtype))`,
    unsloth/kernels/utils.py): while DW = matmul_lora(dY, W_down^T, ...) is formed, the tokens x i product of
    the LoRA path exists beside DW, e and g, so the MLP backward's peak holds 2i more bytes per token. The
    current code forms X @ A (rank-sized) and calls `out.addmm_(XA, B, alpha=s)`.

    `flash_attn=False`: without the flash-attn package (HAS_FLASH_ATTENTION false; Unsloth's pyproject at
    d9ed4bef depends on xformers, not flash-attn) `LlamaAttention_fast_forward` calls xformers with K and V
    expanded to all heads and, when gradients are needed, copied (`K.reshape(bsz, kv_seq_len, n_heads,
    head_dim)`; unsloth/models/llama.py at d9ed4bef and f4633d8): xformers saves those copies, 4 a d bytes per
    token instead of 4 kv d."""
    if model.is_moe or model.is_mla or not model.gated_mlp or model.norm != "rms":
        return None
    h, i = model.hidden_size, model.intermediate_size
    kvd = (model.num_kv_heads if flash_attn else model.num_heads) * model.head_dim
    saved = 12 * h + 4 * kvd + 4 * i + 4 * model.num_heads + 8
    lora_temp = 0 if lora_addmm else 2 * i
    return float(saved + 2 * h + 2 * i + lora_temp)

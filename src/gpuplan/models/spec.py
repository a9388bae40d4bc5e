"""ModelSpec: the architecture facts gpuplan needs, read from a HF `config.json`.

This module is the only code that reads HF config keys. Each family's defaults are the defaults of
its transformers config class (a key missing from a config.json takes that value when
transformers loads it), so counts agree with `AutoModelForCausalLM.from_config` on the meta device.

Parameters are described as a list of `Block`s (a named group of identical tensors, repeated
`count` times). Totals, active-per-token counts, LoRA adapter sizes and quantized weight bytes all
derive from that one list.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import InputError, UnsupportedError, close_matches
from . import traits as _t
from .traits import Dropout, Traits


@dataclass(frozen=True)
class Block:
    """`count` copies of a parameter group of `numel` elements each.

    kind: embedding | lm_head | attn | mlp | expert | shared_expert | router | ssm | norm | bias | other
    (ssm: a state-space mixer's tensors, models/ssm.py)
    linear: (in_features, out_features) for a matrix multiplied by activations (None otherwise);
    `active_fraction`: share of this block a token's forward pass touches (top-k/E for routed experts).
    """
    name: str
    kind: str
    numel: int
    count: int = 1
    linear: tuple[int, int] | None = None
    active_fraction: float = 1.0
    layer_scope: str = "layer"      # layer (inside decoder layers) | model (outside) | vision
    # which tokens a linear runs over: decoder (every decoder-only block; the target of an encoder-decoder),
    # encoder (the input of an encoder-decoder), cross_kv (cross-attention k/v: over the input, once)
    stream: str = "decoder"

    @property
    def total(self) -> int:
        return self.numel * self.count


SSM_VARIANTS = ("mamba1", "mamba2")
SSM_INNER_NORMS = ("none", "weighted", "weightless")


@dataclass(frozen=True, kw_only=True)
class SSMShape:
    """Sizes of a state-space (Mamba) mixer, read from the config by models/ssm.py.

    mamba1: x_proj makes dt (dt_rank wide), B and C (d_state each) for every channel; A is d_inner x d_state.
    mamba2: in_proj makes z, x, B and C for `n_groups` groups and dt per head; A, D and dt per head.
    The recurrent state of one sequence is d_inner x d_state per layer in both (Mamba-2: heads x head_dim
    x d_state); the convolution keeps the last d_conv - 1 inputs of its conv_dim channels.
    """
    variant: str
    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int = 0               # mamba1
    n_groups: int = 1              # mamba2 B/C groups
    num_heads: int = 0             # mamba2
    head_dim: int = 0              # mamba2
    chunk_size: int = 256          # mamba2 SSD chunk length
    inner_norms: str = "none"      # RMSNorms on dt, B, C: Jamba (weighted), Falcon-Mamba (weightless)
    residual_fp32: bool = True     # residual_in_fp32: the residual stream is kept in fp32 between layers
    # Mamba-2: a gated RMSNorm over the scan output before out_proj; Falcon-H1 without mamba_rms_norm gates
    # with y * silu(z) instead (models/generic.py reads which from the mixer)
    gated_norm: bool = True
    # Mamba-1 torch path: the scan runs over d_inner in this many sequential slices, each slice's fp32
    # (channel, state) tensors freed before the next (Zamba's multi-head mixer: one selective scan per mamba head)
    scan_slices: int = 1

    def __post_init__(self) -> None:
        if self.variant not in SSM_VARIANTS:
            raise ValueError(f"ssm variant {self.variant!r} is not one of {SSM_VARIANTS}")
        if self.inner_norms not in SSM_INNER_NORMS:
            raise ValueError(f"ssm inner_norms {self.inner_norms!r} is not one of {SSM_INNER_NORMS}")

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise convolution: x (Mamba-1); x, B and C (Mamba-2)."""
        return self.d_inner + (2 * self.n_groups * self.d_state if self.variant == "mamba2" else 0)

    @property
    def state_elements(self) -> int:
        """Recurrent state elements of one sequence in one layer."""
        return self.d_inner * self.d_state

    def conv_elements(self, columns: int | None = None) -> int:
        """Convolution-window elements of one sequence in one layer (vLLM keeps d_conv - 1 columns,
        transformers' cache d_conv)."""
        return self.conv_dim * (self.d_conv - 1 if columns is None else columns)

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "d_inner": self.d_inner, "d_state": self.d_state, "d_conv": self.d_conv,
                "dt_rank": self.dt_rank, "n_groups": self.n_groups, "num_heads": self.num_heads,
                "head_dim": self.head_dim, "chunk_size": self.chunk_size, "conv_dim": self.conv_dim,
                "inner_norms": self.inner_norms, "residual_fp32": self.residual_fp32, "gated_norm": self.gated_norm,
                "scan_slices": self.scan_slices}


RECURRENT_VARIANTS = ("short_conv", "rg_lru", "rwkv")


@dataclass(frozen=True, kw_only=True)
class RecurrentMixer:
    """A token mixer that keeps a fixed-size state per sequence instead of a KV cache, other than Mamba
    (models/generic.py `_recurrent_mixers` finds it in the module tree; transformers 5.25):

    short_conv — LFM2/LFM3's gated short convolution (modeling_lfm3.py Lfm3ShortConv): in_proj makes B, C, x
      (3 x width), a depthwise causal conv of `conv_kernel` taps runs over B·x, C gates it, out_proj. State: the
      conv window, width x conv_kernel in the model dtype (cache_utils.py update_conv_state).
    rg_lru — Griffin's recurrent block (modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock): gelu(linear_y)
      gates linear_x -> depthwise conv (conv_kernel taps) -> RG-LRU (per-head block-diagonal input and recurrence
      gates, a diagonal linear recurrence); linear_out. State: width fp32 recurrent values plus conv_kernel - 1
      conv columns in the model dtype (_setup_cache).
    rwkv — RWKV-4's time mix (modeling_rwkv.py RwkvSelfAttention: token shift, key/value/receptance, the WKV
      recurrence) with its channel mix (RwkvFeedForward: token shift, relu(key)², sigmoid(receptance) gate) in
      every layer. State: five hidden-wide vectors per layer, two in the model dtype (the shifted tokens) and
      three fp32 (numerator, denominator, max) (RwkvModel.forward).
    `width`: the channels of the recurrence / convolution (LFM: hidden; RG-LRU: lru_width; RWKV:
    attention_hidden_size); `ffn_width`: RWKV's channel-mix width."""
    variant: str
    width: int
    conv_kernel: int = 0
    ffn_width: int = 0

    def __post_init__(self) -> None:
        if self.variant not in RECURRENT_VARIANTS:
            raise ValueError(f"recurrent variant {self.variant!r} is not one of {RECURRENT_VARIANTS}")

    def state_bytes(self, hidden: int, dtype_bytes: float = 2.0) -> float:
        """State of one sequence in one layer as transformers' cache keeps it."""
        w, k = self.width, self.conv_kernel
        if self.variant == "short_conv":
            return w * k * dtype_bytes
        if self.variant == "rg_lru":
            return 4.0 * w + w * (k - 1) * dtype_bytes
        return hidden * (2 * dtype_bytes + 3 * 4.0)

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "width": self.width, "conv_kernel": self.conv_kernel,
                "ffn_width": self.ffn_width}


# peft 0.21.2 (utils/transformers_weight_conversion.py `_convert_peft_config_moe`, the peft of transformers 5.25)
# re-targets a v4-style LoRA config at transformers 5's fused experts for these model types (estimate/lora_targets.py; its
# _MODEL_TO_CONVERSION_PATTERN entries whose pattern, mixtral or qwen2_moe, has a _MOE_TARGET_MODULE_MAPPING): all-linear
# and the v4 projection names (gate_proj/up_proj/down_proj, Mixtral's w1/w3/w2) become `target_parameters` on
# experts.gate_up_proj and experts.down_proj (ParamWrapper), with gate_up_proj at rank 2r and alpha 2a
# (rank_pattern/alpha_pattern: the two fused branches keep their own rank), and the v4 router name `gate` becomes
# the router's weight (`gate.weight`, a ParamWrapper of one "expert"). Every other MoE type keeps its routed
# experts and router out of reach of `target_modules` (qwen2_moe itself, gpt_oss, llama4, ...: traced, peft 0.21.2).
# model types TensorRT-LLM's PyTorch backend builds with tensorrt_llm/_torch/models/modeling_llama.py's decoder layer
# (LlamaForCausalLM; estimate/quant_kernels.py trtllm_nvfp4_quantize_passes reads its fusion)
TRTLLM_LLAMA_DECODER_TYPES = frozenset(("llama",))

PEFT_REMAPPED_MOE_TYPES = frozenset((
    "afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe",
    "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe",
    "longcat_flash", "mellum", "minimax", "minimax_m2", "mixtral", "olmoe", "qwen3_moe", "qwen3_next",
    "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "sarvam_mla", "solar_open"))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    model_type: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int                     # attention head dim for Q·K (MLA: nope + rope)
    v_head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    max_position: int
    gated_mlp: bool
    norm: str                         # rms | layernorm
    layer_windows: tuple[int | None, ...]    # per layer: sliding window length, None = full attention
    num_experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_moe_layers: int = 0
    shared_expert_intermediate: int = 0
    kv_lora_rank: int = 0             # MLA latent; 0 = not MLA
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0              # MLA query compression rank; 0 = uncompressed queries
    # encoder-decoder (T5): layers of the encoder stack; num_layers is then the decoder's. 0 = decoder-only
    encoder_layers: int = 0
    # parameters transformers keeps in fp32 when it loads the model in 16 bits: modules the model's code builds
    # in fp32, and those its `_keep_in_fp32_modules_strict` names (modeling_utils _get_dtype_plan); 0 = none
    params_fp32: int = 0
    # the weight format the published checkpoint stores (models/checkpoint.py stored_weight_format: gpt-oss's
    # MXFP4 experts, DeepSeek-V3's block FP8); None = 16-bit. Serving engines load it as stored.
    stored_weights: str | None = None
    traits: Traits = field(default_factory=Traits)
    # state-space mixers (models/ssm.py): their sizes, and per layer which mixer runs ("attention", "mamba",
    # "parallel" for both side by side (Falcon-H1, Zamba's hybrid layers; models/generic.py), "mlp" for
    # Nemotron-H's MLP-only blocks, or "cross" for Llama-3.2-Vision's cross-attention layers: keys and values
    # of the image, no per-token KV); empty = every layer is attention
    ssm: SSMShape | None = None
    # a fixed-state token mixer other than Mamba (RecurrentMixer); its layers are "recurrent" in layer_mixers
    recurrent: RecurrentMixer | None = None
    layer_mixers: tuple[str, ...] = ()
    blocks: tuple[Block, ...] = ()
    hf_id: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # generic (meta-device) specs: structural field -> how it was inferred (models/generic.py); empty for
    # the hand-written families
    inferred: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # what the checkpoint's safetensors headers say (models/checkpoint.CheckpointInfo), when read from a folder
    checkpoint: Any = field(default=None, repr=False, compare=False)
    # vision-language models: the vision tower's shape and image-token rule (models/vision.VisionTower)
    vision_tower: Any = field(default=None, repr=False, compare=False)

    @property
    def stored_weight_bytes(self) -> int | None:
        """Bytes of all tensors as stored in the checkpoint (None when only the config is known)."""
        return self.checkpoint.tensor_bytes if self.checkpoint is not None else None

    # ---- derived counts -------------------------------------------------------------------
    @property
    def params_total(self) -> int:
        return sum(b.total for b in self.blocks)

    @property
    def params_active(self) -> int:
        return round(sum(b.total * b.active_fraction for b in self.blocks))

    @property
    def params_embedding(self) -> int:
        return sum(b.total for b in self.blocks if b.kind == "embedding")

    @property
    def params_lm_head(self) -> int:
        return sum(b.total for b in self.blocks if b.kind == "lm_head")

    @property
    def params_vision(self) -> int:
        return sum(b.total for b in self.blocks if b.layer_scope == "vision")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def peft_remaps_experts(self) -> bool:
        """Whether peft re-targets a LoRA config at this MoE's fused routed experts (PEFT_REMAPPED_MOE_TYPES)."""
        return self.is_moe and self.model_type in PEFT_REMAPPED_MOE_TYPES

    @property
    def trtllm_llama_decoder(self) -> bool:
        """Whether TensorRT-LLM's PyTorch backend runs this model through its Llama decoder layer
        (TRTLLM_LLAMA_DECODER_TYPES), whose TP all-reduce fuses residual + RMSNorm + NVFP4 quantization."""
        return self.model_type in TRTLLM_LLAMA_DECODER_TYPES

    @property
    def is_encoder_decoder(self) -> bool:
        return self.encoder_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def position_encoding(self) -> str:
        """rope | learned | alibi: how positions are encoded (what running past max_position needs)."""
        return self.traits.position

    @property
    def rope_scaling(self) -> str | None:
        """The config's own RoPE scaling, e.g. "llama3 x8 of 8,192 positions"; None without one."""
        c = self.config.get("text_config") or self.config
        rs = c.get("rope_scaling")
        if not isinstance(rs, Mapping):
            return None
        text = str(rs.get("rope_type") or rs.get("type") or "scaling")
        if isinstance(rs.get("factor"), (int, float)):
            text += f" x{rs['factor']:g}"
        if isinstance(rs.get("original_max_position_embeddings"), int):
            text += f" of {rs['original_max_position_embeddings']:,} positions"
        return text

    @property
    def num_attention_layers(self) -> int:
        """Layers that attend (and keep a KV cache); SSM layers keep a fixed-size state instead."""
        if not self.layer_mixers:
            return self.num_layers
        return self.layer_mixers.count("attention") + self.layer_mixers.count("parallel")

    @property
    def num_ssm_layers(self) -> int:
        """Layers with a Mamba mixer ("parallel": Falcon-H1 / Zamba layers that run attention and a Mamba
        mixer side by side count as both)."""
        return self.layer_mixers.count("mamba") + self.layer_mixers.count("parallel")

    @property
    def attention_windows(self) -> tuple[int | None, ...]:
        """Sliding window per attention layer (SSM layers left out)."""
        if not self.layer_mixers:
            return self.layer_windows
        return tuple(w for w, m in zip(self.layer_windows, self.layer_mixers) if m in ("attention", "parallel"))

    @property
    def num_recurrent_layers(self) -> int:
        """Layers whose token mixer is a RecurrentMixer (fixed state, no KV cache)."""
        return self.layer_mixers.count("recurrent")

    def ssm_state_bytes_per_sequence(self, state_bytes: float = 2.0, conv_bytes: float = 2.0,
                                     conv_columns: int | None = None) -> float:
        """Recurrent + convolution state of one sequence over all SSM layers (0 without SSM layers); a
        RecurrentMixer's layers add their state as transformers keeps it."""
        if self.recurrent is not None:
            return self.num_recurrent_layers * self.recurrent.state_bytes(self.hidden_size, conv_bytes)
        if self.ssm is None:
            return 0.0
        s = self.ssm
        return self.num_ssm_layers * (s.state_elements * state_bytes + s.conv_elements(conv_columns) * conv_bytes)

    @property
    def qk_nope_head_dim(self) -> int:
        """MLA: the part of the query/key head dimension without rotary embedding."""
        return self.head_dim - self.qk_rope_head_dim

    @property
    def linear_blocks(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.linear is not None and b.layer_scope == "layer")

    def kv_elements_per_token_layer(self) -> int:
        """Elements stored per token per attention layer (K and V, or the MLA latent)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """Per token of one sequence, all layers sized as full attention (vLLM's pool sizing)."""
        return self.num_attention_layers * self.kv_elements_per_token_layer() * bytes_per_element

    def kv_cache_bytes(self, tokens: int, bytes_per_element: float = 2.0, windowed: bool = True) -> float:
        """Logical KV bytes for one sequence of `tokens`; sliding-window layers keep min(W, T)."""
        per_layer = self.kv_elements_per_token_layer() * bytes_per_element
        if not windowed:
            return per_layer * tokens * self.num_attention_layers
        return per_layer * sum(min(w, tokens) if w else tokens for w in self.attention_windows)

    def attention_context(self, seq_len: int, causal: bool = True) -> float:
        """Average keys each query attends to, summed over layers (window-capped). A span made of causal segments
        of unequal length (estimate/flops.py SegmentedSpan: its `segments`, ((length, count), ...)) averages each
        segment's own triangle over the row's tokens."""
        segments = getattr(seq_len, "segments", None)
        if segments is not None and causal:
            tokens = sum(c * L for L, c in segments)
            return sum(c * L * self.attention_context(L) for L, c in segments) / tokens
        total = 0.0
        for w in self.attention_windows:
            if not causal:
                total += min(w, seq_len) if w else seq_len
            elif w and w < seq_len:
                # first w queries see 1..w keys, the rest see w
                total += (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len
            else:
                total += (seq_len + 1) / 2
        return total

    def flops_per_token_forward(self, seq_len: int = 2048) -> float:
        """Forward FLOPs per token: 2 x active matmul parameters (lm_head included, embedding
        lookup excluded) + causal attention scores and weighted sum (Kaplan et al. 2020 §2.1)."""
        # from the matrix shapes: a tied lm_head has no parameters of its own but still costs its matmul
        matmul = sum(b.linear[0] * b.linear[1] * b.count * b.active_fraction for b in self.blocks
                     if b.linear is not None and b.layer_scope != "vision")
        ctx = self.attention_context(seq_len)
        if self.is_encoder_decoder:
            # per target token with an input as long as the target: encoder self-attention (bidirectional,
            # S keys) and the decoder's cross-attention (S keys) on top of its causal self-attention
            ctx += (self.encoder_layers + self.num_layers) * seq_len
        attn = 2 * self.num_heads * (self.head_dim + self.v_head_dim) * ctx
        return 2 * matmul + attn + self.ssm_scan_flops_per_token()

    def ssm_scan_flops_per_token(self) -> float:
        """Elementwise FLOPs per token of the selective scan outside the matmuls, all SSM layers: per state
        element discretise (exp(dt·A), dt·B·x), update (h = dA·h + dBx) and read out (C·h): ~9 (Gu & Dao
        2023 §3.3.2 count 9·B·L·D·N for the scan); the conv adds 2·d_conv per channel. Small next to the
        projections; its time is memory-bound (estimate/speed.py)."""
        if self.ssm is None:
            return 0.0
        s = self.ssm
        return self.num_ssm_layers * (9.0 * s.state_elements + 2.0 * s.d_conv * s.conv_dim)

    def to_dict(self, seq_len: int = 2048) -> dict[str, Any]:
        return {
            "name": self.name, "hf_id": self.hf_id, "model_type": self.model_type, "family": self.family,
            "params_total": self.params_total, "params_active": self.params_active,
            "params_embedding": self.params_embedding, "params_lm_head": self.params_lm_head,
            "params_vision": self.params_vision,
            **({"params_fp32": self.params_fp32} if self.params_fp32 else {}),
            "num_layers": self.num_layers, "hidden_size": self.hidden_size,
            **({"encoder_layers": self.encoder_layers, "decoder_layers": self.num_layers,
                "cross_kv_bytes_per_input_token": int(self.kv_cache_bytes_per_token(2.0))}
               if self.is_encoder_decoder else {}),
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size, "tie_word_embeddings": self.tie_embeddings,
            "max_position_embeddings": self.max_position,
            "num_experts": self.num_experts, "experts_per_token": self.experts_per_tok,
            "mla": self.is_mla, "sliding_window_layers": sum(1 for w in self.layer_windows if w),
            **({"recurrent": self.recurrent.to_dict(), "attention_layers": self.num_attention_layers,
                "recurrent_layers": self.num_recurrent_layers,
                "state_bytes_per_sequence": int(self.ssm_state_bytes_per_sequence(2.0, 2.0))}
               if self.recurrent is not None else {}),
            **({"ssm": self.ssm.to_dict(), "attention_layers": self.num_attention_layers,
                "ssm_layers": self.num_ssm_layers,
                "ssm_state_bytes_per_sequence": int(self.ssm_state_bytes_per_sequence(2.0, 2.0))}
               if self.ssm is not None else {}),
            "traits": self.traits.to_dict(),
            "kv_cache_bytes_per_token": int(self.kv_cache_bytes_per_token(2.0)),
            "flops_per_token_forward": self.flops_per_token_forward(seq_len),
            "flops_seq_len": seq_len,
            **({"inferred": dict(self.inferred)} if self.inferred else {}),
            **({"vision_tower": self.vision_tower.to_dict()} if self.vision_tower is not None else {}),
            "weights_from": "checkpoint (safetensors headers)" if self.checkpoint is not None else "config",
            **({"checkpoint": self.checkpoint.to_dict()} if self.checkpoint is not None else {}),
        }


# ---- HF config reading -------------------------------------------------------------------

# Defaults of the transformers config classes for keys that change the parameter count.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu"),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    tie_word_embeddings=False, sliding_window=4096),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    tie_word_embeddings=False, num_local_experts=8, num_experts_per_tok=2, sliding_window=None),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768,
                  tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=32768,
                  tie_word_embeddings=False, attention_bias=False, use_sliding_window=False, sliding_window=4096,
                  max_window_layers=28),
    # head_dim: transformers 5.x's Qwen3MoeConfig has none (modeling: hidden_size / heads); every released
    # Qwen3-MoE config.json names it (128)
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=None, max_position_embeddings=32768,
                      tie_word_embeddings=False, attention_bias=False, num_experts=128, num_experts_per_tok=8,
                      moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[],
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=4096,
                 tie_word_embeddings=False, sliding_window=None),
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False),
    # OLMo 3 (transformers Olmo3Config defaults): OLMo 2's layer (post-norms, q/k norms over the full projection
    # width) with sliding-window attention on three layers in four (layer_types; the fourth is full attention)
    "olmo3": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False, sliding_window=4096),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
                   tie_word_embeddings=True, attention_bias=False, sliding_window=4096,
                   hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        tie_word_embeddings=True, attention_bias=False, sliding_window=4096,
                        sliding_window_pattern=6, hidden_activation="gelu_pytorch_tanh", rope_theta=1_000_000.0,
                        final_logit_softcapping=None, attn_logit_softcapping=None),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                 tie_word_embeddings=True),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, max_position_embeddings=2048, tie_word_embeddings=False,
                     use_parallel_residual=True, attention_bias=True, hidden_act="gelu", hidden_dropout=0.0,
                     attention_dropout=0.0),
    "falcon": dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                   num_kv_heads=None, multi_query=True, new_decoder_architecture=False, parallel_attn=True,
                   bias=False, alibi=False, ffn_hidden_size=None, max_position_embeddings=2048,
                   tie_word_embeddings=True, num_ln_in_parallel_attn=None, activation="gelu",
                   hidden_dropout=0.0, attention_dropout=0.0),
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, moe_intermediate_size=1407,
                        num_hidden_layers=30, num_attention_heads=32, num_key_value_heads=32, n_shared_experts=None,
                        n_routed_experts=None, num_experts_per_tok=None, first_k_dense_replace=0,
                        moe_layer_freq=1, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
                        qk_nope_head_dim=128, v_head_dim=128, max_position_embeddings=2048,
                        tie_word_embeddings=False, attention_bias=False, topk_method="greedy"),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                        n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3,
                        q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                        v_head_dim=128, max_position_embeddings=4096, tie_word_embeddings=False,
                        attention_bias=False),
    "gpt_oss": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=128,
                    num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072,
                    tie_word_embeddings=False, attention_bias=True),
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
                  tie_word_embeddings=True, attention_bias=False, hidden_act="gelu_pytorch_tanh"),
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
                    tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu",
                    logits_scaling=1.0),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=32768,
                      tie_word_embeddings=False, qkv_bias=True, num_experts=60, num_experts_per_tok=4,
                      moe_intermediate_size=1408, shared_expert_intermediate_size=5632, decoder_sparse_step=1,
                      mlp_only_layers=[], use_sliding_window=False, sliding_window=4096, max_window_layers=28),
    "gptj": dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, n_inner=None,
                 activation_function="gelu_new", tie_word_embeddings=False),
    "bloom": dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True,
                  hidden_dropout=0.0, attention_dropout=0.0),
    "phi": dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                num_key_value_heads=None, hidden_act="gelu_new", max_position_embeddings=2048,
                tie_word_embeddings=False, qk_layernorm=False, partial_rotary_factor=0.5),
    "stablelm": dict(vocab_size=50304, intermediate_size=6912, hidden_size=2560, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=4096,
                     tie_word_embeddings=False, use_qkv_bias=False, qk_layernorm=False, use_parallel_residual=False,
                     partial_rotary_factor=0.25),
    "cohere": dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, logit_scale=0.0625,
                   num_hidden_layers=40, num_attention_heads=64, num_key_value_heads=None, hidden_act="silu",
                   max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False, use_qk_norm=False),
    "nemotron": dict(vocab_size=256000, hidden_size=6144, intermediate_size=24576, num_hidden_layers=32,
                     num_attention_heads=48, head_dim=None, num_key_value_heads=None, hidden_act="relu2",
                     max_position_embeddings=4096, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                     partial_rotary_factor=0.5),
    # state-space families (models/ssm.py): MambaConfig / FalconMambaConfig / Mamba2Config / JambaConfig defaults
    "mamba": dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32, expand=2, conv_kernel=4,
                  use_bias=False, use_conv_bias=True, hidden_act="silu", time_step_rank="auto",
                  tie_word_embeddings=True, residual_in_fp32=True, layer_norm_epsilon=1e-5),
    "falcon_mamba": dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32, expand=2,
                         conv_kernel=4, use_bias=False, use_conv_bias=True, hidden_act="silu", time_step_rank="auto",
                         tie_word_embeddings=True, residual_in_fp32=True, layer_norm_epsilon=1e-5),
    "mamba2": dict(num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128,
                   num_hidden_layers=64, expand=2, conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True,
                   hidden_act="silu", chunk_size=256, tie_word_embeddings=False, residual_in_fp32=True,
                   layer_norm_epsilon=1e-5),
    "jamba": dict(vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                  max_position_embeddings=262144, num_experts_per_tok=2, num_experts=16, expert_layer_period=2,
                  expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16,
                  mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto", mamba_conv_bias=True,
                  mamba_proj_bias=False, rms_norm_eps=1e-6),
    "nemotron_h": dict(vocab_size=131072, hidden_size=4096, tie_word_embeddings=False, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=4096, intermediate_size=21504,
                       mlp_hidden_act="relu2", mlp_bias=False, ssm_state_size=128, mamba_num_heads=128,
                       mamba_head_dim=64, n_groups=8, conv_kernel=4, chunk_size=128, use_conv_bias=True,
                       use_bias=False, layer_norm_epsilon=1e-5),
    # encoder-decoders (models/encdec.py): transformers T5Config / MT5Config
    "t5": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
               num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
               dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="relu", tie_word_embeddings=True,
               is_encoder_decoder=True),
    "mt5": dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=None,
                num_heads=6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                is_encoder_decoder=True),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                num_attention_heads=12, num_channels=3, image_size=224, patch_size=16,
                                vision_use_head=True),
}
# kimi_k2: Moonshot's Kimi-K2 config.json names model_type "kimi_k2" but architectures ["DeepseekV3ForCausalLM"] and
# auto_map AutoConfig "configuration_deepseek.DeepseekV3Config" (the repo's remote code is DeepSeek-V3's), so it is
# read as deepseek_v3 (configs/moonshotai__Kimi-K2-Instruct.json, from ai-dynamo/aiconfigurator @095f58a51c4c)
_ALIAS_TYPES = {"gemma3": "gemma3_text", "RefinedWeb": "falcon", "RefinedWebModel": "falcon", "kimi_k2": "deepseek_v3"}
SUPPORTED_MODEL_TYPES = tuple(k for k in _DEFAULTS if k != "siglip_vision_model") + ("gemma3",)


def _cfg(config: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    merged = dict(_DEFAULTS[model_type])
    merged.update({k: v for k, v in config.items()})
    return merged


def _positive(c: dict, key: str, where: str) -> int:
    v = c.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise InputError(f"model config {where}", f"field '{key}' must be a positive integer, got {v!r}.",
                         f"fix '{key}' in the config.json.")
    return v


def _attention_blocks(h, a, kv, d, *, qkv_bias, o_bias, n) -> list[Block]:
    out = [Block("q_proj", "attn", h * a * d, n, (h, a * d)),
           Block("k_proj", "attn", h * kv * d, n, (h, kv * d)),
           Block("v_proj", "attn", h * kv * d, n, (h, kv * d)),
           Block("o_proj", "attn", a * d * h, n, (a * d, h))]
    if qkv_bias:
        out.append(Block("qkv_bias", "bias", (a + 2 * kv) * d, n))
    if o_bias:
        out.append(Block("o_bias", "bias", h, n))
    return out


def _gated_mlp(h, i, n, kind="mlp", active=1.0, name="mlp", bias=False) -> list[Block]:
    out = [Block(f"{name}.gate_proj", kind, h * i, n, (h, i), active),
           Block(f"{name}.up_proj", kind, h * i, n, (h, i), active),
           Block(f"{name}.down_proj", kind, i * h, n, (i, h), active)]
    if bias:
        out.append(Block(f"{name}.bias", "bias", 2 * i + h, n, None, active))
    return out


def _head_blocks(h, v, tie, extra_embed: int = 0) -> list[Block]:
    out = [Block("embed_tokens", "embedding", v * h, 1, None, 1.0, "model")]
    if extra_embed:
        out.append(Block("embed_positions", "embedding", extra_embed, 1, None, 1.0, "model"))
    if not tie:
        out.append(Block("lm_head", "lm_head", v * h, 1, (h, v), 1.0, "model"))
    return out


def _tied_head_flops_block(h, v) -> Block:
    # A tied lm_head adds no parameters but still costs a matmul; numel 0 keeps counts exact.
    return Block("lm_head(tied)", "lm_head", 0, 1, (h, v), 1.0, "model")


def _windows(c: dict, model_type: str, n: int) -> tuple[tuple[int | None, ...], str]:
    """Per-layer sliding-window lengths (None = full attention) and the pattern's name (traits.WINDOW_PATTERNS)."""
    lt = c.get("layer_types")
    w = c.get("sliding_window")
    if isinstance(lt, list) and len(lt) == n:
        return tuple(w if t == "sliding_attention" else None for t in lt), "layer_types"
    if model_type in ("mistral", "mixtral", "phi3") and w:
        return (w,) * n, "all"
    if model_type in ("gemma2", "gpt_oss"):
        return tuple(w if i % 2 == 0 else None for i in range(n)), "alternate"
    if model_type == "olmo3" and w:
        # Olmo3Config without layer_types: "sliding_attention" unless (i + 1) % 4 == 0 (configuration_olmo3.py)
        return tuple(None if (i + 1) % 4 == 0 else w for i in range(n)), "every_nth"
    if model_type == "gemma3_text":
        pattern = c.get("sliding_window_pattern") or 6
        return tuple(None if (i + 1) % pattern == 0 else w for i in range(n)), "every_nth"
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and c.get("use_sliding_window") and w:
        mwl = c.get("max_window_layers", n)
        return tuple(w if i >= mwl else None for i in range(n)), "top_layers"
    return (None,) * n, "none"


def _window_traits(windows: tuple[int | None, ...], pattern: str) -> dict[str, Any]:
    sizes = {w for w in windows if w}
    if not sizes:
        return dict(sliding_window=None, window_pattern="none")
    return dict(sliding_window=max(sizes), window_pattern=pattern)


def _norm_eps(c: dict) -> float | None:
    eps = c.get("rms_norm_eps", c.get("layer_norm_eps", c.get("layer_norm_epsilon")))
    return float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) else None


def _decoder_traits(c: dict, mt: str, where: str, *, a: int, kv: int, mla: bool,
                    windows: tuple[int | None, ...], pattern: str, dense_layers: tuple[int, ...]) -> Traits:
    gemma = mt in ("gemma2", "gemma3_text")
    # Gemma 1's MLP runs config.hidden_act (transformers 5.x GemmaMLP), Gemma 2/3 hidden_activation
    act = _t.activation(c.get("hidden_activation") if gemma else (c.get("hidden_act") or "silu"), where)
    if mt == "gemma" and act == "gelu":
        act = "gelu_pytorch_tanh"   # GemmaConfig rewrites the released configs' legacy "gelu" (it meant tanh)
    theta, scaling = _t.rope(c)
    # Phi-3 adds residual dropout (resid_pdrop); transformers' Phi3Model has no embedding dropout
    residual = _t.probability(c, "resid_pdrop") if mt == "phi3" else 0.0
    qk = {"qwen3": "per_head", "qwen3_moe": "per_head", "gemma3_text": "per_head", "olmo2": "full",
          "olmo3": "full"}.get(mt, "none")
    return Traits(
        norm_placement="sandwich" if gemma else "post" if mt in ("olmo2", "olmo3") else "pre",
        norm_dtype="fp32" if gemma or mt == "gemma" else "fp32_upcast", qk_norm=qk,
        fused_qkv=mt == "phi3", fused_qkv_output_kept=mt == "phi3", fused_gate_up=mt == "phi3",
        activation=act, mlp=_t.mlp_kind(True, act),
        final_logit_softcap=c.get("final_logit_softcapping") or None,
        attn_logit_softcap=c.get("attn_logit_softcapping") or None,
        # gpt-oss clamps the gate to <= swiglu_limit and the up projection to +-swiglu_limit (transformers
        # GptOssExperts: `gate.clamp(min=None, max=self.limit)`, `up.clamp(min=-self.limit, max=self.limit)`)
        glu_clamp=float(c["swiglu_limit"]) if mt == "gpt_oss" and c.get("swiglu_limit") else None,
        dropout=Dropout(attention=_t.probability(c, "attention_dropout"), residual=residual),
        attention=_t.attention_kind(a, kv, mla), position="rope",
        attention_bias=bool(c.get("attention_bias", False)) or mt == "qwen2" or (mt == "qwen2_moe" and bool(c.get("qkv_bias"))),
        mlp_bias=bool(c.get("mlp_bias", False)) or mt == "gpt_oss",
        rope_theta=theta, rope_scaling=scaling, rope_scaling_factor=_t.rope_factor(c) if scaling else None,
        **_window_traits(windows, pattern),
        moe_dense_layers=dense_layers, router_fp32=mla, norm_eps=_norm_eps(c),
        moe_shared_experts=1 if mt == "qwen2_moe" and c.get("shared_expert_intermediate_size") else
        (int(c.get("n_shared_experts") or 0) if mla else 0),
        shared_expert_gate=mt == "qwen2_moe" and bool(c.get("shared_expert_intermediate_size")),
        partial_rotary=_t.partial_rotary(c, 1.0),
        logit_scale=1.0 / float(c["logits_scaling"]) if mt == "granite" and c.get("logits_scaling") else None)


def _mla_attention(c: dict, h: int, a: int, n: int) -> tuple[list[Block], dict[str, Any]]:
    """DeepSeek multi-latent attention: optional query compression (q_lora_rank), the shared K/V latent."""
    rope, nope, vd = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
    qd, kvr, qr = rope + nope, c["kv_lora_rank"], c.get("q_lora_rank")
    if qr:
        blocks = [Block("q_a_proj", "attn", h * qr, n, (h, qr)), Block("q_a_layernorm", "norm", qr, n),
                  Block("q_b_proj", "attn", qr * a * qd, n, (qr, a * qd))]
    else:
        blocks = [Block("q_proj", "attn", h * a * qd, n, (h, a * qd))]
    blocks += [Block("kv_a_proj_with_mqa", "attn", h * (kvr + rope), n, (h, kvr + rope)),
               Block("kv_a_layernorm", "norm", kvr, n),
               Block("kv_b_proj", "attn", kvr * a * (nope + vd), n, (kvr, a * (nope + vd))),
               Block("o_proj", "attn", a * vd * h, n, (a * vd, h))]
    info = dict(head_dim=qd, v_head_dim=vd, num_kv_heads=a, kv_lora_rank=kvr, qk_rope_head_dim=rope,
                q_lora_rank=qr or 0)
    return blocks, info


def _decoder_attention(c: dict, mt: str, h: int, a: int, kv: int, d: int, n: int) -> tuple[list[Block], dict]:
    """Attention blocks of a Llama-like layer (+ sinks, q/k norms) and the head shape they imply."""
    if mt in ("deepseek_v2", "deepseek_v3"):
        blocks, info = _mla_attention(c, h, a, n)
    else:
        qkv_only = mt == "qwen2" or (mt == "qwen2_moe" and bool(c.get("qkv_bias", True)))
        bias = bool(c.get("attention_bias", False)) or qkv_only
        blocks = _attention_blocks(h, a, kv, d, qkv_bias=bias, o_bias=bias and not qkv_only, n=n)
        info = dict(head_dim=d, v_head_dim=d, num_kv_heads=kv)
    if mt == "gpt_oss":
        blocks.append(Block("sinks", "other", a, n))
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        blocks += [Block("q_norm", "norm", d, n), Block("k_norm", "norm", d, n)]
    if mt in ("olmo2", "olmo3"):
        blocks += [Block("q_norm", "norm", a * d, n), Block("k_norm", "norm", kv * d, n)]
    return blocks, info


def _sparse_moe(c: dict, h: int, i: int, n: int, experts: int, mi: int,
                dense_layers: tuple[int, ...], correction_bias: bool = False) -> tuple[list[Block], dict[str, Any]]:
    """Qwen3-MoE / DeepSeek: dense MLPs on `dense_layers`, routed (and shared) experts elsewhere."""
    k = c.get("num_experts_per_tok")
    if not k:
        raise InputError("model config", f"has {experts} routed experts but no num_experts_per_tok, so the "
                         "active parameters per token are unknown.", "set num_experts_per_tok in the config.json.")
    moe_layers = n - len(dense_layers)
    blocks = _gated_mlp(h, i, len(dense_layers)) if dense_layers else []
    blocks.append(Block("router", "router", h * experts, moe_layers, (h, experts)))
    if correction_bias:
        blocks.append(Block("e_score_correction_bias", "bias", experts, moe_layers))
    blocks += _gated_mlp(h, mi, moe_layers * experts, "expert", k / experts, "experts")
    shared = (c.get("n_shared_experts") or 0) * mi
    if shared:
        blocks += _gated_mlp(h, shared, moe_layers, "shared_expert", 1.0, "shared_experts")
    return blocks, dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=mi, num_moe_layers=moe_layers,
                        shared_expert_intermediate=shared)


def _qwen2_moe(c: dict, h: int, i: int, n: int, experts: int) -> tuple[list[Block], dict[str, Any], tuple[int, ...]]:
    """Qwen1.5-MoE / Qwen2-MoE (transformers models/qwen2_moe): routed experts plus one shared expert
    of shared_expert_intermediate_size whose output a sigmoid gate (h x 1) scales; dense layers per
    decoder_sparse_step / mlp_only_layers as Qwen3-MoE."""
    step, only = c.get("decoder_sparse_step") or 1, set(c.get("mlp_only_layers") or [])
    dense = tuple(li for li in range(n) if not (li not in only and experts > 0 and (li + 1) % step == 0))
    k, mi = c["num_experts_per_tok"], c["moe_intermediate_size"]
    moe_layers = n - len(dense)
    blocks = _gated_mlp(h, i, len(dense)) if dense else []
    blocks.append(Block("router", "router", h * experts, moe_layers, (h, experts)))
    blocks += _gated_mlp(h, mi, moe_layers * experts, "expert", k / experts, "experts")
    shared = c.get("shared_expert_intermediate_size") or 0
    if shared:
        blocks += _gated_mlp(h, shared, moe_layers, "shared_expert", 1.0, "shared_expert")
        blocks.append(Block("shared_expert_gate", "router", h, moe_layers, (h, 1)))
    return blocks, dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=mi, num_moe_layers=moe_layers,
                        shared_expert_intermediate=shared), dense


def _decoder_mlp(c: dict, mt: str, h: int, i: int, n: int) -> tuple[list[Block], dict[str, Any], tuple[int, ...]]:
    """MLP or MoE blocks of a Llama-like model, its MoE fields, and the indices of dense MLP layers."""
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0
    if mt in ("llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "olmo3", "gemma", "gemma2", "gemma3_text",
              "granite"):
        return _gated_mlp(h, i, n, bias=bool(c.get("mlp_bias", False))), {}, ()
    if mt == "mixtral":
        k = c["num_experts_per_tok"]
        blocks = [Block("router", "router", h * experts, n, (h, experts))]
        blocks += _gated_mlp(h, i, n * experts, "expert", k / experts, "experts")
        return blocks, dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=i, num_moe_layers=n), ()
    if mt == "gpt_oss":
        k = c["num_experts_per_tok"]
        blocks = [Block("router", "router", h * experts, n, (h, experts)), Block("router_bias", "bias", experts, n),
                  Block("experts.gate_up_proj", "expert", h * 2 * i, n * experts, (h, 2 * i), k / experts),
                  Block("experts.down_proj", "expert", i * h, n * experts, (i, h), k / experts),
                  Block("experts.bias", "bias", 2 * i + h, n * experts, None, k / experts)]
        return blocks, dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=i, num_moe_layers=n), ()
    if mt == "qwen2_moe":
        return _qwen2_moe(c, h, i, n, experts)
    if mt == "qwen3_moe":
        step, only = c.get("decoder_sparse_step") or 1, set(c.get("mlp_only_layers") or [])
        dense = tuple(li for li in range(n) if not (li not in only and experts > 0 and (li + 1) % step == 0))
        return (*_sparse_moe(c, h, i, n, experts, c["moe_intermediate_size"], dense), dense)
    if mt in ("deepseek_v2", "deepseek_v3") and not experts:
        return _gated_mlp(h, i, n), {}, ()       # no routed experts configured: a dense model
    if mt in ("deepseek_v2", "deepseek_v3"):
        first_dense, freq = c.get("first_k_dense_replace") or 0, c.get("moe_layer_freq") or 1
        dense = tuple(li for li in range(n) if not (experts and li >= first_dense and li % freq == 0))
        bias = mt == "deepseek_v3" or c.get("topk_method") == "noaux_tc"
        return (*_sparse_moe(c, h, i, n, experts, c["moe_intermediate_size"], dense, bias), dense)
    raise UnsupportedError(f"model_type '{mt}'", "has no MLP layout.", "")  # pragma: no cover - guarded by caller


def _decoder(c: dict, mt: str, where: str) -> dict[str, Any]:
    """Llama-like decoders: llama, mistral, mixtral, qwen2/3(+moe), phi3, olmo2/3, gemma2/3, gpt_oss, deepseek."""
    h = _positive(c, "hidden_size", where)
    n = _positive(c, "num_hidden_layers", where)
    a = _positive(c, "num_attention_heads", where)
    v = _positive(c, "vocab_size", where)
    i = c.get("intermediate_size") or 0
    tie = bool(c.get("tie_word_embeddings", False))
    blocks, info = _decoder_attention(c, mt, h, a, c.get("num_key_value_heads") or a, c.get("head_dim") or h // a, n)
    norms = {"gemma2": 4, "gemma3_text": 4}.get(mt, 2)          # Gemma 2/3 add post-norms
    blocks.append(Block("layer_norms", "norm", norms * h, n))
    mlp, moe, dense_layers = _decoder_mlp(c, mt, h, i, n)
    blocks += mlp
    blocks.append(Block("final_norm", "norm", h, 1, None, 1.0, "model"))
    blocks += _head_blocks(h, v, tie)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    windows, pattern = _windows(c, mt, n)
    traits = _decoder_traits(c, mt, where, a=a, kv=info["num_kv_heads"], mla=mt in ("deepseek_v2", "deepseek_v3"),
                             windows=windows, pattern=pattern, dense_layers=dense_layers)
    return dict(hidden_size=h, num_layers=n, num_heads=a, vocab_size=v, intermediate_size=i, tie_embeddings=tie,
                gated_mlp=True, norm="rms", max_position=c.get("max_position_embeddings") or 0,
                layer_windows=windows, blocks=tuple(blocks), traits=traits, **info, **moe)


def _gpt2(c: dict, where: str) -> dict[str, Any]:
    h, n, a = _positive(c, "n_embd", where), _positive(c, "n_layer", where), _positive(c, "n_head", where)
    v, pos = _positive(c, "vocab_size", where), _positive(c, "n_positions", where)
    i = c.get("n_inner") or 4 * h
    blocks = [Block("c_attn", "attn", h * 3 * h, n, (h, 3 * h)), Block("c_attn.bias", "bias", 3 * h, n),
              Block("attn.c_proj", "attn", h * h, n, (h, h)), Block("attn.c_proj.bias", "bias", h, n),
              Block("c_fc", "mlp", h * i, n, (h, i)), Block("c_fc.bias", "bias", i, n),
              Block("mlp.c_proj", "mlp", i * h, n, (i, h)), Block("mlp.c_proj.bias", "bias", h, n),
              Block("layer_norms", "norm", 4 * h, n), Block("ln_f", "norm", 2 * h, 1, None, 1.0, "model")]
    tie = bool(c.get("tie_word_embeddings", True))
    blocks += _head_blocks(h, v, tie, extra_embed=pos * h)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    # Unlike transformers (gelu_new, dropout 0.1), a GPT-2 config that leaves out its activation or dropout
    # is read as torch's gelu without dropout: the GPT-2-like configs of the ZeRO paper rows
    # (validation/memory.csv) describe Megatron models built that way.
    act = _t.activation(c.get("activation_function") or "gelu", where)
    traits = Traits(norm_dtype="native", fused_qkv=True, activation=act, mlp="plain", attention="mha",
                    position="learned", attention_bias=True, mlp_bias=True, partial_rotary=0.0,
                    dropout=Dropout(attention=_t.probability(c, "attn_pdrop"), residual=_t.probability(c, "resid_pdrop"),
                                    embedding=_t.probability(c, "embd_pdrop")))
    return dict(hidden_size=h, num_layers=n, num_heads=a, num_kv_heads=a, head_dim=h // a, v_head_dim=h // a,
                vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=False, norm="layernorm",
                max_position=pos, layer_windows=(None,) * n, blocks=tuple(blocks), traits=traits)


def _gpt_neox(c: dict, where: str) -> dict[str, Any]:
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v, i = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where), c["intermediate_size"]
    bias = bool(c.get("attention_bias", True))
    blocks = [Block("query_key_value", "attn", h * 3 * h, n, (h, 3 * h)), Block("dense", "attn", h * h, n, (h, h)),
              Block("dense_h_to_4h", "mlp", h * i, n, (h, i)), Block("dense_4h_to_h", "mlp", i * h, n, (i, h)),
              Block("mlp.bias", "bias", i + h, n), Block("layer_norms", "norm", 4 * h, n),
              Block("final_layer_norm", "norm", 2 * h, 1, None, 1.0, "model")]
    if bias:
        blocks.append(Block("attn.bias", "bias", 4 * h, n))
    tie = bool(c.get("tie_word_embeddings", False))
    blocks += _head_blocks(h, v, tie)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    act = _t.activation(c["hidden_act"], where)
    theta, scaling = _t.rope(c)
    # GPTNeoX applies hidden_dropout after attention, after the MLP and to the embeddings
    p = _t.probability(c, "hidden_dropout")
    traits = Traits(norm_dtype="native", fused_qkv=True, fused_qkv_output_kept=True, activation=act, mlp="plain",
                    attention="mha", parallel_block=bool(c.get("use_parallel_residual")), attention_bias=bias,
                    mlp_bias=True, rope_theta=theta, rope_scaling=scaling,
                    partial_rotary=float(c.get("rotary_pct") or _t.partial_rotary(c, 0.25)),
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout"), residual=p, embedding=p))
    return dict(hidden_size=h, num_layers=n, num_heads=a, num_kv_heads=a, head_dim=h // a, v_head_dim=h // a,
                vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=False, norm="layernorm",
                max_position=c.get("max_position_embeddings") or 0, layer_windows=(None,) * n, blocks=tuple(blocks),
                traits=traits)


def _falcon(c: dict, where: str) -> dict[str, Any]:
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where)
    d = h // a
    new_arch = bool(c.get("new_decoder_architecture"))
    if new_arch:
        kv = c.get("num_kv_heads") or a
    else:
        kv = 1 if c.get("multi_query", True) else a
    qkv_out = (a + 2 * kv) * d
    i = c.get("ffn_hidden_size") or 4 * h
    bias = bool(c.get("bias", False))
    if new_arch:
        ln = 2 if (c.get("num_ln_in_parallel_attn") or 2) == 2 else 1
    else:
        ln = 1 if c.get("parallel_attn", True) else 2
    blocks = [Block("query_key_value", "attn", h * qkv_out, n, (h, qkv_out)), Block("dense", "attn", h * h, n, (h, h)),
              Block("dense_h_to_4h", "mlp", h * i, n, (h, i)), Block("dense_4h_to_h", "mlp", i * h, n, (i, h)),
              Block("layer_norms", "norm", ln * 2 * h, n), Block("ln_f", "norm", 2 * h, 1, None, 1.0, "model")]
    if bias:
        blocks.append(Block("linear.bias", "bias", qkv_out + h + i + h, n))
    tie = bool(c.get("tie_word_embeddings", True))
    blocks += _head_blocks(h, v, tie)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    act = _t.activation(c["activation"], where)
    theta, scaling = _t.rope(c)
    traits = Traits(norm_dtype="native", fused_qkv=True, activation=act, mlp="plain",
                    attention=_t.attention_kind(a, kv, False), position="alibi" if c.get("alibi") else "rope",
                    parallel_block=new_arch or bool(c.get("parallel_attn", True)), layer_norms=ln,
                    partial_rotary=0.0 if c.get("alibi") else 1.0,
                    # transformers up to 5.24 handed SDPA the old (7B) architecture's single K/V head un-expanded
                    # with a mask (math path); from 5.25 FalconAttention calls the shared attention interface
                    # (modeling_falcon.py FalconAttention.forward -> ALL_ATTENTION_FUNCTIONS), whose SDPA call
                    # passes no mask and enable_gqa for an unpadded batch (integrations/sdpa_attention.py
                    # use_gqa_in_sdpa): a fused kernel, no S x S scores
                    sdpa_broadcast_kv=False,
                    attention_bias=bias, mlp_bias=bias, rope_theta=None if c.get("alibi") else theta,
                    rope_scaling=scaling,
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout"),
                                    residual=_t.probability(c, "hidden_dropout")))
    return dict(hidden_size=h, num_layers=n, num_heads=a, num_kv_heads=kv, head_dim=d, v_head_dim=d,
                vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=False, norm="layernorm",
                max_position=c.get("max_position_embeddings") or 0, layer_windows=(None,) * n, blocks=tuple(blocks),
                traits=traits)


def _generic_available() -> bool:
    """Whether torch and transformers are importable (the generic meta-device path, models/generic.py)."""
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def _family_builders() -> dict:
    from .encdec import BUILDERS as ENCDEC   # families.py, ssm.py and encdec.py build on this module's helpers
    from .families import BUILDERS
    from .ssm import BUILDERS as SSM_BUILDERS
    return {**BUILDERS, **SSM_BUILDERS, **ENCDEC}


def _siglip_blocks(vc: Mapping[str, Any], text_hidden: int) -> list[Block]:
    c = _cfg(vc, "siglip_vision_model")
    hv, iv, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    p, img, ch = c["patch_size"], c["image_size"], c["num_channels"]
    s = "vision"
    return [Block("vision.patch_embedding", "other", ch * p * p * hv + hv, 1, None, 1.0, s),
            Block("vision.position_embedding", "other", (img // p) ** 2 * hv, 1, None, 1.0, s),
            Block("vision.attn", "other", 4 * (hv * hv + hv), n, (hv, hv), 1.0, s),
            Block("vision.mlp", "other", hv * iv + iv + iv * hv + hv, n, (hv, iv), 1.0, s),
            Block("vision.layer_norms", "other", 4 * hv, n, None, 1.0, s),
            Block("vision.post_layernorm", "other", 2 * hv, 1, None, 1.0, s),
            Block("mm_projector", "other", hv * text_hidden + hv, 1, None, 1.0, s)] + (
        # SiglipMultiheadAttentionPoolingHead (SiglipVisionConfig default vision_use_head=True; Gemma 3's configs
        # say false): a probe token, nn.MultiheadAttention (in_proj 3h x h + bias, out_proj), a LayerNorm, an MLP
        [Block("vision.head", "other", hv + 3 * hv * hv + 3 * hv + hv * hv + hv + 2 * hv + 2 * hv * iv + iv + hv,
               1, None, 1.0, s)] if c.get("vision_use_head") else [])


# the keys that size a model, by the names architectures give them; a config that names none of a group gets the
# transformers config class's default silently (LlamaConfig: hidden_size 4096, 32 layers, vocabulary 32000)
_SHAPE_KEYS = {"hidden size": ("hidden_size", "n_embd", "d_model", "dim", "model_dim", "hidden_dim", "embed_dim",
                               "d_embed", "n_embed"),
               "layer count": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers"),
               "vocabulary size": ("vocab_size", "padded_vocab_size", "n_vocab")}
_NESTED = ("text_config", "llm_config", "language_config", "decoder")


def defaulted_shape(config: Any, spec: "ModelSpec | None" = None) -> str | None:
    """A note when a config.json (as the user gave it) leaves a model-sizing key to the transformers default, or
    None. transformers fills it the same way, so the estimate is what that config builds; but a truncated or
    hand-written config then looks like another model without a word."""
    def has(c: Any, keys: tuple[str, ...]) -> bool:
        if not isinstance(c, Mapping):
            return False
        return any(c.get(k) is not None for k in keys) or any(has(c.get(sub), keys) for sub in _NESTED)
    missing = [what for what, keys in _SHAPE_KEYS.items() if not has(config, keys)]
    if not missing or not isinstance(config, Mapping):
        return None
    shown = ""
    if spec is not None:
        values = {"hidden size": spec.hidden_size, "layer count": spec.num_layers, "vocabulary size": spec.vocab_size}
        shown = " (" + ", ".join(f"{what} {values[what]:,}" for what in missing) + ")"
    return (f"the model config gives no {', no '.join(missing)}: the defaults of transformers' "
            f"{config.get('model_type')} config class are used{shown}; if this is not that model, give the whole "
            "config.json")


# the config keys that count a checkpoint's multi-token-prediction layers (DeepSeek-V3/R1, GLM-4.5, MiMo:
# num_nextn_predict_layers; Qwen3-Next: mtp_num_hidden_layers)
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def mtp_layers(config: Any) -> int | None:
    """Multi-token-prediction layers the checkpoint holds, from its config.json; None when the config does not say
    (no such key), 0 when it says there are none (Kimi-K2's num_nextn_predict_layers: 0)."""
    if not isinstance(config, Mapping):
        return None
    for c in (config, *(config.get(sub) for sub in _NESTED)):
        if isinstance(c, Mapping):
            for k in _MTP_KEYS:
                if isinstance(c.get(k), int) and not isinstance(c.get(k), bool):
                    return int(c[k])
    return None


def spec_from_config(config: Mapping[str, Any], name: str | None = None, hf_id: str | None = None,
                     where: str = "") -> ModelSpec:
    """Build a ModelSpec from a HF config.json mapping (with its vision tower, models/vision.py)."""
    spec = _spec_from_config(config, name, hf_id, where)
    if isinstance(config, Mapping) and spec.stored_weights is None:
        from dataclasses import replace
        from .checkpoint import stored_weight_format
        stored = stored_weight_format(config)
        if stored is not None:
            spec = replace(spec, stored_weights=stored)
    if isinstance(config, Mapping) and config.get("vision_config") is not None and spec.vision_tower is None:
        from dataclasses import replace
        from .vision import vision_tower
        tower = vision_tower(config, spec.hidden_size)
        if tower is not None:
            spec = replace(spec, vision_tower=tower)
            if tower.cross_layers:
                # Llama-3.2-Vision: its cross-attention decoder layers keep no per-token KV (their keys and
                # values are the image's, estimate/vision.py)
                cross = set(tower.cross_layers)
                spec = replace(spec, layer_mixers=tuple("cross" if i in cross else "attention"
                                                        for i in range(spec.num_layers)))
    return spec


def _spec_from_config(config: Mapping[str, Any], name: str | None = None, hf_id: str | None = None,
                      where: str = "") -> ModelSpec:
    where = where or (f"'{name}'" if name else "(dict)")
    if not isinstance(config, Mapping):
        raise InputError(f"model config {where}", "must be a JSON object.", "pass the contents of config.json.")
    mt = config.get("model_type")
    if not mt:
        raise InputError(f"model config {where}", "has no 'model_type' field, so its architecture is unknown.",
                         "use a real HF config.json (it always names model_type).")
    mt = _ALIAS_TYPES.get(mt, mt)
    vision: list[Block] = []
    raw = config
    if mt == "gemma3_text" and "text_config" in config:  # Gemma3ForConditionalGeneration
        text = config["text_config"] or {}
        config = {**text, "model_type": "gemma3_text"}
        if config.get("vocab_size") is None:
            config["vocab_size"] = 262208
    if (mt not in _DEFAULTS or mt == "siglip_vision_model") and _generic_available():
        from .generic import spec_from_meta
        try:
            return spec_from_meta(raw, name=name or hf_id or str(mt), hf_id=hf_id, where=where)
        except UnsupportedError as err:
            raise UnsupportedError(err.what, err.why, f"{err.fix} Hand-written families: "
                                   + ", ".join(SUPPORTED_MODEL_TYPES) + ".",
                                   err.matches or close_matches(str(mt), SUPPORTED_MODEL_TYPES)) from None
    if mt not in _DEFAULTS or mt == "siglip_vision_model":
        # reached only without torch/transformers: the generic reader above handles every other case
        raise UnsupportedError(
            f"model_type '{config.get('model_type')}' in {where}",
            "is not one of gpuplan's hand-written families, and the generic reader that handles any architecture "
            "transformers can build needs torch and transformers, which are not installed.",
            "install the trace extra (`pip install '.[trace]'` in the gpuplan checkout) and run the same command "
            "again. Hand-written families: " + ", ".join(SUPPORTED_MODEL_TYPES) + ".",
            close_matches(str(mt), SUPPORTED_MODEL_TYPES))
    c = _cfg(config, mt)
    if mt == "gpt2":
        fields = _gpt2(c, where)
    elif mt == "gpt_neox":
        fields = _gpt_neox(c, where)
    elif mt == "falcon":
        fields = _falcon(c, where)
    elif mt in _family_builders():
        try:
            fields = _family_builders()[mt](c, where)
        except UnsupportedError:
            # a variant the hand-written family does not model (Nemotron-3's MoE blocks): the generic
            # meta-device reader, where torch and transformers are installed
            if not _generic_available():
                raise
            from .generic import spec_from_meta
            return spec_from_meta(raw, name=name or hf_id or str(mt), hf_id=hf_id, where=where)
    else:
        fields = _decoder(c, mt, where)
    if raw is not config and raw.get("vision_config") is not None:
        vision = _siglip_blocks(raw["vision_config"], fields["hidden_size"])
        fields["blocks"] = fields["blocks"] + tuple(vision)
    family = {"gemma3_text": "gemma3", "deepseek_v2": "deepseek", "deepseek_v3": "deepseek"}.get(mt, mt)
    return ModelSpec(name=name or hf_id or mt, hf_id=hf_id, model_type=mt, family=family, config=dict(raw), **fields)

"""Architecture traits: the facts about a model's blocks that change what it computes or saves.

`spec.py` reads them from a HF config.json (it is the only code that reads config keys); the
estimators and launchers read these typed fields instead of config keys or family names. Every
field is a closed vocabulary (or a number), so an estimator can branch on it safely.

Some traits describe HF transformers' modelling code rather than the architecture in the paper
(`norm_dtype`, `sdpa_broadcast_kv`, `fused_qkv_output_kept`, `router_fp32`): they matter because the
memory engine counts the tensors that code saves for backward, checked against fake-tensor traces.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..errors import InputError, close_matches

NORM_PLACEMENTS = ("pre", "post", "sandwich")
"""pre: norm before attention and MLP (Llama); post: norm on each sub-block's output before the
residual add (OLMo-2); sandwich: both (Gemma-2/3 add post-norms to the pre-norms)."""

NORM_DTYPES = ("native", "fp32_upcast", "fp32")
"""native: torch's LayerNorm kernel in the input dtype; fp32_upcast: RMSNorm upcast to fp32 and cast
back before the weight multiply (HF Llama); fp32: the whole norm, weight included, in fp32 (Gemma)."""

QK_NORMS = ("none", "per_head", "full")
"""RMSNorm on queries and keys: per head over head_dim (Qwen3, Gemma-3) or over the whole
projection (OLMo-2)."""

ACTIVATIONS = ("silu", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "quick_gelu", "relu", "relu2",
               "bloom_gelu")
"""The MLP activation as transformers implements it (ACT2FN names); gelu_new and gelu_fast are
Python tanh approximations that save their intermediates, gelu_pytorch_tanh is torch's kernel;
relu2 is squared ReLU (Nemotron: relu then pow, both save their input); bloom_gelu is BLOOM's
tanh approximation wrapped in an autograd Function that saves only its input in training
(transformers models/bloom/modeling_bloom.py GeLUFunction)."""

_ACTIVATION_ALIASES = {"swish": "silu", "gelu_python": "gelu", "gelu_accurate": "gelu_new",
                       "gelu_10": "gelu", "relu6": "relu"}

MLP_KINDS = ("swiglu", "geglu", "reglu", "plain")
"""swiglu/geglu/reglu: gated MLP act(gate) * up with a silu/gelu/relu activation; plain: fc1, act, fc2."""

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")
POSITIONS = ("rope", "alibi", "learned", "relative", "none")
"""relative: T5's learned relative position buckets, added to the attention scores; none: no position
encoding at all (SSMs and the attention layers of Jamba / Nemotron-H: the recurrence orders tokens)."""
WINDOW_PATTERNS = ("none", "all", "alternate", "every_nth", "top_layers", "layer_types")
"""How sliding-window layers were chosen: none; all layers; even layers (Gemma-2, gpt-oss);
all but every n-th (Gemma-3); layers from max_window_layers up (Qwen); an explicit layer_types list."""


@dataclass(frozen=True, kw_only=True)
class Dropout:
    """Dropout probabilities in training mode (0 = no dropout, no mask saved)."""
    attention: float = 0.0      # on the attention probabilities (inside the flash kernel)
    residual: float = 0.0       # on each sub-block's output before the residual add
    embedding: float = 0.0      # on the embedding output
    activation: float = 0.0     # inside the MLP, on the activation's output (BART's activation_dropout)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0:
                raise ValueError(f"dropout.{f.name} must be a probability in [0, 1), got {v!r}")


@dataclass(frozen=True, kw_only=True)
class Traits:
    """Architecture traits of a ModelSpec (defaults: a Llama-style decoder)."""
    norm_placement: str = "pre"
    norm_dtype: str = "fp32_upcast"
    qk_norm: str = "none"
    fused_qkv: bool = False                 # one q/k/v projection (GPT-2 c_attn, NeoX/Falcon query_key_value, Phi-3)
    fused_qkv_output_kept: bool = False     # rotary makes new q, k; v stays a view of the fused output (NeoX, Phi-3)
    fused_gate_up: bool = False             # one gate+up projection chunked in two (Phi-3's gate_up_proj)
    activation: str = "silu"
    mlp: str = "swiglu"
    final_logit_softcap: float | None = None    # logits = tanh(logits / cap) * cap (Gemma-2: 30)
    attn_logit_softcap: float | None = None     # same on attention scores (Gemma-2: 50)
    glu_clamp: float | None = None          # the gated MLP's inputs clamped before the activation: gate to at most
                                            # the limit, up to [-limit, limit] (gpt-oss `swiglu_limit` 7.0)
    dropout: Dropout = field(default_factory=Dropout)
    attention: str = "mha"
    position: str = "rope"
    parallel_block: bool = False            # attention and MLP read the same input (GPT-J, NeoX, Falcon)
    sdpa_broadcast_kv: bool = False         # HF passes one K/V head to SDPA un-expanded with a mask (Falcon-7B)
    attention_bias: bool = False            # biases on the q/k/v projections
    mlp_bias: bool = False                  # biases on the MLP (and attention output) linears
    rope_theta: float | None = None
    rope_scaling: str | None = None         # rope_type of the config's rope scaling (llama3, yarn, linear...)
    rope_scaling_factor: float | None = None  # its `factor` (Llama-3.1: 8, Llama-3.2: 32)
    sliding_window: int | None = None       # window length of the sliding-window layers
    window_pattern: str = "none"
    moe_shared_experts: int = 0             # always-active shared experts per MoE layer (DeepSeek)
    moe_dense_layers: tuple[int, ...] = ()  # layer indices of an MoE model that keep a dense MLP
    router_fp32: bool = False               # the router runs its linear on an fp32 copy of the input (DeepSeek)
    norm_eps: float | None = None           # epsilon of the RMSNorm/LayerNorm layers (None: the config gives none)
    layer_norms: int = 2                    # norms on the residual stream per layer before attention/MLP:
                                            # 2 (Llama), 1 when a parallel block shares one (GPT-J, phi, Cohere,
                                            # Falcon-7B, StableLM-2-12B); sandwich post-norms are extra
    partial_rotary: float = 1.0             # share of head_dim that gets rotary (GPT-J 64/256, phi 0.4-0.5,
                                            # StableLM 0.25, Nemotron 0.5); 0 with ALiBi or learned positions
    lm_head_bias: bool = False              # the output projection has a bias (GPT-J, phi-1.5/2)
    logit_scale: float | None = None        # logits multiplied by a constant (Cohere 0.0625, Granite 1/logits_scaling)
    embedding_norm: bool = False            # a LayerNorm right after the token embedding (BLOOM)
    eager_attention_only: bool = False      # transformers has no SDPA/flash path: scores are materialised
                                            # in fp32 whatever the scenario asks (BLOOM's baddbmm + ALiBi)
    eager_prefill_score_bytes: float = 4.0  # eager-only: bytes per score alive at HF prefill's softmax; every
                                            # eager path holds the 16-bit scores and probabilities (4); BLOOM 14
    shared_expert_gate: bool = False        # a sigmoid gate (h x 1 linear) scales the shared expert (Qwen2-MoE)
    relative_attention_buckets: int = 0     # T5 relative position buckets (0: none)
    rope_fp32: bool = False                 # rotary applied to fp32 copies of q and k (`q.float() * cos`: ModernBERT-
                                            # decoder, ERNIE-4.5), cast back after
    kda_channels: int = 0                   # Kimi Delta Attention layers: heads x key head dim of the per-channel
    kda_chunk: int = 0                      # decay, and the chunk length of transformers' torch chunk fallback (0: none)
    loss_fp32: bool = True                  # the causal-LM loss upcasts the logits (transformers' ForCausalLMLoss);
                                            # False: the model's own CrossEntropyLoss on the 16-bit logits (TrOCR)
    logits_to_keep: bool = True             # forward takes logits_to_keep, so HF generate's prefill makes the last
                                            # position's logits only; False: every prompt position's (TrOCR)
    encdec_layer: str = ""                  # encoder-decoder layer whose activations are derived: "t5" (models/encdec.py),
                                            # "bart" (BART's LayerNorm layer, models/generic.py), "ngram" (BART's post-LN
                                            # layer with eager attention everywhere and an n-gram decoder); "" = not derived
    speech_frames: tuple = ()               # an encoder that reads log-mel frames through strided Conv1d layers (Whisper):
                                            # (mel bins, input frames, (out_channels, stride) per conv); its positions
                                            # are input frames / product of strides, fixed by the model. () = tokens
    ngram_streams: int = 0                  # predicting streams an n-gram decoder runs beside its main stream through every
                                            # layer (ProphetNet's `ngram`); the lm_head and loss read these streams only
    encoder_eager_up_to: int = 0           # BART-style encoder attention that runs eager (scores and probabilities
                                            # materialised) up to this many input tokens and an attention gpuplan does
                                            # not derive beyond (BigBird-Pegasus: block-sparse); 0 = SDPA throughout

    def __post_init__(self) -> None:
        for name, vocab in (("norm_placement", NORM_PLACEMENTS), ("norm_dtype", NORM_DTYPES),
                            ("qk_norm", QK_NORMS), ("activation", ACTIVATIONS), ("mlp", MLP_KINDS),
                            ("attention", ATTENTION_KINDS), ("position", POSITIONS),
                            ("window_pattern", WINDOW_PATTERNS)):
            if getattr(self, name) not in vocab:
                raise ValueError(f"trait {name}={getattr(self, name)!r} is not one of {vocab}")
        for name in ("final_logit_softcap", "attn_logit_softcap", "glu_clamp"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"trait {name} must be positive or None, got {v!r}")
        if self.layer_norms not in (1, 2):
            raise ValueError(f"trait layer_norms must be 1 or 2, got {self.layer_norms!r}")
        if not 0.0 <= self.partial_rotary <= 1.0:
            raise ValueError(f"trait partial_rotary must be in [0, 1], got {self.partial_rotary!r}")
        if self.logit_scale is not None and not self.logit_scale > 0:
            raise ValueError(f"trait logit_scale must be positive or None, got {self.logit_scale!r}")
        if (self.sliding_window is None) != (self.window_pattern == "none"):
            raise ValueError("sliding_window and window_pattern must both be set or both be unset")

    @property
    def gated_mlp(self) -> bool:
        return self.mlp != "plain"

    @property
    def yarn_scaled(self) -> bool:
        """YaRN position scaling with a factor above 1 (mscale != 1: frameworks that fuse plain RoPE fall back)."""
        return self.rope_scaling == "yarn" and (self.rope_scaling_factor or 1.0) > 1.0

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dropout"] = {f.name: getattr(self.dropout, f.name) for f in fields(self.dropout)}
        out["moe_dense_layers"] = list(self.moe_dense_layers)
        return out


# ---- reading from a merged HF config (called by spec.py only) ----------------------------------

def activation(name: Any, where: str) -> str:
    """A config's activation name in the closed vocabulary, or a clear error."""
    key = _ACTIVATION_ALIASES.get(str(name), str(name))
    if key not in ACTIVATIONS:
        raise InputError(f"model config {where}", f"activation '{name}' is not one gpuplan models.",
                         "supported: " + ", ".join(ACTIVATIONS) + ".", close_matches(str(name), ACTIVATIONS))
    return key


def mlp_kind(gated: bool, act: str) -> str:
    if not gated:
        return "plain"
    if act == "silu":
        return "swiglu"
    return "reglu" if act == "relu" else "geglu"


def attention_kind(num_heads: int, num_kv_heads: int, mla: bool) -> str:
    if mla:
        return "mla"
    if num_kv_heads == num_heads:
        return "mha"
    return "mqa" if num_kv_heads == 1 else "gqa"


def probability(c: Mapping[str, Any], *keys: str) -> float:
    """The first of `keys` the config sets (None skipped), as a float; 0.0 when none is set."""
    for k in keys:
        if c.get(k) is not None:
            return float(c[k])
    return 0.0


DEFAULT_ROPE_THETA = 10000.0
"""rope_theta when a config leaves it out: the default of transformers' LlamaConfig (and RoFormer's 10^4)."""


def partial_rotary(c: Mapping[str, Any], default: float = 1.0) -> float:
    """partial_rotary_factor from the config or transformers' newer rope_parameters."""
    params = c.get("rope_parameters") if isinstance(c.get("rope_parameters"), Mapping) else {}
    v = c.get("partial_rotary_factor", params.get("partial_rotary_factor", default))
    return float(v if v is not None else default)


def rope(c: Mapping[str, Any]) -> tuple[float, str | None]:
    """(rope_theta, rope scaling type) from rope_theta / rope_scaling or transformers' newer rope_parameters."""
    params = c.get("rope_parameters") if isinstance(c.get("rope_parameters"), Mapping) else {}
    theta = c.get("rope_theta", params.get("rope_theta", DEFAULT_ROPE_THETA))
    scaling = c.get("rope_scaling") or params or {}
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, Mapping) else None
    if kind == "default":
        kind = None
    return float(theta), kind


def rope_factor(c: Mapping[str, Any]) -> float | None:
    """The `factor` of the config's rope scaling (rope_scaling or rope_parameters), or None."""
    params = c.get("rope_parameters") if isinstance(c.get("rope_parameters"), Mapping) else {}
    scaling = c.get("rope_scaling") or params or {}
    f = scaling.get("factor") if isinstance(scaling, Mapping) else None
    return float(f) if isinstance(f, (int, float)) and not isinstance(f, bool) else None

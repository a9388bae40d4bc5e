"""Hand-written families beyond the Llama-like decoders of spec.py: GPT-J, BLOOM, phi-1.5/phi-2,
StableLM, Cohere/Command-R and Nemotron.

Each builder reads a merged config (the family's transformers defaults overlaid by config.json,
see spec._DEFAULTS) and returns the ModelSpec fields. Shapes follow the transformers 5.x modelling
files named in each docstring (models/<family>/modeling_<family>.py); every bundled config is
checked against `AutoModelForCausalLM.from_config` on the meta device (tests/test_models_meta.py).
"""
from __future__ import annotations

from typing import Any

from . import traits as _t
from .spec import Block, _head_blocks, _positive, _tied_head_flops_block
from .traits import Dropout, Traits


def _layernorm(name: str, h: int, n: int, bias: bool = True, scope: str = "layer") -> Block:
    return Block(name, "norm", (2 if bias else 1) * h, n, None, 1.0, scope)


def _linear(name: str, kind: str, fan_in: int, fan_out: int, n: int, bias: bool) -> list[Block]:
    out = [Block(name, kind, fan_in * fan_out, n, (fan_in, fan_out))]
    if bias:
        out.append(Block(f"{name}.bias", "bias", fan_out, n))
    return out


def _qkvo(h: int, a: int, kv: int, d: int, n: int, *, qkv_bias: bool, o_bias: bool) -> list[Block]:
    return (_linear("q_proj", "attn", h, a * d, n, qkv_bias) + _linear("k_proj", "attn", h, kv * d, n, qkv_bias)
            + _linear("v_proj", "attn", h, kv * d, n, qkv_bias) + _linear("o_proj", "attn", a * d, h, n, o_bias))


def _output(h: int, v: int, tie: bool, head_bias: bool = False) -> list[Block]:
    """Embedding, lm_head (or the tied head's matmul) and the head's bias, which a tied head keeps."""
    blocks = _head_blocks(h, v, tie)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    if head_bias:
        blocks.append(Block("lm_head.bias", "bias", v, 1, None, 1.0, "model"))
    return blocks


def _fields(*, h, n, a, kv, d, v, i, tie, gated, norm, max_position, blocks, traits) -> dict[str, Any]:
    return dict(hidden_size=h, num_layers=n, num_heads=a, num_kv_heads=kv, head_dim=d, v_head_dim=d,
                vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=gated, norm=norm,
                max_position=max_position, layer_windows=(None,) * n, blocks=tuple(blocks), traits=traits)


def gptj(c: dict, where: str) -> dict[str, Any]:
    """GPT-J (modeling_gptj.py): one ln_1 feeds attention and MLP in parallel; q/k/v/out without bias;
    fc_in/fc_out with bias; rotary on the first `rotary_dim` dims of each head; lm_head with a bias."""
    h, n, a = _positive(c, "n_embd", where), _positive(c, "n_layer", where), _positive(c, "n_head", where)
    v, d = _positive(c, "vocab_size", where), h // a
    i = c.get("n_inner") or 4 * h
    tie = bool(c.get("tie_word_embeddings", False))
    blocks = _qkvo(h, a, a, d, n, qkv_bias=False, o_bias=False)
    blocks += _linear("fc_in", "mlp", h, i, n, True) + _linear("fc_out", "mlp", i, h, n, True)
    blocks += [_layernorm("ln_1", h, n), _layernorm("ln_f", h, 1, scope="model")] + _output(h, v, tie, True)
    rot = c.get("rotary_dim")
    traits = Traits(norm_dtype="native", activation=_t.activation(c.get("activation_function") or "gelu_new", where),
                    mlp="plain", attention="mha", parallel_block=True, layer_norms=1, mlp_bias=True,
                    partial_rotary=min(rot / d, 1.0) if rot else 1.0, lm_head_bias=True,
                    rope_theta=_t.DEFAULT_ROPE_THETA,
                    dropout=Dropout(attention=_t.probability(c, "attn_pdrop"), residual=_t.probability(c, "resid_pdrop"),
                                    embedding=_t.probability(c, "embd_pdrop")))
    return _fields(h=h, n=n, a=a, kv=a, d=d, v=v, i=i, tie=tie, gated=False, norm="layernorm",
                   max_position=c.get("n_positions") or 0, blocks=blocks, traits=traits)


def bloom(c: dict, where: str) -> dict[str, Any]:
    """BLOOM (modeling_bloom.py): ALiBi instead of positions, a LayerNorm after the embedding, fused
    query_key_value and all linears with bias, MLP 4h wide, tied head. Attention is eager only
    (baddbmm with the ALiBi bias, softmax in fp32)."""
    h = c.get("hidden_size") or c.get("n_embed")
    if not isinstance(h, int) or h <= 0:
        _positive({"hidden_size": h}, "hidden_size", where)
    n, a, v = _positive(c, "n_layer", where), _positive(c, "n_head", where), _positive(c, "vocab_size", where)
    d, i = h // a, 4 * h
    tie = bool(c.get("tie_word_embeddings", True))
    blocks = (_linear("query_key_value", "attn", h, 3 * h, n, True) + _linear("dense", "attn", h, h, n, True)
              + _linear("dense_h_to_4h", "mlp", h, i, n, True) + _linear("dense_4h_to_h", "mlp", i, h, n, True))
    blocks += [_layernorm("layer_norms", 2 * h, n), _layernorm("word_embeddings_layernorm", h, 1, scope="model"),
               _layernorm("ln_f", h, 1, scope="model")] + _output(h, v, tie)
    p = _t.probability(c, "hidden_dropout")
    traits = Traits(norm_dtype="native", fused_qkv=True, activation="bloom_gelu", mlp="plain", attention="mha",
                    position="alibi", attention_bias=True, mlp_bias=True, partial_rotary=0.0, embedding_norm=True,
                    eager_attention_only=True, eager_prefill_score_bytes=14.0,   # memory._eager_prefill_bytes_per_token
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout"), residual=p))
    # ALiBi has no trained length limit; configs carry seq_length (2048 for the BigScience runs) at most
    return _fields(h=h, n=n, a=a, kv=a, d=d, v=v, i=i, tie=tie, gated=False, norm="layernorm",
                   max_position=c.get("seq_length") or c.get("max_position_embeddings") or 0, blocks=blocks,
                   traits=traits)


def phi(c: dict, where: str) -> dict[str, Any]:
    """phi-1/1.5/2 (modeling_phi.py): one input_layernorm feeds attention and MLP in parallel; q/k/v
    and dense with bias, fc1/fc2 with bias, partial rotary, optional per-head q/k LayerNorm, lm_head
    with a bias."""
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v, i = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where), c["intermediate_size"]
    kv, d = c.get("num_key_value_heads") or a, h // a
    tie = bool(c.get("tie_word_embeddings", False))
    blocks = _qkvo(h, a, kv, d, n, qkv_bias=True, o_bias=True)
    blocks += _linear("fc1", "mlp", h, i, n, True) + _linear("fc2", "mlp", i, h, n, True)
    qk_norm = bool(c.get("qk_layernorm"))
    if qk_norm:  # nn.LayerNorm(head_dim) shared by all heads, for q and for k
        blocks.append(Block("q_k_layernorm", "norm", 2 * 2 * d, n))
    blocks += [_layernorm("input_layernorm", h, n), _layernorm("final_layernorm", h, 1, scope="model")]
    blocks += _output(h, v, tie, True)
    theta, scaling = _t.rope(c)
    traits = Traits(norm_dtype="native", qk_norm="per_head" if qk_norm else "none",
                    activation=_t.activation(c.get("hidden_act") or "gelu_new", where), mlp="plain",
                    attention=_t.attention_kind(a, kv, False), parallel_block=True, layer_norms=1,
                    attention_bias=True, mlp_bias=True, partial_rotary=_t.partial_rotary(c, 0.5), lm_head_bias=True,
                    rope_theta=theta, rope_scaling=scaling,
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout"),
                                    residual=_t.probability(c, "resid_pdrop"), embedding=_t.probability(c, "embd_pdrop")))
    return _fields(h=h, n=n, a=a, kv=kv, d=d, v=v, i=i, tie=tie, gated=False, norm="layernorm",
                   max_position=c.get("max_position_embeddings") or 0, blocks=blocks, traits=traits)


def stablelm(c: dict, where: str) -> dict[str, Any]:
    """StableLM / StableLM-2 (modeling_stablelm.py): LayerNorms with bias, q/k/v bias when use_qkv_bias,
    SwiGLU, partial rotary (0.25); use_parallel_residual drops post_attention_layernorm (StableLM-2-12B);
    qk_layernorm adds one bias-free LayerNorm per head (StableLmLayerNormPerHead)."""
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v, i = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where), c["intermediate_size"]
    kv, d = c.get("num_key_value_heads") or a, h // a
    tie = bool(c.get("tie_word_embeddings", False))
    parallel = bool(c.get("use_parallel_residual"))
    blocks = _qkvo(h, a, kv, d, n, qkv_bias=bool(c.get("use_qkv_bias")), o_bias=False)
    blocks += [Block(f"mlp.{p}", "mlp", h * i, n, (h, i)) for p in ("gate_proj", "up_proj")]
    blocks += [Block("mlp.down_proj", "mlp", i * h, n, (i, h))]
    qk_norm = bool(c.get("qk_layernorm"))
    if qk_norm:
        blocks.append(Block("q_k_layernorm", "norm", (a + kv) * d, n))
    blocks += [_layernorm("layer_norms", (1 if parallel else 2) * h, n),
               _layernorm("norm", h, 1, scope="model")] + _output(h, v, tie)
    theta, scaling = _t.rope(c)
    act = _t.activation(c.get("hidden_act") or "silu", where)
    traits = Traits(norm_dtype="native", qk_norm="per_head" if qk_norm else "none", activation=act,
                    mlp=_t.mlp_kind(True, act), attention=_t.attention_kind(a, kv, False), parallel_block=parallel,
                    layer_norms=1 if parallel else 2, attention_bias=bool(c.get("use_qkv_bias")),
                    partial_rotary=_t.partial_rotary(c, 0.25), rope_theta=theta, rope_scaling=scaling,
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout"),
                                    residual=_t.probability(c, "hidden_dropout")))
    return _fields(h=h, n=n, a=a, kv=kv, d=d, v=v, i=i, tie=tie, gated=True, norm="layernorm",
                   max_position=c.get("max_position_embeddings") or 0, blocks=blocks, traits=traits)


def cohere(c: dict, where: str) -> dict[str, Any]:
    """Cohere Command-R / Aya (modeling_cohere.py): one bias-free LayerNorm (computed in fp32 in
    Python) feeds attention and SwiGLU in parallel; optional q/k LayerNorms over (heads, head_dim)
    (Command-R+); tied head; logits multiplied by logit_scale."""
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v, i = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where), c["intermediate_size"]
    kv, d = c.get("num_key_value_heads") or a, h // a
    tie = bool(c.get("tie_word_embeddings", True))
    bias = bool(c.get("attention_bias", False))
    blocks = _qkvo(h, a, kv, d, n, qkv_bias=bias, o_bias=bias)
    blocks += [Block(f"mlp.{p}", "mlp", h * i, n, (h, i)) for p in ("gate_proj", "up_proj")]
    blocks += [Block("mlp.down_proj", "mlp", i * h, n, (i, h))]
    qk_norm = bool(c.get("use_qk_norm"))
    if qk_norm:
        blocks.append(Block("q_k_norm", "norm", (a + kv) * d, n))
    blocks += [_layernorm("input_layernorm", h, n, bias=False), _layernorm("norm", h, 1, False, "model")]
    blocks += _output(h, v, tie)
    theta, scaling = _t.rope(c)
    act = _t.activation(c.get("hidden_act") or "silu", where)
    traits = Traits(norm_dtype="fp32_upcast", qk_norm="per_head" if qk_norm else "none", activation=act,
                    mlp=_t.mlp_kind(True, act), attention=_t.attention_kind(a, kv, False), parallel_block=True,
                    layer_norms=1, attention_bias=bias, mlp_bias=bias, rope_theta=theta, rope_scaling=scaling,
                    logit_scale=float(c.get("logit_scale") or 1.0),
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout")))
    return _fields(h=h, n=n, a=a, kv=kv, d=d, v=v, i=i, tie=tie, gated=True, norm="layernorm",
                   max_position=c.get("max_position_embeddings") or 0, blocks=blocks, traits=traits)


def nemotron(c: dict, where: str) -> dict[str, Any]:
    """Nemotron-3/4 and Minitron (modeling_nemotron.py): LayerNorm1P (weight + 1, bias) run in the
    autocast dtype, a plain up/down MLP with squared ReLU, partial rotary (0.5), untied head."""
    h, n = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where)
    a, v, i = _positive(c, "num_attention_heads", where), _positive(c, "vocab_size", where), c["intermediate_size"]
    kv = c.get("num_key_value_heads") or a
    d = c.get("head_dim") or h // a
    tie = bool(c.get("tie_word_embeddings", False))
    bias, mlp_bias = bool(c.get("attention_bias", False)), bool(c.get("mlp_bias", False))
    blocks = _qkvo(h, a, kv, d, n, qkv_bias=bias, o_bias=bias)
    blocks += _linear("mlp.up_proj", "mlp", h, i, n, mlp_bias) + _linear("mlp.down_proj", "mlp", i, h, n, mlp_bias)
    blocks += [_layernorm("layer_norms", 2 * h, n), _layernorm("norm", h, 1, scope="model")] + _output(h, v, tie)
    theta, scaling = _t.rope(c)
    traits = Traits(norm_dtype="native", activation=_t.activation(c.get("hidden_act") or "relu2", where), mlp="plain",
                    attention=_t.attention_kind(a, kv, False), attention_bias=bias, mlp_bias=mlp_bias,
                    partial_rotary=_t.partial_rotary(c, 0.5), rope_theta=theta, rope_scaling=scaling,
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout")))
    return _fields(h=h, n=n, a=a, kv=kv, d=d, v=v, i=i, tie=tie, gated=False, norm="layernorm",
                   max_position=c.get("max_position_embeddings") or 0, blocks=blocks, traits=traits)


BUILDERS = {"gptj": gptj, "bloom": bloom, "phi": phi, "stablelm": stablelm, "cohere": cohere, "nemotron": nemotron}

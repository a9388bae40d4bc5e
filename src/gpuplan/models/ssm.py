"""State-space (SSM) families and SSM/attention hybrids: Mamba, Falcon-Mamba, Mamba-2, Jamba and Nemotron-H.

Each builder reads a merged config (the family's transformers defaults overlaid by config.json, see
spec._DEFAULTS) and returns the ModelSpec fields, like families.py. Shapes follow transformers 5.24
(models/<family>/modeling_<family>.py); every bundled config is checked against
`AutoModelForCausalLM.from_config` on the meta device (tests/test_models_ssm.py).

A layer's token mixer is named per layer in `layer_mixers`: "attention" (keeps a KV cache) or "mamba"
(keeps a fixed-size recurrent state and a short convolution window instead); Nemotron-H also has layers
that are only an MLP ("mlp"), each block with its own norm. `SSMShape` (spec.py) holds
the mixer's sizes that the estimators read: the inner width, state size, convolution width, dt rank
(Mamba-1) or heads and groups (Mamba-2).
"""
from __future__ import annotations

import math
from typing import Any

from ..errors import InputError, UnsupportedError
from . import traits as _t
from .spec import Block, SSMShape, _gated_mlp, _positive
from .families import _output
from .traits import Dropout, Traits


def _mamba1_mixer(h: int, d: int, n_state: int, conv: int, rank: int, n: int, *, proj_bias: bool,
                  conv_bias: bool, inner_norm_weights: bool) -> list[Block]:
    """MambaMixer: in_proj h -> 2d (x and the gate z), a depthwise conv1d over x, x_proj d -> (rank + 2N)
    (dt, B, C), dt_proj rank -> d with bias, A_log d x N, D d, out_proj d -> h."""
    blocks = [Block("mixer.in_proj", "ssm", h * 2 * d, n, (h, 2 * d)),
              Block("mixer.conv1d", "ssm", d * conv + (d if conv_bias else 0), n),
              Block("mixer.x_proj", "ssm", d * (rank + 2 * n_state), n, (d, rank + 2 * n_state)),
              Block("mixer.dt_proj", "ssm", rank * d, n, (rank, d)),
              Block("mixer.dt_proj.bias", "bias", d, n),
              Block("mixer.A_log", "ssm", d * n_state, n),
              Block("mixer.D", "ssm", d, n),
              Block("mixer.out_proj", "ssm", d * h, n, (d, h))]
    if proj_bias:
        blocks.append(Block("mixer.proj.bias", "bias", 2 * d + h, n))
    if inner_norm_weights:   # Jamba: RMSNorms with weights on dt (rank), B and C (N each)
        blocks.append(Block("mixer.dt_b_c_layernorm", "norm", rank + 2 * n_state, n))
    return blocks


def _mamba2_mixer(h: int, d: int, n_state: int, conv: int, heads: int, groups: int, n: int, *,
                  proj_bias: bool, conv_bias: bool) -> list[Block]:
    """Mamba2Mixer: one in_proj h -> (z d, x d, B G*N, C G*N, dt heads), a depthwise conv1d over
    x|B|C (conv_dim = d + 2GN), dt_bias / A_log / D per head, a gated RMSNorm over d, out_proj d -> h."""
    conv_dim = d + 2 * groups * n_state
    proj = d + conv_dim + heads
    blocks = [Block("mixer.in_proj", "ssm", h * proj, n, (h, proj)),
              Block("mixer.conv1d", "ssm", conv_dim * conv + (conv_dim if conv_bias else 0), n),
              Block("mixer.dt_bias_A_log_D", "ssm", 3 * heads, n),
              Block("mixer.norm", "norm", d, n),
              Block("mixer.out_proj", "ssm", d * h, n, (d, h))]
    if proj_bias:
        blocks.append(Block("mixer.proj.bias", "bias", proj + h, n))
    return blocks


def _dt_rank(value: Any, h: int, where: str, key: str) -> int:
    if value in (None, "auto"):
        return math.ceil(h / 16)          # transformers: time_step_rank "auto" = ceil(hidden_size / 16)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError(f"model config {where}", f"field '{key}' must be a positive integer or \"auto\", got "
                         f"{value!r}.", f"fix '{key}' in the config.json.")
    return value


def _ssm_traits(c: dict, where: str, *, residual_fp32: bool) -> Traits:
    # one RMSNorm before each mixer; no positions (the recurrence orders tokens)
    return Traits(norm_dtype="fp32_upcast", activation=_t.activation(c.get("hidden_act") or "silu", where),
                  mlp="plain", attention="mha", position="none", layer_norms=1, partial_rotary=0.0,
                  rope_theta=None, norm_eps=c.get("layer_norm_epsilon"), dropout=Dropout())


def _ssm_fields(*, h, n, v, tie, max_position, blocks, traits, ssm, mixers, a=0, kv=0, d=0, i=0,
                gated=False, **moe) -> dict[str, Any]:
    return dict(hidden_size=h, num_layers=n, num_heads=a, num_kv_heads=kv, head_dim=d, v_head_dim=d,
                vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=gated, norm="rms",
                max_position=max_position, layer_windows=(None,) * n, blocks=tuple(blocks), traits=traits,
                ssm=ssm, layer_mixers=tuple(mixers), **moe)


def mamba(c: dict, where: str) -> dict[str, Any]:
    """Mamba-1 (modeling_mamba.py; Falcon-Mamba, modeling_falcon_mamba.py, adds weightless RMSNorms on
    dt, B and C): per layer one RMSNorm and the mixer, no MLP; d_inner = expand x hidden_size."""
    h, n, v = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where), \
        _positive(c, "vocab_size", where)
    n_state, conv = _positive(c, "state_size", where), _positive(c, "conv_kernel", where)
    d = int(c["expand"] * h)          # MambaConfig sets intermediate_size = int(expand * hidden_size)
    rank = _dt_rank(c.get("time_step_rank"), h, where, "time_step_rank")
    tie = bool(c.get("tie_word_embeddings", True))
    blocks = _mamba1_mixer(h, d, n_state, conv, rank, n, proj_bias=bool(c.get("use_bias")),
                           conv_bias=bool(c.get("use_conv_bias", True)), inner_norm_weights=False)
    blocks += [Block("norm", "norm", h, n), Block("norm_f", "norm", h, 1, None, 1.0, "model")] + _output(h, v, tie)
    falcon = c.get("model_type") == "falcon_mamba"
    ssm = SSMShape(variant="mamba1", d_inner=d, d_state=n_state, d_conv=conv, dt_rank=rank,
                   inner_norms="weightless" if falcon else "none",
                   residual_fp32=bool(c.get("residual_in_fp32", True)))
    return _ssm_fields(h=h, n=n, v=v, tie=tie, max_position=0, blocks=blocks,
                       traits=_ssm_traits(c, where, residual_fp32=ssm.residual_fp32), ssm=ssm, mixers=("mamba",) * n)


def mamba2(c: dict, where: str) -> dict[str, Any]:
    """Mamba-2 (modeling_mamba2.py): per layer one RMSNorm and the SSD mixer, no MLP."""
    h, n, v = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where), \
        _positive(c, "vocab_size", where)
    n_state, conv = _positive(c, "state_size", where), _positive(c, "conv_kernel", where)
    heads, hd, groups = _positive(c, "num_heads", where), _positive(c, "head_dim", where), \
        _positive(c, "n_groups", where)
    d = int(c["expand"] * h)
    if heads * hd != d:
        raise InputError(f"model config {where}", f"num_heads x head_dim = {heads * hd} differs from expand x "
                         f"hidden_size = {d}, which the Mamba-2 mixer needs equal.",
                         "fix num_heads, head_dim or expand in the config.json.")
    tie = bool(c.get("tie_word_embeddings", False))
    blocks = _mamba2_mixer(h, d, n_state, conv, heads, groups, n, proj_bias=bool(c.get("use_bias")),
                           conv_bias=bool(c.get("use_conv_bias", True)))
    blocks += [Block("norm", "norm", h, n), Block("norm_f", "norm", h, 1, None, 1.0, "model")] + _output(h, v, tie)
    ssm = SSMShape(variant="mamba2", d_inner=d, d_state=n_state, d_conv=conv, n_groups=groups, num_heads=heads,
                   head_dim=hd, chunk_size=int(c.get("chunk_size") or 256),
                   residual_fp32=bool(c.get("residual_in_fp32", True)))
    return _ssm_fields(h=h, n=n, v=v, tie=tie, max_position=0, blocks=blocks,
                       traits=_ssm_traits(c, where, residual_fp32=ssm.residual_fp32), ssm=ssm, mixers=("mamba",) * n)


def jamba(c: dict, where: str) -> dict[str, Any]:
    """Jamba (modeling_jamba.py): layer i mixes with attention when i % attn_layer_period ==
    attn_layer_offset, else with a Mamba-1 mixer whose dt, B and C pass weighted RMSNorms; every layer
    then has an MLP, routed experts (top-k of E) when i % expert_layer_period == expert_layer_offset.
    Two RMSNorms per layer (input, pre-MLP); attention without positions or bias."""
    h, n, v = _positive(c, "hidden_size", where), _positive(c, "num_hidden_layers", where), \
        _positive(c, "vocab_size", where)
    a, i = _positive(c, "num_attention_heads", where), _positive(c, "intermediate_size", where)
    kv, hd = c.get("num_key_value_heads") or a, h // a
    ap, ao = _positive(c, "attn_layer_period", where), c.get("attn_layer_offset") or 0
    ep, eo = _positive(c, "expert_layer_period", where), c.get("expert_layer_offset") or 0
    experts, k = c.get("num_experts") or 1, c.get("num_experts_per_tok") or 1
    mixers = tuple("attention" if li % ap == ao else "mamba" for li in range(n))
    moe_layers = sum(1 for li in range(n) if experts > 1 and li % ep == eo)
    n_attn, n_mamba = mixers.count("attention"), mixers.count("mamba")
    n_state, conv = _positive(c, "mamba_d_state", where), _positive(c, "mamba_d_conv", where)
    d = int(c["mamba_expand"] * h)
    rank = _dt_rank(c.get("mamba_dt_rank"), h, where, "mamba_dt_rank")
    tie = bool(c.get("tie_word_embeddings", False))
    blocks = [Block(name, "attn", fi * fo, n_attn, (fi, fo)) for name, fi, fo in
              (("q_proj", h, a * hd), ("k_proj", h, kv * hd), ("v_proj", h, kv * hd), ("o_proj", a * hd, h))]
    blocks += _mamba1_mixer(h, d, n_state, conv, rank, n_mamba, proj_bias=bool(c.get("mamba_proj_bias")),
                            conv_bias=bool(c.get("mamba_conv_bias", True)), inner_norm_weights=True)
    if n - moe_layers:
        blocks += _gated_mlp(h, i, n - moe_layers)
    moe: dict[str, Any] = {}
    if moe_layers:
        blocks.append(Block("router", "router", h * experts, moe_layers, (h, experts)))
        blocks += _gated_mlp(h, i, moe_layers * experts, "expert", k / experts, "experts")
        moe = dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=i, num_moe_layers=moe_layers)
    blocks += [Block("layer_norms", "norm", 2 * h, n), Block("final_layernorm", "norm", h, 1, None, 1.0, "model")]
    blocks += _output(h, v, tie)
    dense = tuple(li for li in range(n) if not (experts > 1 and li % ep == eo)) if moe_layers else ()
    act = _t.activation(c.get("hidden_act") or "silu", where)
    traits = Traits(norm_dtype="fp32_upcast", activation=act, mlp=_t.mlp_kind(True, act),
                    attention=_t.attention_kind(a, kv, False), position="none", partial_rotary=0.0, rope_theta=None,
                    moe_dense_layers=dense, norm_eps=c.get("rms_norm_eps"),
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout")))
    ssm = SSMShape(variant="mamba1", d_inner=d, d_state=n_state, d_conv=conv, dt_rank=rank, inner_norms="weighted",
                   residual_fp32=False)
    return _ssm_fields(h=h, n=n, v=v, tie=tie, max_position=c.get("max_position_embeddings") or 0, blocks=blocks,
                       traits=traits, ssm=ssm, mixers=mixers, a=a, kv=kv, d=hd, i=i, gated=True, **moe)


_NEMOTRON_H_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "mamba": "mamba", "linear_attention": "mamba",
                     "attention": "attention", "full_attention": "attention", "mlp": "mlp"}


def _nemotron_h_layers(c: dict, where: str) -> tuple[str, ...]:
    """Per-layer block kinds from layers_block_type / layer_types (names, legacy names remapped as
    transformers' remap_legacy_layer_types does) or hybrid_override_pattern (M mamba, * attention, - MLP)."""
    seq = c.get("layers_block_type") or c.get("layer_types") or c.get("hybrid_override_pattern")
    if not seq:
        raise InputError(f"model config {where}", "has neither hybrid_override_pattern nor layers_block_type, so "
                         "its layer order is unknown.", "use the checkpoint's own config.json.")
    kinds = []
    for k in seq:
        if k in ("E", "moe"):
            # UnsupportedError: spec_from_config then reads the model on the meta device (models/generic.py)
            raise UnsupportedError(f"model config {where}", "has mixture-of-experts blocks (pattern 'E' / 'moe': "
                                   "Nemotron-3 style latent MoE), which the hand-written Nemotron-H family does "
                                   "not model.", "use a dense Nemotron-H checkpoint (patterns of M, * and -), or "
                                   "install the trace extra (the generic meta-device reader reads it).")
        if k not in _NEMOTRON_H_KINDS:
            raise InputError(f"model config {where}", f"layer kind {k!r} is not one of M, *, - (or mamba, attention, "
                             "mlp).", "fix hybrid_override_pattern / layers_block_type in the config.json.")
        kinds.append(_NEMOTRON_H_KINDS[k])
    return tuple(kinds)


def nemotron_h(c: dict, where: str) -> dict[str, Any]:
    """Nemotron-H (modeling_nemotron_h.py): a list of single blocks, each one RMSNorm and one of a Mamba-2
    mixer (d_inner = mamba_num_heads x mamba_head_dim), attention (q/k/v/o, no bias, no positions) or a
    squared-ReLU up/down MLP. Mixture-of-experts blocks (Nemotron-3) are refused."""
    h, v = _positive(c, "hidden_size", where), _positive(c, "vocab_size", where)
    kinds = _nemotron_h_layers(c, where)
    n = len(kinds)
    n_m, n_a, n_f = kinds.count("mamba"), kinds.count("attention"), kinds.count("mlp")
    a, kv = _positive(c, "num_attention_heads", where), c.get("num_key_value_heads") or c["num_attention_heads"]
    hd = c.get("head_dim") or h // a
    i = c.get("intermediate_size") or 0
    heads, phd = _positive(c, "mamba_num_heads", where), _positive(c, "mamba_head_dim", where)
    groups = c.get("mamba_n_groups") or c.get("n_groups") or 1
    n_state = _positive(c, "ssm_state_size", where)
    conv = c.get("mamba_d_conv") or c.get("conv_kernel") or 4
    d = heads * phd
    tie = False     # NemotronHForCausalLM declares no tied weights (_tied_weights_keys = {}): lm_head is its own
    blocks: list[Block] = []
    if n_m:
        conv_bias = c["mamba_conv_bias"] if "mamba_conv_bias" in c else c.get("use_conv_bias", True)
        blocks += _mamba2_mixer(h, d, n_state, conv, heads, groups, n_m, proj_bias=bool(c.get("use_bias")),
                                conv_bias=bool(conv_bias))
    if n_a:
        blocks += [Block(name, "attn", fi * fo, n_a, (fi, fo)) for name, fi, fo in
                   (("q_proj", h, a * hd), ("k_proj", h, kv * hd), ("v_proj", h, kv * hd), ("o_proj", a * hd, h))]
    if n_f:
        bias = bool(c.get("mlp_bias"))
        blocks += [Block("mlp.up_proj", "mlp", h * i, n_f, (h, i)), Block("mlp.down_proj", "mlp", i * h, n_f, (i, h))]
        if bias:
            blocks.append(Block("mlp.bias", "bias", i + h, n_f))
    blocks += [Block("norm", "norm", h, n), Block("norm_f", "norm", h, 1, None, 1.0, "model")] + _output(h, v, tie)
    act = _t.activation(c.get("mlp_hidden_act") or "relu2", where)
    # NemotronHRMSNorm multiplies the fp32 weight into the fp32 normalized value (weight.to(float32) * x) and
    # casts afterwards: the whole norm runs in fp32 (saved-tensor listing: fp32 input and normalized value)
    traits = Traits(norm_dtype="fp32", activation=act, mlp="plain", attention=_t.attention_kind(a, kv, False),
                    position="none", layer_norms=1, partial_rotary=0.0, rope_theta=None,
                    mlp_bias=bool(c.get("mlp_bias")), norm_eps=c.get("layer_norm_epsilon"),
                    dropout=Dropout(attention=_t.probability(c, "attention_dropout")))
    ssm = SSMShape(variant="mamba2", d_inner=d, d_state=n_state, d_conv=conv, n_groups=groups, num_heads=heads,
                   head_dim=phd, chunk_size=int(c.get("mamba_chunk_size") or c.get("chunk_size") or 128),
                   residual_fp32=bool(c.get("residual_in_fp32", False)))
    return _ssm_fields(h=h, n=n, v=v, tie=tie, max_position=c.get("max_position_embeddings") or 0, blocks=blocks,
                       traits=traits, ssm=ssm, mixers=kinds, a=a if n_a else 0, kv=kv if n_a else 0,
                       d=hd if n_a else 0, i=i if n_f else 0)


BUILDERS = {"mamba": mamba, "falcon_mamba": mamba, "mamba2": mamba2, "jamba": jamba, "nemotron_h": nemotron_h}

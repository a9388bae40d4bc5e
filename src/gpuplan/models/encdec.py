"""Encoder-decoder family: T5 v1.0, T5 v1.1 / Flan-T5 and mT5 (transformers models/t5/modeling_t5.py,
models/mt5/modeling_mt5.py, transformers 5.24).

Shapes, per layer (h = d_model, a = num_heads, d = d_kv, i = d_ff), all linears without bias:
* encoder layer (`num_layers` of them): self-attention q, k, v (h x a·d) and o (a·d x h); the MLP
  (`feed_forward_proj`: "relu" = wi, wo; "gated-gelu" = wi_0, wi_1, wo); two T5LayerNorms (RMS, weight only).
* decoder layer (`num_decoder_layers`, default num_layers): self-attention as above, cross-attention
  (EncDecAttention) q, o over the decoder stream and k, v over the encoder output, the MLP, three norms.
* the first layer of each stack holds the relative position bias (relative_attention_num_buckets x a);
  a final norm per stack; one `shared` embedding (V x h) for both stacks; lm_head (h x V).

The lm_head: T5 v1.0 checkpoints tie it to `shared` and scale the decoder output by h^-0.5; v1.1,
Flan-T5 and mT5 configs say `tie_word_embeddings: false` and their checkpoints store their own
`lm_head.weight` (V x h). transformers 5.x's T5Config/MT5Config force `tie_word_embeddings = True`
(configuration_t5.py __post_init__), so a model built from the config there has one matrix fewer than the
checkpoint; gpuplan counts the checkpoint's (tests/test_models_encdec.py states the difference).

Block names follow the Llama-style names the LoRA map knows (q_proj, gate_proj ...) with the stack as a
prefix; HF's names are q/k/v/o, wi_0/wi_1/wi, wo. `Block.stream` says which tokens a linear runs over:
"encoder" (input tokens), "decoder" (target tokens) or "cross_kv" (the cross-attention k/v projections,
over the input tokens once per sequence).
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError
from . import traits as _t
from .spec import Block, _positive
from .traits import Dropout, Traits

def _act(c: dict, where: str) -> tuple[bool, str]:
    """(gated, activation) from feed_forward_proj: "relu" | "gated-gelu" | "<act>" | "gated-<act>".
    T5Config maps "gated-gelu" to gelu_new (the tanh approximation)."""
    proj = str(c.get("feed_forward_proj") or "relu")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise InputError(f"model config {where}", f"feed_forward_proj '{proj}' is not 'ACT' or 'gated-ACT'.",
                         "use 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1, Flan-T5, mT5).")
    gated = parts[0] == "gated"
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    return gated, _t.activation(act, where)


def _stack(prefix: str, stream: str, h: int, inner: int, i: int, n: int, gated: bool) -> list[Block]:
    def lin(name, kind, fin, fout, s=stream):
        return Block(f"{prefix}.{name}", kind, fin * fout, n, (fin, fout), stream=s)
    out = [lin("q_proj", "attn", h, inner), lin("k_proj", "attn", h, inner), lin("v_proj", "attn", h, inner),
           lin("o_proj", "attn", inner, h)]
    if gated:
        out += [lin("mlp.gate_proj", "mlp", h, i), lin("mlp.up_proj", "mlp", h, i)]
    else:
        out += [lin("mlp.fc1", "mlp", h, i)]
    out.append(lin("mlp.down_proj" if gated else "mlp.fc2", "mlp", i, h))
    return out


def t5(c: dict, where: str) -> dict[str, Any]:
    """T5 / mT5 encoder-decoder (see the module docstring)."""
    h, a = _positive(c, "d_model", where), _positive(c, "num_heads", where)
    d, i, v = _positive(c, "d_kv", where), _positive(c, "d_ff", where), _positive(c, "vocab_size", where)
    ne = _positive(c, "num_layers", where)
    nd = c.get("num_decoder_layers")
    nd = ne if nd is None else _positive(c, "num_decoder_layers", where)
    buckets = _positive(c, "relative_attention_num_buckets", where)
    gated, act = _act(c, where)
    tie = c.get("tie_word_embeddings") is not False
    inner = a * d
    blocks = [Block("shared", "embedding", v * h, 1, None, 1.0, "model")]
    blocks += _stack("encoder", "encoder", h, inner, i, ne, gated)
    blocks += [Block("encoder.layer_norms", "norm", 2 * h, ne, stream="encoder"),
               Block("encoder.relative_attention_bias", "other", buckets * a, 1, stream="encoder"),
               Block("encoder.final_layer_norm", "norm", h, 1, None, 1.0, "model", stream="encoder")]
    blocks += _stack("decoder", "decoder", h, inner, i, nd, gated)
    blocks += [Block("decoder.cross.q_proj", "attn", h * inner, nd, (h, inner)),
               Block("decoder.cross.k_proj", "attn", h * inner, nd, (h, inner), stream="cross_kv"),
               Block("decoder.cross.v_proj", "attn", h * inner, nd, (h, inner), stream="cross_kv"),
               Block("decoder.cross.o_proj", "attn", inner * h, nd, (inner, h)),
               Block("decoder.layer_norms", "norm", 3 * h, nd),
               Block("decoder.relative_attention_bias", "other", buckets * a, 1),
               Block("decoder.final_layer_norm", "norm", h, 1, None, 1.0, "model")]
    if tie:
        blocks.append(Block("lm_head(tied)", "lm_head", 0, 1, (h, v), 1.0, "model"))
    else:
        blocks.append(Block("lm_head", "lm_head", v * h, 1, (h, v), 1.0, "model"))
    p = _t.probability(c, "dropout_rate")
    traits = Traits(norm_dtype="fp32_upcast", activation=act, mlp=_t.mlp_kind(gated, act), attention="mha",
                    position="relative", partial_rotary=0.0, norm_eps=float(c.get("layer_norm_epsilon") or 1e-6),
                    dropout=Dropout(attention=p, residual=p, embedding=p), relative_attention_buckets=buckets,
                    encdec_layer="t5")
    return dict(hidden_size=h, num_layers=nd, encoder_layers=ne, num_heads=a, num_kv_heads=a, head_dim=d,
                v_head_dim=d, vocab_size=v, intermediate_size=i, tie_embeddings=tie, gated_mlp=gated, norm="rms",
                # relative position buckets have no trained length limit; T5 was pre-trained on 512 input tokens
                max_position=int(c.get("n_positions") or 512), layer_windows=(None,) * nd, blocks=tuple(blocks),
                traits=traits)


BUILDERS = {"t5": t5, "mt5": t5}

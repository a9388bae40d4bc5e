"""estimate/activations.py, piece by piece: each sub-function against numbers worked out by hand
from the model's shape (config.json) and the tensors the docstrings say are saved."""
import ast
import inspect
from dataclasses import replace

import pytest

from gpuplan.estimate import activations as A
from gpuplan.estimate.activations import ActivationSetup
from gpuplan.models import get_model

L1B = get_model("llama-3.2-1b")          # h 2048, a 32, kv 8, d 64, i 8192
GPT2 = get_model("gpt2")                 # h 768, a 12, i 3072, resid/embd dropout 0.1, gelu_new
F7 = get_model("falcon-7b-instruct")     # h 4544, a 71, kv 1, d 64
NEOX = get_model("gpt-neox-20b")         # h 6144, a 64, d 96, i 24576, gelu_fast
V3 = get_model("deepseek-v3")            # h 7168, a 128, d_qk 192, d_v 128, kv_lora 512, q_lora 1536
G2 = get_model("gemma-2-2b-it")          # h 2304, a 8, kv 4, d 256, i 9216
Q3 = get_model("qwen3-0.6b")             # h 1024, a 16, kv 8, d 128
MIX = get_model("mixtral-8x7b-v0.1")     # h 4096, k 2 of 8 experts

HF = ActivationSetup()


def test_shapes_used_below():
    assert (L1B.hidden_size, L1B.num_heads, L1B.num_kv_heads, L1B.head_dim, L1B.intermediate_size) == \
        (2048, 32, 8, 64, 8192)
    assert (F7.hidden_size, F7.num_heads, F7.num_kv_heads, F7.head_dim) == (4544, 71, 1, 64)
    assert (V3.num_heads, V3.head_dim, V3.v_head_dim, V3.kv_lora_rank, V3.q_lora_rank) == (128, 192, 128, 512, 1536)


# ---- the whole layer -------------------------------------------------------------------------

def test_llama_layer_matches_design_formula():
    """DESIGN §4: 16h + 4ad + 4kv·d + 8i + 4a bytes per token per layer (HF, flash, bf16)."""
    la = A.layer_activations(L1B, HF)
    h, a, kv, d, i = 2048, 32, 8, 64, 8192
    assert la.total == 16 * h + 4 * a * d + 4 * kv * d + 8 * i + 4 * a == 108672
    assert la.replicated == 32768 and la.sharded == 75904 and la.score_bytes == 0.0


def test_layer_is_the_sum_of_its_pieces():
    for m in (L1B, GPT2, F7, NEOX, V3, G2, Q3, MIX):
        for s in (HF, ActivationSetup(autocast=True, residual_bytes=4),
                  ActivationSetup(frozen_base=True, lora_targets=frozenset("qv"), lora_rank=8)):
            i_eff = A._mlp_mix(m)[1]
            rep = A.norm_bytes(m, s) + A.attention_bytes(m, s)[0] + A._mlp_mix(m)[0] * A.moe_routing_bytes(m, s) \
                + A.linear_input_bytes(m, s, i_eff)[0]
            shard = A.qk_norm_bytes(m) + A.attention_bytes(m, s)[1] + A.mlp_bytes(m, s, i_eff) \
                + A.linear_input_bytes(m, s, i_eff)[1]
            la = A.layer_activations(m, s)
            assert la.replicated == pytest.approx(rep, rel=1e-12) and la.sharded == pytest.approx(shard, rel=1e-12)


def test_megatron_layer():
    la = A.layer_activations(L1B, ActivationSetup(framework="megatron"))
    assert la.replicated == 4 * 2 * 2048
    assert la.sharded == 2 * (2048 + 512 + 512 + 2048) + 4 * 32 + 3 * 2 * 8192
    assert A.layer_activations(L1B, ActivationSetup(framework="megatron", attention="eager")).score_bytes == 6.0


# ---- norms -----------------------------------------------------------------------------------

@pytest.mark.parametrize("model,setup,expected", [
    (L1B, HF, 6.0),                                                    # fp32 upcast + 16-bit normalized
    (L1B, ActivationSetup(frozen_base=True), 4.0),                     # frozen weight: the upcast only
    (L1B, ActivationSetup(residual_bytes=4, autocast=True), 8.0),      # fp32 residual stream
    (L1B, ActivationSetup(compile=True), 2.0),                         # fused kernel keeps its input
    (L1B, ActivationSetup(framework="litgpt"), 8.0),
    (G2, HF, 8.0),                                                     # Gemma: whole norm in fp32
    (GPT2, HF, 2.0),                                                   # torch LayerNorm keeps its input
    (GPT2, ActivationSetup(framework="litgpt"), 6.0),
])
def test_norm_bytes_per_element(model, setup, expected):
    assert A._norm_bytes(model, setup) == expected


def test_norm_bytes_per_layer():
    assert A.norm_bytes(L1B, HF) == 2 * 6 * 2048
    assert A.norm_bytes(G2, HF) == 4 * 8 * 2304                       # sandwich: two extra post-norms
    # GPT-2: two LayerNorm inputs (2 bytes), mean + rstd (2 x 2 x 2 bytes), two residual dropout masks
    assert A.norm_bytes(GPT2, HF) == 2 * 2 * 768 + 8 + 2 * 768


def test_sandwich_placement_is_what_adds_the_post_norms():
    pre = replace(G2, traits=replace(G2.traits, norm_placement="pre"))
    assert A.norm_bytes(G2, HF) - A.norm_bytes(pre, HF) == 2 * 8 * 2304


def test_dropout_masks_follow_the_dropout_trait():
    assert A.dropout_mask_bytes(GPT2) == 2 * 768 and A.embedding_dropout_bytes(GPT2) == 768
    assert A.dropout_mask_bytes(L1B) == 0 and A.embedding_dropout_bytes(L1B) == 0
    no_drop = replace(GPT2, traits=replace(GPT2.traits, dropout=replace(GPT2.traits.dropout, residual=0.0)))
    assert A.dropout_mask_bytes(no_drop) == 0 and A.embedding_dropout_bytes(no_drop) == 768


def test_qk_norm_bytes():
    assert A.qk_norm_bytes(Q3) == 6 * (16 + 8) * 128
    assert A.qk_norm_bytes(L1B) == 0
    assert A.qk_norm_bytes(get_model("olmo-2-1124-7b")) == 6 * (32 + 32) * 128


# ---- attention -------------------------------------------------------------------------------

def test_attention_bytes_gqa():
    assert A.attention_bytes(L1B, HF) == (0.0, 2 * (2048 + 512 + 512 + 2048) + 4 * 32)


def test_attention_torchtune_expands_kv_heads():
    assert A.attention_bytes(L1B, ActivationSetup(framework="torchtune"))[1] == 2 * 4 * 2048 + 4 * 32


def test_broadcast_kv_math_path_only_under_hf_sdpa_or_flash():
    # a model whose HF code hands SDPA one un-expanded K/V head with a mask (Falcon-7B up to transformers 5.24)
    import dataclasses
    mqa = dataclasses.replace(F7, traits=dataclasses.replace(F7.traits, sdpa_broadcast_kv=True))
    assert A.math_path_attention(mqa, HF) and A.math_path_attention(mqa)
    assert not A.math_path_attention(mqa, ActivationSetup(attention="eager"))
    assert not A.math_path_attention(mqa, ActivationSetup(framework="litgpt"))
    assert not A.math_path_attention(F7, HF)              # transformers 5.25: the shared SDPA interface
    assert not A.math_path_attention(get_model("falcon-40b"), HF)
    # fp32 q (a·d), fp32 k and v (one head), 16-bit output (a·d)
    assert A.attention_bytes(mqa, HF) == (0.0, 4 * 71 * 64 + 4 * 1 * 128 + 2 * 71 * 64)
    assert A.score_bytes(mqa, HF) == 4.0
    assert A.attention_bytes(F7, ActivationSetup(attention="eager"))[1] == 2 * (2 * 4544 + 2 * 64) + 4 * 71
    assert A.score_bytes(F7, ActivationSetup(attention="eager")) == 6.0


def test_fused_qkv_output_kept_adds_q_and_k_again():
    base = 2 * (4 * 6144) + 4 * 64
    assert A.attention_bytes(NEOX, HF)[1] == base + 2 * (2 * 6144)
    off = replace(NEOX, traits=replace(NEOX.traits, fused_qkv_output_kept=False))
    assert A.attention_bytes(off, HF)[1] == base


def test_mla_attention_bytes():
    rep, shard = A.mla_attention_bytes(V3, HF)
    assert shard == 2 * (2 * 128 * 192 + 128 * (128 + 128) + 128 * 128) + 4 * 128 == 197120
    assert rep == (6 + 2) * (512 + 1536)
    assert A.attention_bytes(V3, HF) == (rep, shard)
    assert A.mla_attention_bytes(V3, ActivationSetup(frozen_base=True))[0] == 4 * (512 + 1536)
    lite = get_model("deepseek-v2-lite")             # no query compression: only kv_a_layernorm
    assert A.mla_attention_bytes(lite, HF)[0] == 8 * 512


def test_score_bytes():
    assert A.score_bytes(L1B, HF) == 0.0
    assert A.score_bytes(L1B, ActivationSetup(attention="eager")) == 6.0
    assert A.score_bytes(L1B, ActivationSetup(attention="sdpa")) == 0.0


# ---- MLP and MoE -----------------------------------------------------------------------------

def test_mlp_bytes():
    assert A.mlp_bytes(L1B, HF, 8192) == 3 * 2 * 8192
    assert A.mlp_bytes(L1B, ActivationSetup(compile=True), 8192) == 2 * 2 * 8192
    assert A.mlp_bytes(GPT2, HF, 3072) == 4 * 2 * 3072            # gelu_new keeps 5 with fc2's input
    assert A.mlp_bytes(NEOX, HF, 24576) == 7 * 2 * 24576          # gelu_fast keeps 8
    torch_gelu = replace(GPT2, traits=replace(GPT2.traits, activation="gelu"))
    assert A.mlp_bytes(torch_gelu, HF, 3072) == 1 * 2 * 3072


def test_mlp_mix():
    assert A._mlp_mix(L1B) == (0.0, 8192.0)
    frac, i_eff = A._mlp_mix(V3)                     # 58 of 61 MoE layers; 8 routed + 1 shared x 2048
    assert frac == pytest.approx(58 / 61) and i_eff == pytest.approx(18432)
    assert A._mlp_mix(get_model("qwen3-30b-a3b")) == (1.0, 768 * 8)


def test_moe_routing_bytes():
    assert A.moe_routing_bytes(L1B, HF) == 0.0
    # torchtune: k gathered inputs + fp32 logits and probabilities
    assert A.moe_routing_bytes(MIX, ActivationSetup(framework="torchtune")) == 2 * 2 * 4096 + 8 * 8
    # HF also keeps each routed copy's expert output
    assert A.moe_routing_bytes(MIX, HF) == 2 * (2 * 2 * 4096) + 8 * 8
    # DeepSeek's fp32 gate input
    assert A.moe_routing_bytes(V3, HF) == 2 * (8 * 2 * 7168) + 8 * 256 + 4 * 7168
    no_fp32 = replace(V3, traits=replace(V3.traits, router_fp32=False))
    assert A.moe_routing_bytes(V3, HF) - A.moe_routing_bytes(no_fp32, HF) == 4 * 7168


# ---- linear inputs and adapters --------------------------------------------------------------

def test_base_input_bytes():
    assert A.base_input_bytes(L1B, HF, "attn_in", 2048) == 2 * 2048
    assert A.base_input_bytes(L1B, HF, "o_in", 2048) == 0.0
    assert A.base_input_bytes(L1B, HF, "down_in", 8192) == 2 * 8192
    auto = ActivationSetup(autocast=True, residual_bytes=4)
    assert A.base_input_bytes(L1B, auto, "attn_in", 2048) == 3 * 2 * 2048    # q, k, v each cast
    assert A.base_input_bytes(L1B, auto, "mlp_in", 2048) == 2 * 2 * 2048     # gate, up
    assert A.base_input_bytes(GPT2, auto, "attn_in", 768) == 1 * 2 * 768     # fused c_attn: one cast
    assert A.base_input_bytes(L1B, ActivationSetup(frozen_base=True), "attn_in", 2048) == 0.0
    assert A.base_input_bytes(L1B, ActivationSetup(frozen_base=True, base_saves_input=True), "attn_in", 2048) == 4096


def _lora(**kw):
    return ActivationSetup(frozen_base=True, lora_targets=frozenset(kw.pop("targets", "qv")), lora_rank=16, **kw)


def test_adapter_input_bytes():
    rank_part = 2 * 2 * 16                                   # two adapters, rank 16, 2 bytes
    assert A.adapter_input_bytes(L1B, _lora(), "attn_in", 2048) == 2 * 2048 + rank_part
    assert A.adapter_input_bytes(L1B, _lora(), "o_in", 4096) == 0.0        # o not targeted
    assert A.adapter_input_bytes(L1B, _lora(lora_copy_per_target=True), "attn_in", 2048) == 2 * 2 * 2048 + rank_part
    assert A.adapter_input_bytes(L1B, _lora(lora_copy_per_target=True, lora_dropout=True), "attn_in", 2048) \
        == 2 * 3 * 2048 + rank_part
    assert A.adapter_input_bytes(L1B, _lora(lora_dropout=True), "attn_in", 2048) == 2 * 3 * 2048 + rank_part
    # a 4-bit base that saves its input shares it with 16-bit adapters
    assert A.adapter_input_bytes(L1B, _lora(base_saves_input=True), "attn_in", 2048) == 0.0
    assert A.adapter_input_bytes(L1B, _lora(base_saves_input=True, lora_dropout=True), "attn_in", 2048) > 0
    # fused c_attn: one LoRA module for q, k and v
    assert A.adapter_input_bytes(GPT2, _lora(targets="qkv", lora_copy_per_target=True), "attn_in", 768) \
        == 1 * 2 * 768 + 3 * 2 * 16
    # not frozen: no adapters
    assert A.adapter_input_bytes(L1B, HF, "attn_in", 2048) == 0.0


def test_linear_input_bytes_split():
    assert A.linear_input_bytes(L1B, HF, 8192) == (2 * 2048 + 2 * 2048, 2 * 8192)


# ---- structure -------------------------------------------------------------------------------

def test_no_function_in_activations_is_longer_than_60_lines():
    tree = ast.parse(inspect.getsource(A))
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > 60]
    assert long == []

"""estimate/flops.py against FLOP counts worked out by hand from the config shapes."""
import pytest

from gpuplan.estimate.flops import (TrainingFlops, attention_flops_per_token_forward, lora_adapter_params,
                                    matmul_params_active, training_flops_per_token)
from gpuplan.models import get_model

L1B = get_model("llama-3.2-1b")   # h 2048, a 32, kv 8, d 64, i 8192, 16 layers, vocab 128256, tied

# per layer: q 2048², k and v 2048·512, o 2048², gate/up/down 3·2048·8192
L1B_LAYER_MATMUL = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192
L1B_MATMUL = 16 * L1B_LAYER_MATMUL + 128256 * 2048       # + the tied lm_head's matmul


def test_matmul_params_active_counts_tied_head():
    assert L1B_LAYER_MATMUL == 60817408
    assert matmul_params_active(L1B) == L1B_MATMUL == 1235746816
    # the tied head has no parameters of its own: params_total minus the norms equals the matmul count
    assert L1B.params_total - (16 * 2 * 2048 + 2048) == L1B_MATMUL


def test_matmul_params_active_weights_routed_experts_by_top_k():
    mix = get_model("mixtral-8x7b-v0.1")        # 32 layers, 8 experts, top-2, expert MLP 3·4096·14336
    per_expert = 3 * 4096 * 14336
    expert_part = 32 * 8 * per_expert
    full_expert_active = 32 * 2 * per_expert
    assert matmul_params_active(mix) - full_expert_active == pytest.approx(
        sum(b.linear[0] * b.linear[1] * b.count for b in mix.blocks if b.linear and b.kind != "expert"))
    assert expert_part > full_expert_active


def test_attention_flops_causal_full_attention():
    # 2 · a · (d_qk + d_v) per (query, key) pair, (s+1)/2 keys per query, 16 layers
    assert attention_flops_per_token_forward(L1B, 2048) == 2 * 32 * 128 * 16 * 2049 / 2


def test_attention_flops_non_causal():
    assert attention_flops_per_token_forward(L1B, 2048, causal=False) == 2 * 32 * 128 * 16 * 2048


def test_attention_flops_sliding_window():
    m = get_model("mistral-7b-v0.1")            # 32 layers, a 32, d 128, window 4096 on every layer
    s, w = 8192, 4096
    ctx = (w * (w + 1) / 2 + (s - w) * w) / s   # 3072.25 keys per query
    assert ctx == 3072.25
    assert attention_flops_per_token_forward(m, s) == 2 * 32 * 256 * 32 * ctx
    # below the window it is plain causal attention
    assert attention_flops_per_token_forward(m, 1024) == 2 * 32 * 256 * 32 * 1025 / 2


def test_lora_adapter_params_all_linear():
    # r · (in + out) per decoder linear: q 4096, k 2560, v 2560, o 4096, gate/up/down 10240 each
    per_layer = 4096 + 2560 + 2560 + 4096 + 3 * 10240
    assert lora_adapter_params(L1B, 16) == 16 * per_layer * 16 == 11272192


def test_training_flops_full():
    mm, attn = 2 * L1B_MATMUL, 2 * 32 * 128 * 16 * 2049 / 2
    f = training_flops_per_token(L1B, 2048)
    assert isinstance(f, TrainingFlops)
    assert f.model == f.hardware == 3 * (mm + attn) == 7817330688
    assert (f.matmul_forward, f.attention_forward) == (mm, attn)


@pytest.mark.parametrize("recompute,extra", [("none", 0), ("selective", 1), ("full", 2)])
def test_training_flops_recompute_counts_in_hfu_only(recompute, extra):
    mm, attn = 2 * L1B_MATMUL, 2 * 32 * 128 * 16 * 2049 / 2
    f = training_flops_per_token(L1B, 2048, recompute=recompute)
    assert f.model == 3 * (mm + attn)
    assert f.hardware - f.model == {0: 0.0, 1: attn, 2: mm + attn}[extra]


def test_training_flops_lora_has_no_weight_gradient_matmuls():
    mm, attn = 2 * L1B_MATMUL, 2 * 32 * 128 * 16 * 2049 / 2
    f = training_flops_per_token(L1B, 2048, method="lora", lora_rank=16)
    assert f.model == 2 * mm + 3 * attn + 6 * 11272192
    assert training_flops_per_token(L1B, 2048, method="qlora", lora_rank=16).model == f.model


def test_training_flops_rejects_unknown_recompute():
    with pytest.raises(ValueError, match="recompute"):
        training_flops_per_token(L1B, 2048, recompute="partial")


def test_flops_per_token_forward_is_matmul_plus_attention():
    """Regression: ModelSpec.flops_per_token_forward summed parameter counts, so a tied lm_head
    (no parameters of its own) lost its 2·h·vocab FLOPs per token."""
    assert L1B.flops_per_token_forward(2048) == 2 * L1B_MATMUL + attention_flops_per_token_forward(L1B, 2048)

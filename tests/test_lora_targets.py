"""Which linears carry LoRA adapters on a MoE (estimate/lora_targets.py): peft's module targeting against
transformers 5's fused routed experts. Expected counts are hand arithmetic from the configs; the peft cross-check
builds the real modules (meta device) and counts what peft 0.21 makes trainable."""
import copy

import pytest

from gpuplan.estimate.lora_targets import _lora_targets, lora_params, peft_fused_experts, scenario_lora_targets
from gpuplan.models import get_model
from gpuplan.scenario import Scenario

R = 16
# the 4-layer Qwen3-MoE of validation/traces.json ("qwen3-moe cut 4 layers lora s2048")
QWEN3_MOE_4L = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
                "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                "tie_word_embeddings": False, "mlp_only_layers": [], "decoder_sparse_step": 1,
                "norm_topk_prob": True, "rope_theta": 1e6}
# attention adapters per layer: q 2048->4096, k and v 2048->512, o 4096->2048
QWEN3_ATTN = R * ((2048 + 4096) + 2 * (2048 + 512) + (4096 + 2048))


def _scn(model, framework="hf", tool=None, targets="all-linear"):
    d = {"model": model, "task": "finetune", "framework": framework, "hardware": {"gpu": "h100-sxm", "count": 1},
         "train": {"method": "lora", "lora_rank": R, "lora_targets": targets, "seq_len": 2048}}
    if tool:
        d["tool"] = tool
    return Scenario.model_validate(d)


def test_remapped_moe_all_linear_adapts_experts_fused_gate_up_at_2r_and_router():
    # peft 0.21's v4->v5 remap: experts.gate_up_proj at rank 2r (A 2r x h, B 2i x 2r), down_proj at r, the router
    # weight (h -> E) at r. Per layer: 128 x [2r*2048 + 2*768*2r + r*(768 + 2048)] + r*(2048 + 128) + attention.
    experts = 128 * (2 * R * 2048 + 2 * 768 * 2 * R + R * (768 + 2048))
    router = R * (2048 + 128)
    expected = 4 * (experts + router + QWEN3_ATTN)
    assert expected == 83_042_304          # what peft 0.21.2 made trainable on this model (trace of 2026-12-04)
    m = get_model(QWEN3_MOE_4L)
    assert lora_params(m, R, scenario_lora_targets(_scn(QWEN3_MOE_4L), m)) == expected


def test_qwen2_moe_all_linear_leaves_routed_experts_alone():
    # Qwen1.5-MoE-A2.7B (qwen2_moe): peft does not remap this type, so all-linear adapts attention (h 2048, MHA),
    # the shared expert (2048 <-> 5632) and its nn.Linear(h, 1) gate; the 60 fused experts and the router carry none
    m = get_model("qwen1.5-moe-a2.7b")
    per_layer = R * (4 * (2048 + 2048) + 2 * (2048 + 5632) + (5632 + 2048) + (2048 + 1))
    assert lora_params(m, R, scenario_lora_targets(_scn("qwen1.5-moe-a2.7b"), m)) == 24 * per_layer


def test_unsloth_and_lists_resolve_as_stated():
    m = get_model("qwen1.5-moe-a2.7b")
    # not a peft-on-transformers-5 stack: routed experts adapted as the dense MLPs (rank r each)
    assert not peft_fused_experts(_scn("qwen1.5-moe-a2.7b", tool="unsloth"), m)
    routed = 24 * 60 * R * (3 * (2048 + 1408))
    hf = lora_params(m, R, scenario_lora_targets(_scn("qwen1.5-moe-a2.7b"), m))
    # Unsloth writes its seven projection names for all-linear: the shared expert's nn.Linear(h, 1) gate is not one
    assert lora_params(m, R, scenario_lora_targets(_scn("qwen1.5-moe-a2.7b", tool="unsloth"), m)) == \
        hf + routed - 24 * R * (2048 + 1)
    # an attention-only list never reaches experts or routers, remapped type or not
    q3 = get_model(QWEN3_MOE_4L)
    assert lora_params(q3, R, _lora_targets(["q_proj", "v_proj"], True, True)) == \
        4 * R * ((2048 + 4096) + (2048 + 512))


def test_dense_model_unchanged_by_moe_rules():
    m = get_model("llama-3.2-1b")
    a = lora_params(m, R, scenario_lora_targets(_scn("llama-3.2-1b"), m))
    b = lora_params(m, R, _lora_targets("all-linear"))
    assert a == b == 16 * R * (2 * (2048 + 2048) + 2 * (2048 + 512) + 3 * (2048 + 8192))


@pytest.mark.parametrize("cfg_name", ["qwen3_moe", "qwen2_moe"])
def test_counts_match_peft_on_real_modules(cfg_name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("fused experts are transformers 5")
    if cfg_name == "qwen3_moe":
        cfg = copy.deepcopy(QWEN3_MOE_4L)
        hf_cfg = transformers.Qwen3MoeConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    else:
        cfg = {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 256,
               "intermediate_size": 512, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 384,
               "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "vocab_size": 1024, "max_position_embeddings": 2048,
               "hidden_act": "silu", "tie_word_embeddings": False}
        hf_cfg = transformers.Qwen2MoeConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=R, target_modules="all-linear"))
    trainable = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    spec = get_model(cfg)
    assert lora_params(spec, R, scenario_lora_targets(_scn(cfg), spec)) == trainable

"""Families added for issue 15: GPT-J, BLOOM, phi-1.5/2, Gemma 1, Qwen1.5/Qwen2-MoE, StableLM,
Cohere/Command-R, Granite, Nemotron.

Counts against transformers on the meta device are in tests/test_models_meta.py (every bundled config).
Here: published totals (each with its source) and the traits, written out by hand from the
transformers modelling files and the config.json values.
"""
import pytest

from gpuplan.models import get_model, list_models

# name: (published total parameters, source)
PUBLISHED = {
    # BLOOM model cards list the exact count ("Parameters: 559,214,592" ... "176,247,271,424")
    "bloom-560m": (559_214_592, "huggingface.co/bigscience/bloom-560m model card"),
    "bloom-1b1": (1_065_314_304, "huggingface.co/bigscience/bloom-1b1 model card"),
    "bloom-1b7": (1_722_408_960, "huggingface.co/bigscience/bloom-1b7 model card"),
    "bloom-3b": (3_002_557_440, "huggingface.co/bigscience/bloom-3b model card"),
    "bloom-7b1": (7_069_016_064, "huggingface.co/bigscience/bloom-7b1 model card"),
    "bloom": (176_247_271_424, "huggingface.co/bigscience/bloom model card"),
    # Gemma technical report (arXiv:2403.08295) Table 2: embedding + non-embedding parameters
    "gemma-2b": (524_550_144 + 1_981_622_272, "Gemma report Table 2"),
    "gemma-7b": (786_825_216 + 7_750_855_680, "Gemma report Table 2"),
    # safetensors totals shown on the Hub model pages
    "phi-2": (2_779_683_840, "huggingface.co/microsoft/phi-2 safetensors total"),
    "phi-1_5": (1_418_270_720, "huggingface.co/microsoft/phi-1_5 safetensors total"),
    "stablelm-3b-4e1t": (2_795_443_200, "huggingface.co/stabilityai/stablelm-3b-4e1t safetensors total"),
    "stablelm-2-1_6b": (1_644_515_328, "huggingface.co/stabilityai/stablelm-2-1_6b safetensors total"),
    "qwen1.5-moe-a2.7b": (14_315_784_192, "huggingface.co/Qwen/Qwen1.5-MoE-A2.7B safetensors total"),
    "c4ai-command-r-v01": (34_980_831_232, "huggingface.co/CohereForAI/c4ai-command-r-v01 safetensors total"),
    "c4ai-command-r-plus": (103_810_674_688, "huggingface.co/CohereForAI/c4ai-command-r-plus safetensors total"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_totals(name):
    assert get_model(name).params_total == PUBLISHED[name][0]


def test_moe_active_counts_match_the_names():
    # Qwen1.5-MoE-A2.7B: "2.7B activated"; Qwen2-57B-A14B: 14B activated (model cards)
    assert abs(get_model("qwen1.5-moe-a2.7b").params_active / 2.7e9 - 1) < 0.01
    assert abs(get_model("qwen2-57b-a14b").params_active / 14.2e9 - 1) < 0.01


def test_gptj_counts_by_hand():
    # n_embd 4096, 28 layers, n_inner 4h, vocab 50400; q/k/v/out without bias; fc_in/fc_out with bias;
    # one LayerNorm per layer + ln_f; untied lm_head with a bias
    h, n, v, i = 4096, 28, 50400, 4 * 4096
    per_layer = 4 * h * h + (h * i + i) + (i * h + h) + 2 * h
    assert get_model("gpt-j-6b").params_total == v * h + n * per_layer + 2 * h + (h * v + v)


# name: partial_rotary, position, layer_norms, parallel_block, norm, norm_dtype, activation, mlp, lm_head_bias
TRAITS = {
    "gpt-j-6b": (0.25, "rope", 1, True, "layernorm", "native", "gelu_new", "plain", True),
    "bloom-7b1": (0.0, "alibi", 2, False, "layernorm", "native", "bloom_gelu", "plain", False),
    "phi-2": (0.4, "rope", 1, True, "layernorm", "native", "gelu_new", "plain", True),
    "gemma-7b": (1.0, "rope", 2, False, "rms", "fp32", "gelu_pytorch_tanh", "geglu", False),
    "stablelm-3b-4e1t": (0.25, "rope", 2, False, "layernorm", "native", "silu", "swiglu", False),
    "stablelm-2-12b": (0.25, "rope", 1, True, "layernorm", "native", "silu", "swiglu", False),
    "c4ai-command-r-v01": (1.0, "rope", 1, True, "layernorm", "fp32_upcast", "silu", "swiglu", False),
    "granite-3.0-8b-instruct": (1.0, "rope", 2, False, "rms", "fp32_upcast", "silu", "swiglu", False),
    "minitron-4b-base": (0.5, "rope", 2, False, "layernorm", "native", "relu2", "plain", False),
    "qwen1.5-7b": (1.0, "rope", 2, False, "rms", "fp32_upcast", "silu", "swiglu", False),
}


@pytest.mark.parametrize("name", sorted(TRAITS))
def test_family_traits(name):
    m = get_model(name)
    t = m.traits
    got = (t.partial_rotary, t.position, t.layer_norms, t.parallel_block, m.norm, t.norm_dtype, t.activation,
           t.mlp, t.lm_head_bias)
    assert got == TRAITS[name]


def test_specific_traits():
    bloom = get_model("bloom-560m")
    assert bloom.traits.eager_attention_only and bloom.traits.embedding_norm and bloom.traits.fused_qkv
    assert bloom.traits.attention_bias and bloom.traits.mlp_bias and bloom.tie_embeddings
    assert get_model("c4ai-command-r-v01").traits.logit_scale == 0.0625
    assert get_model("c4ai-command-r-plus").traits.qk_norm == "per_head"
    assert get_model("granite-3.0-8b-instruct").traits.logit_scale == 1 / 16
    q = get_model("qwen1.5-moe-a2.7b")
    assert q.traits.shared_expert_gate and q.traits.moe_shared_experts == 1 and q.traits.attention_bias
    assert (q.num_experts, q.experts_per_tok, q.moe_intermediate_size, q.shared_expert_intermediate) == (60, 4, 1408, 5632)
    assert get_model("qwen1.5-7b").traits.attention_bias          # Qwen2 q/k/v biases
    assert get_model("minitron-4b-base").num_kv_heads == 8 and get_model("minitron-4b-base").head_dim == 128
    assert get_model("gemma-2b").traits.attention == "mqa"
    # ALiBi models have no rotary part and no rope_theta
    assert get_model("bloom").traits.rope_theta is None


def test_registry_size_and_sources():
    entries = list_models()
    assert len(entries) >= 120
    assert all(e.source for e in entries)
    families = {get_model(e.name).family for e in entries}
    for fam in ("gptj", "bloom", "phi", "gemma", "qwen2_moe", "stablelm", "cohere", "granite", "nemotron"):
        assert fam in families

"""The bundled 2025 models (scripts/models_2025_configs.py) against their published parameter counts: the figures
come from the model cards and from a copy of the checkpoint's safetensors index, not from gpuplan."""
import pytest

from gpuplan.models import get_model

# Qwen3-Coder-30B-A3B-Instruct: model.safetensors.index.json total_size 61,064,245,248 bytes, all bf16
# (github.com/ztxz16/fastllm Qwen3-Coder-30B-A3B-Instruct/ @f8f04c33abb6) -> 2 bytes per parameter
QWEN3_CODER_30B_INDEX_BYTES = 61_064_245_248


def test_qwen3_coder_30b_equals_its_safetensors_index():
    m = get_model("qwen3-coder-30b-a3b-instruct")
    assert m.params_total * 2 == QWEN3_CODER_30B_INDEX_BYTES
    assert get_model("qwen3-coder-30b-a3b").params_total == m.params_total   # "-instruct" alias


# model cards: (total, unit) as printed; a count matches when it is within 1 % of the card's rounded figure
CARDS = {
    "qwen3-coder-480b-a35b-instruct": 480e9,      # "480B total parameters, 35B activated"
    "kimi-k2-instruct": 1.0e12,                   # "1 trillion total parameters"
    "deepseek-v3.1": 671e9,                       # "671B total, 37B activated" (main model, as deepseek-v3)
    "qwen3-next-80b-a3b-thinking": 80e9,          # "80B in total and 3B activated"
    "llama-4-maverick-17b-128e-instruct": 400e9,  # "17B (Activated) 400B (Total)"
}


@pytest.mark.parametrize("name,card", sorted(CARDS.items()))
def test_totals_match_the_model_cards(name, card):
    m = get_model(name)
    tol = 0.03 if card >= 1e12 else 0.01          # "1 trillion" is printed to one significant digit
    assert abs(m.params_total - card) <= tol * card


@pytest.mark.parametrize("name", ["llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct"])
def test_llama4_active_is_the_cards_17b(name):
    m = get_model(name)
    assert m.is_moe and round(m.params_active / 1e9) == 17


def test_kimi_k2_reads_as_deepseek_v3():
    m = get_model("kimi-k2-instruct")
    assert m.model_type == "deepseek_v3" and m.config["model_type"] == "kimi_k2"
    # 384 routed experts, 8 per token, 1 shared, as its config.json says
    assert m.config["n_routed_experts"] == 384 and m.config["num_experts_per_tok"] == 8

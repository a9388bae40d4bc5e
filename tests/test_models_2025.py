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


# Hub "Model size" figures, printed to 3 significant digits: (name, figure, half of its last digit)
HUB_SIZES = [
    ("mistral-small-3.1-24b-instruct-2503", 23.6e9, 0.05e9),   # mrfakename/mistral-small-3.1-24b-instruct-2503-hf (text only)
    ("ministral-8b-instruct-2410", 8.02e9, 0.005e9),           # nm-testing/Ministral-8B-Instruct-2410-FP8-dynamic
]


@pytest.mark.parametrize("name,size,half_digit", HUB_SIZES)
def test_hub_model_sizes(name, size, half_digit):
    assert abs(get_model(name).params_total - size) <= half_digit


def test_falcon3_7b_fills_its_bf16_shards():
    # huggingface.co/tiiuae/Falcon3-7B-Instruct/tree/main: shards of 4.94 GB, 4.94 GB, 4.22 GB (each +-0.005 GB)
    # and 805 MB (+-0.5 MB), bf16 = 2 bytes per parameter
    lo = (4.935 + 4.935 + 4.215) * 1e9 + 804.5e6
    hi = (4.945 + 4.945 + 4.225) * 1e9 + 805.5e6
    assert lo <= 2 * get_model("falcon3-7b-instruct").params_total <= hi


# model cards that print a whole number of billions: the count rounds to it
WHOLE_BILLIONS = [("yi-1.5-34b-chat", 34), ("mistral-large-instruct-2411", 123), ("olmo-2-0325-32b", 32),
                  ("falcon3-7b-instruct", 7), ("ministral-8b-instruct-2410", 8)]


@pytest.mark.parametrize("name,billions", WHOLE_BILLIONS)
def test_counts_round_to_the_cards_billions(name, billions):
    assert round(get_model(name).params_total / 1e9) == billions

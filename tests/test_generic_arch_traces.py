"""The `--trace` pass of scripts/generic_arch_table.py on a CI-sized sample: default configs of architectures
read by the generic meta-device reader, cut to a few layers, whose estimated peaks must agree with a
fake-tensor trace (an independent measurement: what PyTorch allocates) within 5 % for full bf16 fine-tuning
and for HF inference. The full table is docs/generic-architectures.md.

Chosen for diversity: GPT-BigCode (multi-query attention, learned positions, GELU MLP), BioGPT (LayerNorm,
scaled embeddings), AFMoE (mixture of experts, sliding/full layer_types), Qwen3-Next (Gated DeltaNet linear
attention hybrid with MoE).
"""
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from generic_arch_table import shrunk_config, trace_row  # noqa: E402

SAMPLE = ["gpt_bigcode", "biogpt", "afmoe", "qwen3_next"]


def test_shrink_keeps_one_layer_of_each_kind():
    # Gemma-3's default: 26 layers, five sliding-window layers then one full-attention layer (index 5)
    cfg, note = shrunk_config("gemma3_text")
    assert cfg["num_hidden_layers"] == 3
    assert cfg["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    assert "26->3" in note


def test_shrink_plain_decoder_to_two_layers():
    cfg, _ = shrunk_config("llama")
    assert cfg["num_hidden_layers"] == 2


# Rows the trace check failed before the mechanism each names was modelled (docs/generic-architectures.md):
# BLOOM's eager prefill scores (-40 %), Gemma-2's out-of-place tied-gradient sum without autocast (-10 %),
# Gemma-3's composite config (text_config cut; its idle SigLIP tower gets no gradients or AdamW state),
# MiniCPM-5-MoE's grouped_mm routed copies at prefill (-7 %), Mamba-2 on transformers' torch path (-29 %).
MECHANISMS = ["bloom", "gemma2", "gemma3", "minicpm5_moe", "mamba2"]


@pytest.mark.parametrize("mt", SAMPLE + MECHANISMS)
def test_generic_reader_peaks_within_5_percent_of_the_trace(mt):
    r = trace_row(mt)
    assert "train_err" in r and "infer_err" in r, r
    assert abs(r["train_err"]) <= 0.05, f"{mt} training peak: estimate / trace - 1 = {r['train_err']:+.3f}"
    assert abs(r["infer_err"]) <= 0.05, f"{mt} inference peak: estimate / trace - 1 = {r['infer_err']:+.3f}"


def test_shrink_cuts_a_composite_configs_language_model_only():
    cfg, note = shrunk_config("gemma3")          # vision-language: no num_hidden_layers of its own
    assert cfg["text_config"]["num_hidden_layers"] == 3
    assert cfg["vision_config"]["num_hidden_layers"] == 12     # the SigLIP tower stays whole
    assert note.startswith("text_config layers 26->3")


def test_shrink_rekeys_per_layer_overrides():
    # Gemma-4's full-attention layers (5, 11, ...) override head_dim; layer 5 is kept as the third layer
    cfg, _ = shrunk_config("gemma4_text")
    assert cfg["layer_types"][2] == "full_attention"
    assert list(cfg["per_layer_config"]) == ["02"]


def test_shrink_keeps_period_offset_kinds_and_index_lists():
    jamba, note = shrunk_config("jamba")         # attention every 8th layer from 4: layers 0-4 kept
    assert jamba["num_hidden_layers"] == 5 and "32->5" in note
    llama4, _ = shrunk_config("llama4_text")     # moe_layers names layers (0..47): not cut as one entry per layer
    assert llama4["num_hidden_layers"] == 3 and llama4["moe_layers"] == list(range(48))

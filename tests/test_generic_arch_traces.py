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


@pytest.mark.parametrize("mt", SAMPLE)
def test_generic_reader_peaks_within_5_percent_of_the_trace(mt):
    r = trace_row(mt)
    assert "train_err" in r and "infer_err" in r, r
    assert abs(r["train_err"]) <= 0.05, f"{mt} training peak: estimate / trace - 1 = {r['train_err']:+.3f}"
    assert abs(r["infer_err"]) <= 0.05, f"{mt} inference peak: estimate / trace - 1 = {r['infer_err']:+.3f}"


def test_shrink_keeps_one_layer_of_each_kind():
    # Gemma-3's default: 26 layers, five sliding-window layers then one full-attention layer (index 5)
    cfg, note = shrunk_config("gemma3_text")
    assert cfg["num_hidden_layers"] == 3
    assert cfg["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    assert "26->3" in note


def test_shrink_plain_decoder_to_two_layers():
    cfg, _ = shrunk_config("llama")
    assert cfg["num_hidden_layers"] == 2

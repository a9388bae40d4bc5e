"""Generic architectures (models/generic.py): any model_type transformers builds, read on the meta device.

A CI-sized sample of the table docs/generic-architectures.md (scripts/generic_arch_table.py runs all):
exact totals against transformers' own count, structure read from the module tree, clear refusals.
"""
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.errors import UnsupportedError  # noqa: E402
from gpuplan.models import get_model, spec_from_config  # noqa: E402
from gpuplan.models.meta import meta_param_count  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from generic_arch_table import default_config as _default  # noqa: E402


# families without a hand-written builder: dense, learned positions, fused qkv, ALiBi, MoE, BERT-style
SAMPLE = ["opt", "gpt_neo", "starcoder2", "mpt", "gpt_bigcode", "olmo", "granitemoe", "exaone4", "bert"]


@pytest.mark.parametrize("mt", SAMPLE)
def test_generic_total_equals_transformers(mt):
    cfg = _default(mt)
    m = spec_from_config(cfg, name=mt)
    assert m.family == "generic:" + mt
    assert m.params_total == meta_param_count(cfg)["parameters_plus_stored_buffers"]
    assert m.inferred["num_layers"].startswith("length of the module list")


def test_opt_structure_by_hand():
    # OPT-1.3B shape (facebook/opt-1.3b config values): learned positions (+2 offset rows), fc1/fc2 with
    # ReLU, biases everywhere, tied head. Count by hand from modeling_opt.py.
    cfg = _default("opt", hidden_size=2048, num_hidden_layers=24, ffn_dim=8192, num_attention_heads=32,
                   max_position_embeddings=2048, vocab_size=50272, word_embed_proj_dim=2048)
    m = spec_from_config(cfg, name="opt-1.3b")
    h, n, i, v = 2048, 24, 8192, 50272
    per_layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    assert m.params_total == v * h + (2048 + 2) * h + n * per_layer + 2 * h
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.intermediate_size) == (
        24, 2048, 32, 32, 64, 8192)
    assert m.tie_embeddings and not m.gated_mlp and m.norm == "layernorm"
    assert m.traits.position == "learned" and m.traits.attention_bias and m.traits.activation == "relu"


def test_moe_structure_from_expert_tensors():
    m = spec_from_config(_default("granitemoe"), name="granitemoe")
    assert m.is_moe and m.num_experts == 8 and m.experts_per_tok == 2
    assert m.params_active < m.params_total
    assert "moe" in m.inferred


def test_refusals_name_the_reason():
    # BART-style encoder-decoders are counted and their memory derived (test_generic_hybrids.py); Whisper,
    # ProphetNet and BigBird-Pegasus memory is refused there
    # (RWKV, LFM3's short convolutions and RecurrentGemma are read since: tests/test_generic_recurrent.py)
    with pytest.raises(UnsupportedError, match="state-space") as err:
        spec_from_config(_default("blt"), name="blt")        # Mamba/Mamba-2/Jamba are hand-written (test_ssm.py)
    assert "llama" in str(err.value)          # the hand-written families are listed in the fix
    with pytest.raises(UnsupportedError, match="could not be classified") as err:
        spec_from_config(_default("xlstm"), name="xlstm")
    assert "mlstm_layer" in str(err.value)    # the module that could not be classified is named


def test_meta_flag_works_for_an_unknown_family(tmp_path):
    import json
    from gpuplan.cli import main
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_default("gpt_neo")))
    assert main(["model", str(p), "--meta", "--json"]) == 0
    assert get_model(str(p)).params_total == meta_param_count(json.loads(p.read_text()))["parameters"]


def test_classes_without_sdpa_or_flash_are_flagged_eager_only():
    # GPT-1's OpenAIGPTLMHeadModel has neither path (its own matmul/softmax attention); Llama has both
    pytest.importorskip("transformers")
    from gpuplan.models import spec_from_config
    gpt1 = spec_from_config({"model_type": "openai-gpt", "n_layer": 2}, name="gpt1")
    llama = spec_from_config({"model_type": "llama", "num_hidden_layers": 2}, name="llama")
    assert gpt1.traits.eager_attention_only and not llama.traits.eager_attention_only


def test_xlm_layers_kept_in_parallel_lists_by_hand():
    # XLM keeps each layer's parts in sibling lists (transformer.attentions, layer_norm1, ffns, layer_norm2;
    # modeling_xlm.py XLMModel.__init__, transformers 5.25): the FFN is part of the layer, 4 x emb_dim wide, and
    # counted per layer (it was read as model-level "other" weights, leaving the layers without an MLP)
    cfg = _default("xlm", emb_dim=64, n_layers=3, n_heads=4, vocab_size=100, max_position_embeddings=32)
    m = spec_from_config(cfg, name="xlm-tiny")
    h, n = 64, 3
    assert (m.num_layers, m.intermediate_size, m.gated_mlp) == (n, 4 * h, False)
    per_layer = 4 * (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h
    layer_params = sum(b.numel * b.count for b in m.blocks if b.layer_scope == "layer")
    assert layer_params == n * per_layer
    assert {b.kind for b in m.blocks if ".ffns." in b.name and b.name.endswith("weight")} == {"mlp"}

"""Estimated activations of added / generic families against fake-tensor traces of small configs of
the same architecture (CI-sized: 4 layers, h 512, seq 1024 x 4; real-size numbers are in docs/model.md §6).

Strict xfails are the known gaps, named for the estimator (docs/model.md §6): a fix that brings one
within 5 % makes it fail here, so it must be removed from GAPS.
"""
import json

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.api import estimate  # noqa: E402
from gpuplan.trace import trace  # noqa: E402

SMALL = {
    "opt": dict(hidden_size=512, num_hidden_layers=4, ffn_dim=2048, num_attention_heads=8, vocab_size=1000,
                max_position_embeddings=1024, word_embed_proj_dim=512),                 # generic reader
    "stablelm": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                     intermediate_size=1536, vocab_size=1000, max_position_embeddings=1024),
    "gptj": dict(n_embd=512, n_layer=4, n_head=8, rotary_dim=32, vocab_size=1000, n_positions=1024),
    "cohere": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                   intermediate_size=1536, vocab_size=1000, max_position_embeddings=1024),
}
GAPS = {
    "cohere": "Cohere's LayerNorm runs in fp32 Python code and keeps fp32 intermediates; estimated as torch's "
              "native LayerNorm",
}


@pytest.mark.parametrize("mt", [pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=GAPS[m]))
                                if m in GAPS else m for m in SMALL])
def test_activations_within_5_percent_of_the_trace(mt, tmp_path):
    cfg = transformers.AutoConfig.for_model(mt, **SMALL[mt]).to_dict()
    cfg["model_type"] = mt
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
          "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                    "seq_len": 1024, "micro_batch": 4, "global_batch": 4, "recompute": "none",
                    "attention": "flash"}}
    traced = trace(sc).components["activations"]
    estimated = estimate(sc).memory.components["activations"]
    assert abs(estimated / traced - 1) <= 0.05, f"{mt}: traced {traced:,}, estimated {estimated:,}"

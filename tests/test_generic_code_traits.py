"""Mechanisms the generic reader takes from transformers' code, not the config's shapes (docs/generic-coverage.md):
modality towers, model-level parameters, parameters kept in fp32, a cross-attention with no encoder, the loss
without upcast, prefill logits without logits_to_keep, rotary on fp32 copies, Kimi Delta Attention's torch
fallback. Expected numbers are worked out by hand from the default configs (transformers 5.25) and the modeling
files; the end-to-end check against fake-tensor traces is tests/test_generic_arch_traces.py."""
import dataclasses
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.api import estimate  # noqa: E402
from gpuplan.errors import UnsupportedError  # noqa: E402
from gpuplan.estimate.layout import rank_params  # noqa: E402
from gpuplan.models import spec_from_config  # noqa: E402
from gpuplan.models.spec import Block  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from generic_arch_table import shrunk_config  # noqa: E402


def _spec(mt):
    cfg, _ = shrunk_config(mt)
    return cfg, spec_from_config(cfg, name=mt)


def _default(mt, **kw):
    cfg = transformers.AutoConfig.for_model(mt, **kw).to_dict()
    cfg["model_type"] = mt
    return cfg


def test_audio_tower_is_not_the_decoder_stack():
    # MOSS-Transcribe-Diarize cut to 2 text layers: its 24-layer Whisper-style audio tower must neither be read
    # as the decoder nor count as decoder weights; the tower and its projector are params_vision
    cfg, m = _spec("moss_transcribe_diarize")
    assert m.num_layers == 2 == cfg["text_config"]["num_hidden_layers"]
    assert m.inferred["num_layers"] == "length of the module list 'model.language_model.layers'"
    t = transformers.AutoConfig.for_model("moss_transcribe_diarize").to_dict()
    a = t["audio_config"]
    d, ff, n = a["hidden_size"], a["intermediate_size"], a["num_hidden_layers"]
    # Whisper encoder layer: q, v, out projections with bias, k without; fc1, fc2 with bias; two LayerNorms
    layer = 4 * d * d + 3 * d + 2 * d * ff + ff + d + 4 * d
    assert m.params_vision >= n * layer


def test_image_and_audio_embedders_are_towers():
    cfg, m = _spec("phi4_multimodal")
    assert m.num_layers == 2
    tc = transformers.AutoConfig.for_model("phi4_multimodal")
    assert m.hidden_size == tc.hidden_size and m.intermediate_size == tc.intermediate_size
    assert m.params_vision > 0 and rank_params(m, stage="only").total == m.params_total


def test_model_level_parameters_are_resident():
    # HRM's second stack (H_module) is outside the layer list the reader picks (L_module): still weights
    cfg, m = _spec("hrm_text")
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    heads, d = cfg["num_attention_heads"], cfg["head_dim"]
    stack = 2 * (4 * h * heads * d + 3 * h * i)     # 2 layers of q, k, v, o (no GQA) and gate/up/down
    rp = rank_params(m, stage="only")
    assert rp.other >= stack
    assert rp.total == m.params_total


def test_rank_params_counts_an_unclassified_model_block():
    _, m = _spec("hrm_text")
    extra = Block("model.extra", "other", 1000, 1, None, 1.0, "model")
    m2 = dataclasses.replace(m, blocks=m.blocks + (extra,))
    assert rank_params(m2, stage="only").total - rank_params(m, stage="only").total == 1000


def test_fp32_kept_parameters():
    # Hunyuan-V4 builds its lm_head in fp32 (modeling_hy_v4.py HYV4ForCausalLM: dtype=torch.float32)
    cfg, m = _spec("hy_v4")
    lm_head = cfg["vocab_size"] * cfg["hidden_size"]
    assert lm_head <= m.params_fp32 < lm_head + 0.01 * m.params_total
    assert spec_from_config(_default("llama", num_hidden_layers=2), name="llama").params_fp32 == 0


def _dirs(tmp_path, cfg):
    import json
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def _infer(model, **kw):
    return {"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
            "infer": {"engine": "hf", "prompt_len": 512, "output_len": 1, "concurrency": 1, **kw}}


def _train(model, **kw):
    return {"model": model, "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
            "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                      "seq_len": 512, "micro_batch": 1, "global_batch": 1, "recompute": "none", **kw}}


def test_fp32_kept_parameters_cost_two_more_bytes_in_hf_inference(tmp_path):
    cfg, m = _spec("hy_v4")
    d = _dirs(tmp_path, cfg)
    hf = estimate(_infer(d)).memory.components["weights"]
    vllm = estimate(dict(_infer(d), infer={"engine": "vllm", "prompt_len": 512, "output_len": 1,
                                           "concurrency": 1})).memory.components["weights"]
    assert hf - vllm == pytest.approx(2 * m.params_fp32, abs=4096)


def test_fp32_kept_parameters_train_in_fp32(tmp_path):
    # pure bf16 AdamW: each fp32 parameter holds 4 + 4 (gradient) + 8 (states) bytes, not 2 + 2 + 4
    cfg, m = _spec("hy_v4")
    d = _dirs(tmp_path, cfg)
    c = estimate(_train(d)).memory.components
    assert c["weights"] == pytest.approx(2 * m.params_total + 2 * m.params_fp32, abs=4096)
    assert c["optimizer_states"] == pytest.approx(4 * m.params_total + 4 * m.params_fp32, rel=0.001)


def test_trocr_decoder_traits():
    cfg, m = _spec("trocr")
    # TrOCRForCausalLM.forward: its own CrossEntropyLoss, no logits_to_keep argument
    assert m.traits.loss_fp32 is False and m.traits.logits_to_keep is False
    h = cfg["d_model"]      # TrOCRConfig's own name for the hidden size
    # per layer: encoder_attn q, k, v, out (weights and biases) and encoder_attn_layer_norm, which
    # TrOCRDecoderLayer.forward runs in the same `if encoder_hidden_states is not None` branch
    cross = sum(b.total for b in m.blocks if b.stream == "cross_idle")
    assert cross == 2 * (4 * h * h + 4 * h + 2 * h)
    llama = spec_from_config(_default("llama", num_hidden_layers=2), name="llama")
    assert llama.traits.loss_fp32 and llama.traits.logits_to_keep
    assert not any(b.stream == "cross_idle" for b in llama.blocks)


def test_full_prefill_logits_without_logits_to_keep(tmp_path):
    cfg, m = _spec("trocr")
    sc = _infer(_dirs(tmp_path, cfg))
    sc["infer"]["prompt_len"] = 510             # + 1 output token within the 512-row position table
    act = estimate(sc).memory.components["activations"]
    assert act >= 510 * m.vocab_size * 2        # every position's 16-bit logits


def test_trocr_training_leaves_cross_attention_idle(tmp_path):
    cfg, m = _spec("trocr")
    cross = sum(b.total for b in m.blocks if b.stream == "cross_idle")
    c = estimate(_train(_dirs(tmp_path, cfg))).memory.components
    assert c["optimizer_states"] == pytest.approx(4 * (m.params_total - cross), abs=4096)


def test_rope_fp32_trait():
    assert _spec("modernbert-decoder")[1].traits.rope_fp32
    assert not spec_from_config(_default("llama", num_hidden_layers=2), name="llama").traits.rope_fp32


def test_kda_fallback_prefill(tmp_path):
    cfg, m = _spec("kimi_linear")
    assert (m.traits.kda_channels, m.traits.kda_chunk) == (cfg["linear_num_heads"] * cfg["linear_head_dim"], 64)
    d = _dirs(tmp_path, cfg)
    slow = estimate(_infer(d, ssm_kernels=False)).memory.components["activations"]
    fast = estimate(_infer(d)).memory.components["activations"]
    decay = 3 * 4 * 512 * 64 * 32 * 128          # three [32, 8, 64, 64, 128] fp32 tensors
    assert slow >= decay > 10 * fast


def test_bigbird_pegasus_full_attention_up_to_its_block_sparse_length(tmp_path):
    # BigBirdPegasusEncoder.forward switches block_sparse to original_full up to (5 + 2 x 3 random blocks) x 64
    cfg, m = _spec("bigbird_pegasus")
    assert m.traits.encdec_layer == "bart" and m.traits.encoder_eager_up_to == (5 + 2 * 3) * 64
    d = _dirs(tmp_path, cfg)
    estimate(_infer(d))                                   # 512 input tokens: full attention, derived
    with pytest.raises(UnsupportedError, match="block-sparse"):
        estimate(_infer(d, prompt_len=1024))


def test_eager_encoder_scores_by_hand(tmp_path):
    from gpuplan.estimate import encdec
    _, m = _spec("bigbird_pegasus")
    from gpuplan.estimate.activations import ActivationSetup
    s = ActivationSetup(compute_bytes=2, residual_bytes=2, autocast=False)
    # 16 heads: bf16 probabilities 16 x 512 x 512 x 2, less SDPA's fp32 log-sum-exp 16 x 512 x 4
    assert encdec.eager_encoder_scores(m, s, 512) == 16 * 512 * 512 * 2 - 16 * 512 * 4
    _, bart = _spec("bart")
    assert encdec.eager_encoder_scores(bart, s, 512) == 0

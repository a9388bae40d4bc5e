"""Generic reader (models/generic.py) for hybrids with Mamba mixers and BART-style encoder-decoders.

Expected totals come from transformers' own model on the meta device (an independent implementation);
mixer sizes from hand arithmetic on the Mamba-2 layout (in_proj makes z, x, B, C and dt; the conv runs over
x | B | C); memory from fake-tensor traces of transformers' torch path (docs/generic-architectures.md).
"""
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.api import estimate  # noqa: E402
from gpuplan.errors import InputError, UnsupportedError  # noqa: E402
from gpuplan.models import spec_from_config  # noqa: E402
from gpuplan.models.meta import meta_param_count  # noqa: E402
from trace_checks import assert_inference_matches_trace  # noqa: E402

# CI-sized configs: 4 layers, hidden 256, a Mamba-2 mixer of 8 heads x 64 (d_inner 512), 2 groups x 32 states
_MAMBA2 = dict(mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=2, mamba_d_state=32, mamba_chunk_size=64)
_BASE = dict(hidden_size=256, num_hidden_layers=4, vocab_size=1000, num_attention_heads=8, num_key_value_heads=2)
SMALL = {
    "bamba": dict(_BASE, intermediate_size=512, attn_layer_indices=[2], **_MAMBA2),
    "granitemoehybrid": dict(_BASE, intermediate_size=128, shared_intermediate_size=256, num_local_experts=4,
                             num_experts_per_tok=2, layer_types=["mamba", "mamba", "attention", "mamba"], **_MAMBA2),
    "falcon_h1": dict(_BASE, intermediate_size=512, mamba_d_ssm=512, **_MAMBA2),
    "zamba": dict(hidden_size=128, num_hidden_layers=6, vocab_size=1000, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=256, attn_layer_period=3, attn_layer_offset=2,
                  mamba_d_state=8, n_mamba_heads=2),
}
_BART = dict(d_model=128, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=256, decoder_ffn_dim=512, vocab_size=1000, max_position_embeddings=64)
ENCDEC = ["bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small", "plbart", "mvp"]


def _cfg(mt, **kw):
    cfg = transformers.AutoConfig.for_model(mt, **kw).to_dict()
    cfg["model_type"] = mt
    return cfg


@pytest.mark.parametrize("mt", sorted(SMALL))
def test_hybrid_totals_equal_transformers(mt):
    cfg = _cfg(mt, **SMALL[mt])
    m = spec_from_config(cfg, name=mt)
    assert m.family == "generic:" + mt and m.ssm is not None
    assert m.params_total == meta_param_count(cfg)["parameters_plus_stored_buffers"]


def test_bamba_mixer_shape_and_layer_pattern():
    m = spec_from_config(_cfg("bamba", **SMALL["bamba"]))
    s = m.ssm
    assert (s.variant, s.d_inner, s.d_state, s.n_groups, s.num_heads, s.head_dim, s.d_conv, s.chunk_size) == \
        ("mamba2", 512, 32, 2, 8, 64, 4, 64)
    assert m.layer_mixers == ("mamba", "mamba", "attention", "mamba")
    assert (m.num_ssm_layers, m.num_attention_layers) == (3, 1)
    # in_proj: z (512) + x|B|C (512 + 2*2*32 = 640) + dt per head (8) = 1160 outputs from h = 256
    in_proj = next(b for b in m.blocks if b.name.endswith("mamba.in_proj.weight"))
    assert (in_proj.kind, in_proj.linear, in_proj.count) == ("ssm", (256, 1160), 3)
    # the KV cache holds the one attention layer only: 2 (k, v) x 2 heads x 32 dims x 2 bytes
    assert m.kv_cache_bytes_per_token(2.0) == 2 * 2 * 32 * 2


def test_granitemoehybrid_shared_mlp_is_a_shared_expert():
    m = spec_from_config(_cfg("granitemoehybrid", **SMALL["granitemoehybrid"]))
    # 4 experts of 128 (top-2) and a shared MLP of 256 whose input_linear is gate|up fused (256 -> 512)
    assert (m.num_experts, m.experts_per_tok, m.moe_intermediate_size, m.shared_expert_intermediate) == (4, 2, 128, 256)


def test_falcon_h1_runs_attention_and_mamba_side_by_side():
    m = spec_from_config(_cfg("falcon_h1", **SMALL["falcon_h1"]))
    assert m.layer_mixers == ("parallel",) * 4
    assert m.num_ssm_layers == m.num_attention_layers == 4
    # FalconH1Config's default mamba_rms_norm is false: no gated RMSNorm in the mixer; Bamba's has one
    assert m.ssm.gated_norm is False
    assert spec_from_config(_cfg("falcon_h1", **SMALL["falcon_h1"], mamba_rms_norm=True)).ssm.gated_norm is True
    assert spec_from_config(_cfg("bamba", **SMALL["bamba"])).ssm.gated_norm is True


def test_zamba_hybrid_layers_share_one_attention_block():
    m = spec_from_config(_cfg("zamba", **SMALL["zamba"]))
    # attention (the shared block) every 3rd layer from 2: layers 2 and 5; the others Mamba only
    assert m.layer_mixers == ("mamba", "mamba", "parallel", "mamba", "mamba", "parallel")
    assert m.ssm.variant == "mamba1"
    # A_log is heads x head_dim x d_state: transformers' torch path scans one mamba head at a time
    assert m.ssm.scan_slices == 2
    assert spec_from_config(_cfg("zamba", **dict(SMALL["zamba"], n_mamba_heads=1))).ssm.scan_slices == 1


@pytest.mark.parametrize("mt", ENCDEC)
def test_encoder_decoder_totals_equal_transformers(mt):
    kw = dict(_BART)
    if mt == "marian":
        kw.update(decoder_vocab_size=1000, pad_token_id=1, decoder_start_token_id=1)
    cfg = _cfg(mt, **kw)
    m = spec_from_config(cfg, name=mt)
    assert m.family == "generic:" + mt and (m.encoder_layers, m.num_layers) == (2, 3)
    assert m.params_total == meta_param_count(cfg)["parameters_plus_stored_buffers"]


def test_bart_streams_by_hand():
    m = spec_from_config(_cfg("bart", **_BART))
    by = {b.name: b for b in m.blocks}
    k = by["model.decoder.layers.*.encoder_attn.k_proj.weight"]
    q = by["model.decoder.layers.*.encoder_attn.q_proj.weight"]
    fc1 = by["model.encoder.layers.*.fc1.weight"]
    assert (k.stream, k.count, k.linear) == ("cross_kv", 3, (128, 128))
    assert q.stream == "decoder"
    assert (fc1.stream, fc1.count, fc1.linear) == ("encoder", 2, (128, 256))
    assert m.intermediate_size == 512 and m.position_encoding == "learned" and m.norm == "layernorm"
    # learned positions: BartLearnedPositionalEmbedding keeps 2 offset rows, (64 + 2) x 128 per stack
    assert by["model.encoder.embed_positions.weight"].numel == 66 * 128
    # the cross-attention KV per input token: 3 decoder layers x (k + v) x 128 x 2 bytes
    assert m.kv_cache_bytes_per_token(2.0) == 3 * 2 * 128 * 2


def test_bart_saved_bytes_per_token_by_hand():
    # pure bf16 (b = 2 bytes, residual 2), h 128, 4 heads x 32, encoder fc1 256, decoder fc1 512, dropout 0.1,
    # activation_dropout 0 (BartConfig defaults), gelu (saves its input; fc2 keeps gelu's output)
    from gpuplan.estimate import encdec
    from gpuplan.estimate.activations import ActivationSetup
    m = spec_from_config(_cfg("bart", **_BART))
    s = ActivationSetup(compute_bytes=2, residual_bytes=2, autocast=False)
    h, a, i_e, i_d = 128, 4, 256, 512
    ln = 2 * h + 8                                  # LayerNorm input + fp32 mean and rstd
    attn = 2 * 4 * h + 4 * a                        # q, k, v, output + fp32 lse per head
    enc_layer = 2 * h + attn + h + ln + 2 * h + 2 * 2 * i_e + h + ln      # q/k/v in, mask, fc1 in, gelu in+out
    cross = 2 * h + 3 * 2 * 2 * h                   # encoder output once + k, v per decoder layer
    ends = ln + h                                   # layernorm_embedding + embedding dropout mask
    assert encdec.bart_encoder_token_bytes(m, s) == 2 * enc_layer + cross + ends
    dec_layer = 2 * h + attn + 2 * h + (2 * 2 * h + 4 * a) + 2 * h + 2 * 2 * i_d + 3 * (h + ln)
    assert encdec.bart_decoder_token_bytes(m, s) == 3 * dec_layer + ends + 2 * h   # + lm_head's input


_PROPHETNET = dict(hidden_size=64, num_encoder_layers=2, num_decoder_layers=3, num_encoder_attention_heads=2,
                   num_decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=96, vocab_size=100, ngram=2,
                   num_buckets=32)


def test_ngram_decoder_is_read_from_the_config_and_module_tree():
    m = spec_from_config(_cfg("prophetnet", **_PROPHETNET))
    assert (m.traits.encdec_layer, m.traits.ngram_streams, m.traits.relative_attention_buckets) == ("ngram", 2, 32)
    assert (m.encoder_layers, m.num_layers, m.num_heads, m.head_dim) == (2, 3, 2, 32)
    # a BART layer has no n-gram streams
    assert spec_from_config(_cfg("bart", **_BART)).traits.ngram_streams == 0


def test_ngram_stream_bytes_by_hand():
    # pure bf16 (2 bytes), h 64, 2 heads x 32, 32 buckets, ngram 2 (3 streams), decoder fc1 96, 3 decoder layers,
    # dropout / attention_dropout / activation_dropout 0.1 (ProphetNetConfig defaults): 1-byte masks, gelu
    from gpuplan.estimate import encdec
    from gpuplan.estimate.activations import ActivationSetup
    m = spec_from_config(_cfg("prophetnet", **_PROPHETNET))
    s = ActivationSetup(compute_bytes=2, residual_bytes=2, autocast=False)
    ln = 2 * 64 + 8                                   # LayerNorm input + fp32 mean and rstd
    # n-gram self-attention per target token: layer input 3 x 128, q 3 x 128, main k^T, v, out_proj in 3 x 128,
    # predicting q, hidden, out_proj in 3 x 2 x 128, stacked k and v 2 x 2 x 2 x 128; gather input 2 x 2 x 32 per
    # stream; per stream an output dropout mask (64) and a LayerNorm
    self_attn = 3 * 128 + 3 * 128 + 3 * 128 + 3 * 2 * 128 + 2 * 2 * 2 * 128 + 3 * 128 + 3 * (64 + ln)
    cross = 3 * (128 + 2 * 128 + 64 + ln)             # per stream: q_proj in, q, out_proj in, mask, LayerNorm
    mlp = 3 * (128 + 2 * 96 + 96 + 2 * 96 + 64 + ln)  # fc1 in, gelu in, act-dropout mask, fc2 in, mask, LayerNorm
    ends = 3 * (ln + 64 + 128)                        # embeddings_layer_norm, dropout mask, lm_head's input
    per_token = 3 * (self_attn + cross + mlp) + ends
    assert encdec.ngram_decoder_token_bytes(m, s) == per_token == 3 * (3928 + 1752 + 2424) + 984
    # pairs for 8 target and 16 input tokens, 2 sequences: main 8 x 8 and predicting 2 x 8 x 16 per head at
    # 8 (int64 index) + 4 (fp32 softmax) + 1 (mask) + 2 (probabilities) bytes; cross 3 x 8 x 16 per head at
    # 2 (softmax) + 1 (mask) + 2 (dropped-out probabilities) bytes
    pairs = 2 * 15 * (64 + 256) + 2 * 5 * 384
    assert encdec.ngram_decoder_bytes(m, s, 2, 16, 8) == 2 * (8 * per_token + 3 * pairs)
    # loss per target token: 2 streams x 100 x (2 logits + 4 log-softmax + 4 its gradient + 2 the logits' gradient);
    # two sequences add the first stream's contiguous copy (2 x 100)
    assert encdec.ngram_loss_bytes_per_token(m, s, 1) == 2 * 100 * 12
    assert encdec.ngram_loss_bytes_per_token(m, s, 2) == 2 * 100 * 12 + 200


@pytest.mark.parametrize("src,tgt,batch", [(256, 128, 2), (510, 510, 1)])
def test_ngram_decoder_training_within_5_percent_of_the_trace(src, tgt, batch, tmp_path):
    from gpuplan.trace import trace
    (tmp_path / "config.json").write_text(json.dumps(_cfg("prophetnet", **dict(_PROPHETNET, hidden_size=256,
                                                                               vocab_size=8000))))
    sc = {"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
          "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                    "seq_len": src, "target_len": tgt, "micro_batch": batch, "global_batch": batch,
                    "recompute": "none"}}
    traced = trace(sc)
    est = estimate(sc).memory
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    logits = est.components["logits"] / traced.components["logits"] - 1
    assert abs(peak) <= 0.05 and abs(logits) <= 0.05, f"peak {peak:+.1%}, logits {logits:+.1%}"


_WHISPER = dict(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=100,
                max_target_positions=64)    # WhisperConfig's token ids (50256 ...) need its own vocabulary


def test_speech_front_end_bytes_by_hand(tmp_path):
    from gpuplan.estimate import encdec
    from gpuplan.estimate.activations import ActivationSetup
    m = spec_from_config(_cfg("whisper", **_WHISPER))
    # conv1 (16 mel bins -> 64, stride 1), conv2 (64 -> 64, stride 2) over 100 x 1 x 2 = 200 frames
    assert m.traits.speech_frames == (16, 200, ((64, 1), (64, 2)))
    s = ActivationSetup(compute_bytes=2, residual_bytes=2, autocast=False)
    # features 16 x 200, conv1's output and gelu's 64 x 200 each, conv2's output 64 x 100 (2 bytes each)
    assert encdec.speech_front_end_bytes(m, s) == 2 * (16 * 200 + 2 * 64 * 200 + 64 * 100)
    # the encoder length is the model's: 100 positions, whatever seq_len says
    (tmp_path / "config.json").write_text(json.dumps(_cfg("whisper", **_WHISPER)))
    sc = {"model": str(tmp_path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
          "infer": {"engine": "hf", "prompt_len": 32, "output_len": 8, "concurrency": 1}}
    with pytest.raises(InputError, match="100 positions") as err:
        estimate(sc)
    assert "prompt_len: 100" in err.value.fix
    sc["infer"]["prompt_len"] = 100
    assert estimate(sc).memory.components["kv_cache"] > 0


@pytest.mark.parametrize("master", [False, True])
def test_whisper_training_within_5_percent_of_the_trace(master, tmp_path):
    from gpuplan.trace import trace
    (tmp_path / "config.json").write_text(json.dumps(_cfg("whisper", **dict(_WHISPER, num_mel_bins=80,
                                                                            max_source_positions=1500))))
    sc = {"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
          "train": {"method": "full", "precision": "bf16", "master_weights": master, "optimizer": "adamw",
                    "seq_len": 1500, "target_len": 60, "micro_batch": 2, "global_batch": 2, "recompute": "none"}}
    traced = trace(sc)
    est = estimate(sc).memory
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    assert abs(peak) <= 0.05, f"peak {peak:+.1%}"


@pytest.mark.parametrize("mt,why", [("led", "Longformer")])
def test_encoder_decoders_unlike_bart_are_refused_with_the_reason(mt, why, tmp_path):
    kw = dict(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
              encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100, attention_window=8)
    (tmp_path / "config.json").write_text(json.dumps(_cfg(mt, **kw)))
    with pytest.raises(UnsupportedError, match=why) as err:
        estimate({"model": str(tmp_path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                  "infer": {"engine": "hf", "prompt_len": 32, "output_len": 8, "concurrency": 1}})
    assert "counted exactly" in str(err.value)


# BART-style memory against fake-tensor traces: encoder 2 layers, decoder 3, 512 input and 128 target tokens, 8 sequences
def _bart_scenario(path, task, master_weights=False, beams=1):
    if task == "infer":
        return {"model": str(path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                "infer": {"engine": "hf", "weights": "bf16", "prompt_len": 512, "output_len": 4, "concurrency": 8,
                          "beam_width": beams}}
    return {"model": str(path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
            "train": {"method": "full", "precision": "bf16", "master_weights": master_weights, "optimizer": "adamw",
                      "seq_len": 512, "target_len": 128, "micro_batch": 8, "global_batch": 8, "recompute": "none",
                      "attention": "sdpa"}}


@pytest.mark.parametrize("mt,master", [("bart", False), ("bart", True), ("mbart", False), ("pegasus", False)])
def test_bart_style_training_within_5_percent_of_the_trace(mt, master, tmp_path):
    from gpuplan.trace import trace
    (tmp_path / "config.json").write_text(json.dumps(_cfg(mt, **dict(_BART, max_position_embeddings=512))))
    sc = _bart_scenario(tmp_path, "train", master)
    traced = trace(sc)
    est = estimate(sc).memory
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    act = est.components["activations"] / traced.components["activations"] - 1
    assert abs(peak) <= 0.05 and abs(act) <= 0.05, f"{mt}: peak {peak:+.1%}, activations {act:+.1%}"


@pytest.mark.parametrize("mt,beams", [("bart", 1), ("mbart", 4)])
def test_bart_style_inference_within_5_percent_of_the_trace(mt, beams, tmp_path):
    from gpuplan.trace import trace
    (tmp_path / "config.json").write_text(json.dumps(_cfg(mt, **dict(_BART, max_position_embeddings=512))))
    sc = _bart_scenario(tmp_path, "infer", beams=beams)
    traced = trace(sc, decode_steps=4)
    est = estimate(sc).memory
    assert est.components["kv_cache"] == traced.kv_cache_bytes
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    assert abs(peak) <= 0.05, f"{mt}: peak {peak:+.1%}"


# ---- memory against fake-tensor traces (transformers' torch path: no mamba_ssm kernels on CPU) ------------------
def _scenarios(path):
    train = {"model": str(path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
             "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                       "seq_len": 128, "micro_batch": 2, "global_batch": 2, "recompute": "none",
                       "attention": "flash", "ssm_kernels": False}}
    infer = {"model": str(path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
             "infer": {"engine": "hf", "weights": "bf16", "prompt_len": 128, "output_len": 4, "concurrency": 4,
                       "ssm_kernels": False}}
    return train, infer


@pytest.mark.parametrize("mt", ["bamba", "granitemoehybrid", "falcon_h1"])
def test_training_peak_within_5_percent_of_the_trace(mt, tmp_path):
    from gpuplan.trace import trace
    (tmp_path / "config.json").write_text(json.dumps(_cfg(mt, **SMALL[mt])))
    sc, _ = _scenarios(tmp_path)
    traced = trace(sc)
    est = estimate(sc).memory
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    assert abs(peak) <= 0.05, f"{mt}: peak {peak:+.1%}"
    act = est.components["activations"] / traced.components["activations"] - 1
    assert abs(act) <= 0.05, f"{mt}: activations {act:+.1%}"


@pytest.mark.parametrize("mt", ["bamba", "granitemoehybrid", "falcon_h1"])
def test_inference_within_5_percent_of_the_trace(mt, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_cfg(mt, **SMALL[mt])))
    _, sc = _scenarios(tmp_path)
    assert_inference_matches_trace(mt, sc, decode_steps=4)


# ---- vision-language models: the text decoder's structure, the vision tower as params_vision ------------------------
def test_qwen2_vl_reads_the_text_decoder_and_counts_the_vision_tower():
    text = dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=512, vocab_size=1000)
    vision = dict(depth=5, embed_dim=128, hidden_size=256, num_heads=4, mlp_ratio=2)
    cfg = _cfg("qwen2_vl", text_config=text, vision_config=vision)
    m = spec_from_config(cfg, name="qwen2-vl-tiny")
    # the vision tower's 5 blocks are longer than the 3 text layers, but the decoder is the text model
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads) == (3, 256, 4, 2)
    assert m.params_total == meta_param_count(cfg)["parameters_plus_stored_buffers"]
    from gpuplan.models.meta import build_meta_model
    model = build_meta_model(cfg)
    assert m.params_vision == sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")

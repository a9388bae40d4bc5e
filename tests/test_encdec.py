"""Encoder-decoder models (T5 / Flan-T5 / mT5) and beam search.

Expected values come from hand arithmetic on the published shapes, from transformers built on the meta
device (test_models_meta.py covers every bundled config), or from fake-tensor traces of transformers'
own T5 code (the trace tests at the end, which need the trace extra).
"""
import json
import math

import pytest

from gpuplan.api import estimate, evaluate
from gpuplan.errors import InputError, UnsupportedError
from gpuplan.estimate import encdec
from gpuplan.models import get_model
from gpuplan.models.spec import spec_from_config


def _scn(model, task="finetune", **section):
    key = "infer" if task == "infer" else "train"
    return {"model": model, "task": task, "hardware": {"gpu": "h100-sxm", "count": 1}, key: section}


# ---- parameters ------------------------------------------------------------------------------------------
def _t5_by_hand(h, ff, dkv, heads, layers, vocab, gated, tied, buckets=32):
    inner = heads * dkv
    attn = 4 * h * inner
    mlp = (3 if gated else 2) * h * ff
    enc = layers * (attn + mlp + 2 * h)
    dec = layers * (2 * attn + mlp + 3 * h)
    return vocab * h + enc + dec + 2 * buckets * heads + 2 * h + (0 if tied else vocab * h)


@pytest.mark.parametrize("name,dims,vocab,v11", [
    ("t5-small", (512, 2048, 64, 8, 6), 32128, False),
    ("t5-3b", (1024, 16384, 128, 32, 24), 32128, False),
    ("flan-t5-small", (512, 1024, 64, 6, 8), 32128, True),
    ("flan-t5-xxl", (4096, 10240, 64, 64, 24), 32128, True),
    ("mt5-base", (768, 2048, 64, 12, 12), 250112, True),
])
def test_t5_parameters_by_hand(name, dims, vocab, v11):
    m = get_model(name)
    assert m.params_total == _t5_by_hand(*dims, vocab, gated=v11, tied=not v11)
    assert (m.encoder_layers, m.num_layers) == (dims[4], dims[4])
    assert m.tie_embeddings is (not v11)


def test_t5_small_total_is_the_published_60m():
    # google-t5/t5-small's 60,506,624 parameters (T5 paper's "60 million"; transformers' meta count)
    assert get_model("t5-small").params_total == 60_506_624


def test_num_decoder_layers_and_feed_forward_proj():
    m = spec_from_config({"model_type": "t5", "num_layers": 4, "num_decoder_layers": 2,
                          "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False})
    assert (m.encoder_layers, m.num_layers) == (4, 2)
    assert m.gated_mlp and m.traits.activation == "gelu_new"       # T5Config maps gated-gelu to gelu_new
    with pytest.raises(InputError, match="feed_forward_proj"):
        spec_from_config({"model_type": "t5", "feed_forward_proj": "swish-gated"})


def test_kv_per_token_and_model_json():
    m = get_model("flan-t5-small")
    # 8 decoder layers x (K + V) x 6 heads x 64 x 2 bytes
    assert m.kv_cache_bytes_per_token(2.0) == 8 * 2 * 6 * 64 * 2
    d = m.to_dict()
    assert d["encoder_layers"] == 8 and d["decoder_layers"] == 8
    assert d["cross_kv_bytes_per_input_token"] == 12288


def test_bart_recompute_is_a_clear_error(tmp_path):
    # BART-style activations are derived and traced without gradient checkpointing only
    pytest.importorskip("transformers")
    cfg = {"model_type": "bart", "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
           "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 128,
           "decoder_ffn_dim": 128, "vocab_size": 100, "max_position_embeddings": 32}
    assert spec_from_config(cfg).is_encoder_decoder
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="recompute"):
        estimate({"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
                  "train": {"seq_len": 32, "target_len": 16, "micro_batch": 1, "global_batch": 1, "recompute": "full"}})


# ---- FLOPs -----------------------------------------------------------------------------------------------
def test_encdec_flops_by_hand():
    m = get_model("t5-small")
    h, i, inner, L, V = 512, 2048, 512, 6, 32128
    src, tgt = 100, 10
    enc = src * L * (4 * h * inner + 2 * h * i)
    dec = tgt * L * (4 * h * inner + 2 * h * inner + 2 * h * i) + src * L * 2 * h * inner + tgt * h * V
    assert encdec.matmul_flops_forward(m, src, tgt) == 2 * (enc + dec)
    pairs = L * src * src + L * (tgt * (tgt + 1) / 2 + tgt * src)
    assert encdec.attention_flops_forward(m, src, tgt) == 2 * 8 * 128 * pairs


# ---- scenario rules --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scn,match", [
    ({**_scn("t5-small", seq_len=512, target_len=128), "parallel": {"pp": 2}, "hardware": {"gpu": "h100-sxm", "count": 2}},
     "pipeline"),
    (_scn("t5-small", "infer", engine="vllm"), "HF generate"),
    (_scn("t5-small", seq_len=512, method="lora"), "LoRA"),
    (_scn("t5-small", seq_len=512, attention="eager"), "attention=eager"),
    (_scn("llama-3.2-1b", seq_len=512, target_len=64), "decoder-only"),
    (_scn("llama-3.2-1b", "infer", engine="sglang", beam_width=4), "no beam search"),
])
def test_unsupported_combinations_are_clear_errors(scn, match):
    with pytest.raises(InputError, match=match):
        evaluate(scn)


def test_long_t5_input_is_a_note_not_an_error():
    est = evaluate(_scn("t5-small", "infer", engine="hf", prompt_len=2048, output_len=64))
    assert any("relative position buckets" in w for w in est.warnings)


# ---- memory by hand ----------------------------------------------------------------------------------------
def test_serving_kv_is_cross_over_prompt_plus_self_over_output_per_beam():
    P, O, B, k = 512, 64, 8, 4
    est = evaluate(_scn("flan-t5-small", "infer", engine="hf", prompt_len=P, output_len=O, concurrency=B,
                        beam_width=k))
    assert est.memory.components["kv_cache"] == 12288 * (P + O) * B * k


def test_beam_kv_hf_expands_the_prompt_vllm_shares_full_blocks():
    m = get_model("llama-3.1-8b")
    per_tok = 32 * 2 * 8 * 128 * 2                       # layers x (K+V) x kv heads x head_dim x bf16
    P, O, B, k = 1000, 100, 4, 4
    hf = evaluate(_scn("llama-3.1-8b", "infer", engine="hf", prompt_len=P, output_len=O, concurrency=B, beam_width=k))
    assert hf.memory.components["kv_cache"] == per_tok * k * (P + O) * B
    vl = evaluate(_scn("llama-3.1-8b", "infer", engine="vllm", prompt_len=P, output_len=O, concurrency=B,
                       beam_width=k))
    # 62 full prompt blocks (992 tokens) shared; each beam: the 8-token tail + 100 outputs -> 7 blocks
    shared, own = 992, math.ceil((8 + 100) / 16) * 16
    assert vl.memory.components["kv_cache"] == per_tok * (shared + k * own) * B
    assert vl.memory.limits["max_concurrency"] == int(vl.memory.limits["kv_pool_bytes"] // (per_tok * (shared + k * own)))
    assert m.num_kv_heads == 8


def test_beam_search_throughput_counts_returned_sequences():
    base = _scn("llama-3.1-8b", "infer", engine="vllm", prompt_len=512, output_len=128, concurrency=8)
    one = evaluate(base).performance
    beams = evaluate({**base, "infer": {**base["infer"], "beam_width": 4}}).performance
    assert beams.details["batch"] == 32 and beams.details["requests_in_flight"] == 8
    assert beams.details["beam_tokens_per_s"] == pytest.approx(4 * beams.output_tokens_per_s)
    assert beams.output_tokens_per_s < one.output_tokens_per_s


def test_decode_step_reads_only_the_decoder_weights():
    from gpuplan.estimate.speed import serving_model
    from gpuplan.pipeline import resolve
    r = resolve(_scn("flan-t5-base", "infer", engine="hf"))
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params)
    m = r.model
    dec = sum(b.total for b in m.blocks if b.stream == "decoder")
    assert sv._weights_read(1) == pytest.approx(sv.wb["read"] * dec / m.params_total)
    assert 0.5 < dec / m.params_total < 0.7     # decoder layers (with cross-attention) + lm_head


def test_training_tokens_are_input_tokens_and_target_len_changes_memory():
    a = evaluate(_scn("t5-small", seq_len=512, target_len=64, micro_batch=8))
    b = evaluate(_scn("t5-small", seq_len=512, target_len=256, micro_batch=8))
    assert a.performance.details["tokens_per_step"] == 8 * 512
    assert b.memory.components["activations"] > a.memory.components["activations"]
    # the loss runs over target tokens: 12 bytes x vocab x 8 x 64 under autocast
    assert a.memory.components["logits"] == 12 * 32128 * 8 * 64


# ---- against fake-tensor traces of transformers' T5 code ------------------------------------------------
def _trace_vs_estimate(scn, **kw):
    from gpuplan.trace import trace
    r = trace(scn, **kw)
    est = evaluate(scn).memory
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    return alloc, r.peak_bytes


@pytest.mark.parametrize("model,train", [
    ("t5-small", dict(seq_len=512, target_len=128, micro_batch=8, attention="sdpa")),
    ("flan-t5-small", dict(seq_len=500, target_len=120, micro_batch=4, attention="sdpa", master_weights=False)),
])
def test_training_peak_within_5_percent_of_trace(model, train):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    est, traced = _trace_vs_estimate(_scn(model, **train), iterations=2)
    assert abs(est - traced) / traced < 0.05


@pytest.mark.parametrize("beams", [1, 4])
def test_inference_peak_within_5_percent_of_trace(beams):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    scn = _scn("flan-t5-small", "infer", engine="hf", prompt_len=512, output_len=4, concurrency=8, beam_width=beams)
    est, traced = _trace_vs_estimate(scn, decode_steps=4)
    assert abs(est - traced) / traced < 0.05


def test_beam_search_memory_within_5_percent_of_real_hf_generate(tmp_path):
    """transformers' own generate(num_beams=4) on real CPU tensors (a tiny Llama with a 32k vocabulary), every
    allocation counted by the trace's allocator tracker: expansion, beam scoring and cache reordering included."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import json
    from gpuplan.trace._run import CUDA_BLOCK, make_tagger
    from gpuplan.trace._tracker import AllocTracker
    cfg = dict(model_type="llama", hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
               intermediate_size=512, vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    P, B, O, k = 256, 2, 8, 4
    tracker = AllocTracker(round_to=CUDA_BLOCK, tagger=make_tagger(32000))
    with tracker:
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg),
                                                              dtype=torch.bfloat16, attn_implementation="sdpa").eval()
        tracker.reset_peak()
        ids = torch.randint(5, 32000, (B, P))
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=k, max_new_tokens=O, min_new_tokens=O,
                           do_sample=False, early_stopping=False, pad_token_id=0, eos_token_id=None)
    est = evaluate(_scn(str(path), "infer", engine="hf", prompt_len=P, output_len=O, concurrency=B,
                        beam_width=k)).memory
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    assert abs(alloc - tracker.peak) / tracker.peak < 0.05


def test_launch_refuses_encoder_decoders_with_the_reason():
    from gpuplan.launch import launch_files
    from gpuplan.scenario import scenario_from_dict
    with pytest.raises(UnsupportedError, match="encoder-decoder"):
        launch_files(scenario_from_dict(_scn("flan-t5-small", seq_len=512, target_len=128)), "hf")


def test_multi_gpu_trace_of_an_encoder_decoder_is_a_clear_error():
    pytest.importorskip("torch")
    from gpuplan.trace import trace
    scn = {**_scn("t5-small", seq_len=256, target_len=64), "hardware": {"gpu": "h100-sxm", "count": 2},
           "parallel": {"zero": 3}}
    with pytest.raises(UnsupportedError, match="one GPU only"):
        trace(scn)


def test_fsdp_unit_is_the_largest_t5_block():
    from gpuplan.estimate.layout import rank_params
    h, i, inner = 4096, 10240, 4096                       # flan-t5-xxl
    decoder_block = 4 * h * inner + 4 * h * inner + 3 * h * i + 3 * h   # self + cross attention, MLP, 3 norms
    assert rank_params(get_model("flan-t5-xxl")).layer_max == decoder_block

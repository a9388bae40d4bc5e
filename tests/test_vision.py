"""Vision-language models: image tokens per family (hand arithmetic from the processors' code), the vision
tower's saved activations (a saved-tensor listing of a real Qwen2-VL vision block) and whole training / prefill
peaks against real-CPU traces (trace/_vlm.py), refusals."""
import pytest

from gpuplan.errors import InputError, UnsupportedError
from gpuplan.models.vision import vision_tower
from gpuplan.scenario import scenario_from_dict

# llava-hf/llava-1.5-7b-hf config.json (the registry's copy, models/configs; source in registry.csv)
LLAVA15 = {"model_type": "llava", "text_config": {"model_type": "llama", "vocab_size": 32064},
           "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                             "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                             "patch_size": 14, "projection_dim": 768},
           "vision_feature_layer": -2, "vision_feature_select_strategy": "default"}
# Qwen2-VL-2B-Instruct's vision_config (qwen2_vl; kmodels' vendored copy of the HF config)
QWEN2VL_VISION = {"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "mlp_ratio": 4, "num_heads": 16,
                  "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2}


def test_llava15_576_tokens_577_positions():
    t = vision_tower(LLAVA15)
    one = t.per_image(None, None)
    assert (one["tokens"], one["positions"]) == (24 * 24, 24 * 24 + 1)       # (336/14)² and the CLS
    assert (t.layers, t.hidden, t.intermediate, t.activation) == (24, 1024, 4096, "quick_gelu")


def test_clip_l14_336_tower_flops_match_open_clip_profile():
    """open_clip docs/model_profile.csv @f862f86 lists ViT-L-14-336 image_gflops 381.92 (577 positions, 24
    layers, 1024 wide); the tower without LLaVA's projector must agree (an independent count)."""
    import dataclasses
    from gpuplan.estimate.vision import image_load, tower_flops_forward
    from gpuplan.models import spec_from_config
    t = vision_tower(LLAVA15, 4096)
    assert t.projector == ((1024, 4096), (4096, 4096))      # LlavaMultiModalProjector, text hidden 4096
    bare = dataclasses.replace(t, projector=())

    class _M:
        vision_tower, name = bare, "clip"
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "data": {"images_per_sample": 1}})
    f = tower_flops_forward(bare, image_load(scn, _M()))
    assert f == pytest.approx(381.92e9, rel=0.005)


def test_qwen2vl_dynamic_resolution_hand_arithmetic():
    t = vision_tower({"model_type": "qwen2_vl", "hidden_size": 1536, "vision_config": QWEN2VL_VISION})
    # 448 x 448: multiples of 28 already; 32 x 32 patches of 14 px, 2x2 merged
    assert t.per_image(448, 448)["positions"] == 1024 and t.per_image(448, 448)["tokens"] == 256
    # 1000 x 700: round(1000/28)=36 -> 1008, round(700/28)=25 -> 700; 705,600 px inside [3136, 1,003,520]
    one = t.per_image(1000, 700)
    assert (one["positions"], one["tokens"]) == (72 * 50, 36 * 25)
    # 4000 x 3000 (12 Mpx) exceeds max_pixels 28·28·1280: beta = sqrt(12e6 / 1,003,520) = 3.4580;
    # floor(4000/beta/28) = 41 -> 1148, floor(3000/beta/28) = 30 -> 840
    assert t.dynamic_grid(4000, 3000) == (41 * 28, 30 * 28)
    assert t.from_tokens(100)["positions"] == 400


def test_qwen25vl_window_and_llava_next_anyres():
    t = vision_tower({"model_type": "qwen2_5_vl", "hidden_size": 3584,
                      "vision_config": {"hidden_size": 1280, "window_size": 112, "patch_size": 14,
                                        "spatial_merge_size": 2, "fullatt_block_indexes": [7, 15, 23, 31]}})
    assert t.window == 64 and t.gated_mlp and t.norm == "rms"      # 112 px / 14 = 8 patches a side
    nxt = vision_tower({**LLAVA15, "model_type": "llava_next"})
    one = nxt.per_image(672, 672)
    # pinpoint 672x672: 2x2 tiles of 24x24 features, no padding to remove: 48·48 + 48 newlines + 576 base
    assert one["tokens"] == 48 * 48 + 48 + 576 and one["positions"] == 5 * 577


def _spec(text_layers=1, depth=2):
    from gpuplan.models import spec_from_config
    # Qwen2-VL structure (head_dim 80 in the tower, mlp_ratio 4, patch 14, 2x2 merge, M-RoPE) at widths a
    # real-CPU run finishes in seconds
    return spec_from_config({
        "model_type": "qwen2_vl", "vocab_size": 1024, "tie_word_embeddings": True,
        "text_config": {"model_type": "qwen2_vl_text", "vocab_size": 1024, "hidden_size": 256,
                        "intermediate_size": 512, "num_hidden_layers": text_layers, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "tie_word_embeddings": True,
                        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
        "vision_config": {"depth": depth, "embed_dim": 160, "hidden_size": 256, "mlp_ratio": 4, "num_heads": 2,
                          "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2},
        "image_token_id": 1000, "video_token_id": 1001, "vision_start_token_id": 1002,
        "vision_end_token_id": 1003}, name="qwen2vl-cut")


def _train_scn(spec, method="full", recompute="none"):
    return scenario_from_dict({"model": dict(spec.config), "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                               "train": {"seq_len": 128, "precision": "bf16", "master_weights": False,
                                         "attention": "sdpa", "method": method, "recompute": recompute},
                               "data": {"images_per_sample": 1, "image_height": 448, "image_width": 448}})


# Llama-3.2-11B-Vision: the vision_config keys its config.json sets (quoted in danbev/learning-ai
# notes/llama.cpp/llama-3-2-vision.md: image_size 560 where MllamaVisionConfig's default is 448); every other
# key takes transformers' MllamaConfig default, which is the 11B's (text 40 layers, 4096 wide, 32/8 heads,
# 14336, cross-attention layers 3, 8, ..., 38)
MLLAMA_11B = {"model_type": "mllama", "image_token_index": 128256,
              "text_config": {"model_type": "mllama_text_model", "vocab_size": 128256,
                              "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38]},
              "vision_config": {"model_type": "mllama_vision_model", "attention_heads": 16, "hidden_act": "gelu",
                                "hidden_size": 1280, "image_size": 560, "intermediate_size": 5120,
                                "max_num_tiles": 4, "num_channels": 3, "num_global_layers": 8,
                                "num_hidden_layers": 32, "patch_size": 14, "vision_output_dim": 7680}}


def test_mllama_tiles_cross_tokens_and_kv_hand_arithmetic():
    from gpuplan.estimate.vision import cross_kv_bytes, image_load
    from gpuplan.models import spec_from_config
    spec = spec_from_config(MLLAMA_11B)
    t = spec.vision_tower
    one = t.per_image(None, None)
    # (560/14)² + CLS = 1601 per tile, padded to 1608 (multiple of 8) in the tower; 4 tiles attend together
    assert (one["positions"], one["sequences"], one["cross_tokens"], one["tokens"]) == (4 * 1608, 1, 4 * 1601, 1)
    # 32 self-attention layers keep per-token KV (8 heads x 128 x K,V x 2 bytes); the 8 cross layers do not
    assert spec.num_attention_layers == 32 and spec.kv_cache_bytes_per_token() == 32 * 8 * 128 * 2 * 2
    scn = scenario_from_dict({"model": MLLAMA_11B, "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "data": {"images_per_sample": 2}})
    load = image_load(scn, spec)
    # per request: 8 layers x 2 images x 6404 features x (K + V) x 8 heads x 128 x 2 bytes
    assert cross_kv_bytes(spec, load) == 8 * 2 * 6404 * 2 * 8 * 128 * 2


def test_mllama_serving_breakdown_shows_the_cross_attention_its_ttft_carries():
    from gpuplan import api
    scn = {"model": MLLAMA_11B, "task": "infer", "hardware": {"gpu": "h100-sxm"}, "infer": {"engine": "hf"},
           "data": {"images_per_sample": 1}}
    perf = api.estimate(scn).performance
    no_images = api.estimate({**scn, "data": {}}).performance
    bd = perf.breakdown
    assert bd["vision_encode"] > 0 and bd["cross_attention"] > 0
    # both run before the first token: the TTFT grows by at least their sum over the text-only request
    assert perf.ttft_s - no_images.ttft_s >= 0.999 * (bd["vision_encode"] + bd["cross_attention"])


def test_refusals_and_frozen_tower():
    from gpuplan.estimate.vision import image_load, tower_saved_bytes
    spec = _spec()
    no_size = scenario_from_dict({"model": dict(spec.config), "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                                  "data": {"images_per_sample": 1}})
    with pytest.raises(InputError, match="image_height"):
        image_load(no_size, spec)
    lora = _train_scn(spec, method="lora")
    load = image_load(lora, spec)
    assert not load.trainable and tower_saved_bytes(spec.vision_tower, load, "none") == 0
    from gpuplan.models import spec_from_config
    vllm = scenario_from_dict({"model": MLLAMA_11B, "task": "infer", "hardware": {"gpu": "h100-sxm"},
                               "infer": {"engine": "vllm"}, "data": {"images_per_sample": 1}})
    from gpuplan.estimate.memory import estimate_memory
    with pytest.raises(UnsupportedError, match="cross-attention"):
        estimate_memory(vllm, spec_from_config(MLLAMA_11B), 80 << 30)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _saved_bytes(run, skip) -> int:
    """Bytes of the distinct storages autograd saves while `run()` executes, leaving out the storages in
    `skip` (parameters and the test's own inputs)."""
    import torch
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


def test_layer_formula_matches_saved_tensors_of_a_real_qwen2vl_block():
    """Every tensor autograd saves in one Qwen2-VL vision block at the real width (1280, 16 heads), parameters
    left out, against estimate.vision.layer_saved_bytes_per_position. CPU LayerNorm saves bf16 mean/rstd
    (CUDA: fp32, which the formula counts): 2 norms x 2 x 2 bytes per position apart."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl import modeling_qwen2_vl as mq
    from gpuplan.estimate.vision import layer_saved_bytes_per_position
    cfg = Qwen2VLConfig(text_config={"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
                                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1},
                        vision_config={**QWEN2VL_VISION, "depth": 1})
    cfg.vision_config._attn_implementation = "sdpa"
    vis = Qwen2VLForConditionalGeneration(cfg).to(torch.bfloat16).model.visual
    grid = torch.tensor([[1, 16, 16]])
    P = 256
    x = vis.patch_embed(torch.randn(P, 3 * 2 * 14 * 14, dtype=torch.bfloat16))
    pe = vis.rotary_pos_emb(x, mq.get_vision_position_ids(grid, 2, kwargs={}))
    cu, mx = mq.get_vision_attention_seqlens(grid, vis.config, kwargs={})
    x = x.detach().requires_grad_()
    skip = {p.untyped_storage().data_ptr() for p in vis.parameters()} | {t.untyped_storage().data_ptr() for t in pe}
    measured = _saved_bytes(lambda: vis.blocks[0](x, cu_seqlens=cu, max_seqlen=mx, position_embeddings=pe), skip) / P
    formula = layer_saved_bytes_per_position(vision_tower({"model_type": "qwen2_vl", "hidden_size": 1536,
                                                            "vision_config": QWEN2VL_VISION}))
    assert formula - measured == 2 * 2 * 2          # the fp32 (CUDA) vs bf16 (CPU) LayerNorm statistics
    assert measured == pytest.approx(22 * 1280 + 4 * 16 + 6 * 5120 + 8, abs=0)   # hand count, docs


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_training_step_within_5pct_of_real_cpu_trace(recompute):
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.trace import _vlm
    spec = _spec()
    scn = _train_scn(spec, recompute=recompute)
    tr = _vlm.train_step(scn, spec)
    est = estimate_memory(scn, spec, 80 << 30)
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    assert tr.phase in ("forward", "backward")          # the activation peak, not the optimizer step
    assert abs(alloc - tr.peak_bytes) / tr.peak_bytes < 0.05


def test_prefill_within_5pct_of_real_cpu_trace():
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.trace import _vlm
    spec = _spec()
    scn = scenario_from_dict({"model": dict(spec.config), "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"engine": "hf", "prompt_len": 64, "output_len": 1, "concurrency": 2},
                              "data": {"images_per_sample": 2, "image_height": 448, "image_width": 448}})
    tr = _vlm.prefill(scn, spec)
    est = estimate_memory(scn, spec, 80 << 30)
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    assert abs(alloc - tr.peak_bytes) / tr.peak_bytes < 0.05


def test_mllama_11b_count_equals_meta_and_published():
    """Meta-device build of MllamaForConditionalGeneration (vision tower and projector included) against our
    count; published: 10.7B (meta-llama/Llama-3.2-11B-Vision, safetensors). The tile position embedding
    (9 aspect-ratio ids x 4 tiles x 1601 x 1280) makes the image size matter: at the class default 448 the
    count would be 27,279,360 lower."""
    from gpuplan.models import spec_from_config
    from gpuplan.models.meta import meta_param_count
    spec = spec_from_config(MLLAMA_11B)
    assert spec.params_total == meta_param_count(MLLAMA_11B)["parameters"] == 10_670_220_835
    assert round(spec.params_total / 1e9, 1) == 10.7
    at_448 = {**MLLAMA_11B, "vision_config": {**MLLAMA_11B["vision_config"], "image_size": 448}}
    assert spec.params_total - spec_from_config(at_448).params_total == 9 * 4 * (1601 - 1025) * 1280 + (
        1601 - 1025) * 1280


def _mllama_cut(vision_layers=2, global_layers=1):
    """Llama-3.2-Vision's structure (tiles of 14-px patches + CLS padded to a multiple of 8 and attending
    together, gated global layers, intermediate-layer features, a cross-attention decoder layer among
    self-attention ones, GQA) at widths and an image size (224: 4 x 264 tower positions) a real-CPU run
    finishes quickly."""
    from gpuplan.models import spec_from_config
    return spec_from_config({
        "model_type": "mllama", "image_token_index": 1024,
        "text_config": {"model_type": "mllama_text_model", "vocab_size": 1024, "hidden_size": 256,
                        "intermediate_size": 512, "num_hidden_layers": 3, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "cross_attention_layers": [1], "tie_word_embeddings": False,
                        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        "vision_config": {"model_type": "mllama_vision_model", "hidden_size": 160, "attention_heads": 2,
                          "intermediate_size": 640, "num_hidden_layers": vision_layers,
                          "num_global_layers": global_layers, "intermediate_layers_indices": [0],
                          "vision_output_dim": 320, "image_size": 224, "patch_size": 14, "max_num_tiles": 4}},
        name="mllama-cut")


def test_mllama_training_step_within_5pct_of_real_cpu_trace():
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.trace import _vlm
    spec = _mllama_cut()
    scn = scenario_from_dict({"model": dict(spec.config), "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                              "train": {"seq_len": 128, "micro_batch": 2, "precision": "bf16",
                                        "master_weights": False, "attention": "sdpa", "method": "full"},
                              "data": {"images_per_sample": 1}})
    tr = _vlm.train_step(scn, spec)
    est = estimate_memory(scn, spec, 80 << 30)
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    assert tr.phase in ("forward", "backward")
    assert abs(alloc - tr.peak_bytes) / tr.peak_bytes < 0.05


def test_mllama_prefill_within_5pct_of_real_cpu_trace():
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.trace import _vlm
    spec = _mllama_cut()
    scn = scenario_from_dict({"model": dict(spec.config), "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"engine": "hf", "prompt_len": 64, "output_len": 1, "concurrency": 2},
                              "data": {"images_per_sample": 2}})
    tr = _vlm.prefill(scn, spec)
    est = estimate_memory(scn, spec, 80 << 30)
    alloc = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
    assert abs(alloc - tr.peak_bytes) / tr.peak_bytes < 0.05


def test_cross_attention_layer_saved_tensors_match_formula():
    """Every tensor autograd saves in a MllamaCrossAttentionDecoderLayer minus those of a
    MllamaSelfAttentionDecoderLayer of the same model, at the 11B's attention width (4096, 32 heads, 8 KV
    heads, head 128; a narrow MLP, which both layers share), over 64 text tokens and one 1601-position tile,
    against estimate.vision.cross_saved_bytes (its per-layer part plus the shared cross-attention mask; the
    projector output is the input here)."""
    import dataclasses
    from transformers import MllamaConfig, MllamaForConditionalGeneration
    from transformers.models.mllama import modeling_mllama as mm
    from gpuplan.estimate.vision import ImageLoad, cross_saved_bytes
    from gpuplan.models import spec_from_config
    text = {"model_type": "mllama_text_model", "vocab_size": 64, "hidden_size": 4096, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
            "cross_attention_layers": [1], "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    vision = {"model_type": "mllama_vision_model", "hidden_size": 32, "attention_heads": 2, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_global_layers": 1, "intermediate_layers_indices": [0],
              "vision_output_dim": 64, "image_size": 28, "patch_size": 14}
    cfg = MllamaConfig(text_config=text, vision_config=vision)
    cfg.text_config._attn_implementation = "sdpa"
    lm = MllamaForConditionalGeneration(cfg).to(torch.bfloat16).model.language_model
    S, X = 64, 1601
    h = torch.randn(1, S, 4096, dtype=torch.bfloat16, requires_grad=True)
    xs = torch.randn(1, X, 4096, dtype=torch.bfloat16, requires_grad=True)
    cam, full = mm._prepare_cross_attention_mask(torch.ones(1, S, 1, 1, dtype=torch.long), num_vision_tokens=X,
                                                 dtype=torch.bfloat16)
    pos = torch.arange(S)[None]
    pe = lm.rotary_emb(h, pos)
    skip = ({p.untyped_storage().data_ptr() for p in lm.parameters()}
            | {t.untyped_storage().data_ptr() for t in (*pe, h, xs)})

    def listing(run):
        return _saved_bytes(run, skip)
    cross = listing(lambda: lm.layers[1](h, cross_attention_states=xs, cross_attention_mask=cam, attention_mask=None,
                                         full_text_row_masked_out_mask=full))
    self_ = listing(lambda: lm.layers[0](h, attention_mask=None, position_ids=pos, position_embeddings=pe))
    spec = spec_from_config({"model_type": "mllama", "text_config": text, "vision_config": vision})
    load = ImageLoad(images=1, tokens=1, positions=X, sequences=1, projector_rows=X, trainable=True, cross_tokens=X)
    formula = cross_saved_bytes(spec, load, S, "none") - 2.0 * 4096 * X      # the projector output is `xs` here
    assert cross - self_ == pytest.approx(formula, abs=0)

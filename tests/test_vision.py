"""Vision-language models: image tokens per family (hand arithmetic from the processors' code), the vision
tower's saved activations (a saved-tensor listing of a real Qwen2-VL vision block) and whole training / prefill
peaks against real-CPU traces (trace/_vlm.py), refusals."""
import pytest

from gpuplan.errors import InputError, UnsupportedError
from gpuplan.models.vision import VisionTower, vision_tower
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
    cross = VisionTower(layers=1, hidden=8, heads=1, intermediate=8, gated_mlp=False, activation="gelu",
                        patch=14, image="cross", image_size=560, class_token=True, max_tiles=4)
    assert cross.per_image(None, None)["cross_tokens"] == 4 * (40 * 40 + 1)
    import dataclasses
    with pytest.raises(UnsupportedError, match="cross-attention"):
        image_load(lora, dataclasses.replace(spec, vision_tower=cross))


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


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
    params = {p.untyped_storage().data_ptr() for p in vis.parameters()}
    shared = {t.untyped_storage().data_ptr() for t in pe}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and st.data_ptr() not in shared:
            seen[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        vis.blocks[0](x, cu_seqlens=cu, max_seqlen=mx, position_embeddings=pe)
    measured = sum(seen.values()) / P
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

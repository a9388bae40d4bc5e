"""TensorRT-LLM's dense NVFP4 activation quantize passes (quant_kernels.trtllm_nvfp4_quantize_*, docs/speed.md §3.28).

Expected values are counted from TensorRT-LLM's code, not from the function under test: which producer writes NVFP4
(modeling_llama.py LlamaDecoderLayer @0588d573, attention.py @069fb80a, gated_mlp.py @411e8428), the custom
all-reduce workspace (customAllReduceUtils.h @005b299b: 16e6 bytes up to 2 ranks, 8e6 beyond) and the bytes of one
fp4_quantize (bf16 read 2, E2M1 written 0.5, one E4M3 scale per 16 elements 1/16).
"""
import pytest

from gpuplan.estimate import speed
from gpuplan.estimate.quant_kernels import trtllm_nvfp4_quantize_bytes, trtllm_nvfp4_quantize_passes
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

UNFUSED = {"qkv_proj": True, "o_proj": False, "gate_up_proj": True, "down_proj": True}
AR_FUSED = {"qkv_proj": False, "o_proj": False, "gate_up_proj": False, "down_proj": True}


def test_tp1_quantizes_qkv_gate_up_and_down_but_not_the_attention_output():
    # no tensor parallelism: no all-reduce to fuse into; the attention kernel writes NVFP4 for o_proj
    assert trtllm_nvfp4_quantize_passes(True, 8192, 1, 100) == UNFUSED


def test_tp4_all_reduce_fusion_feeds_qkv_and_gate_up_while_the_message_fits_the_workspace():
    # Llama 3.1 405B, hidden 16384, TP4: 8e6 bytes / (16384 x 2 bytes) = 244.1 tokens
    assert trtllm_nvfp4_quantize_passes(True, 16384, 4, 244) == AR_FUSED
    assert trtllm_nvfp4_quantize_passes(True, 16384, 4, 245) == UNFUSED     # NCCL + subsequent ops
    # TP2 has 16e6 bytes: hidden 8192 fits 976 tokens, not 977
    assert trtllm_nvfp4_quantize_passes(True, 8192, 2, 976) == AR_FUSED
    assert trtllm_nvfp4_quantize_passes(True, 8192, 2, 977) == UNFUSED


def test_fusion_is_off_for_small_llamas_other_models_and_gate_up_under_attention_dp():
    assert trtllm_nvfp4_quantize_passes(True, 4096, 4, 1) == UNFUSED          # hidden_size > 4096 only
    assert trtllm_nvfp4_quantize_passes(False, 8192, 4, 1) == UNFUSED            # only the Llama layer was read
    assert get_model("llama-3.1-405b").trtllm_llama_decoder and not get_model("qwen3-32b").trtllm_llama_decoder
    adp = trtllm_nvfp4_quantize_passes(True, 8192, 4, 1, attention_dp=True)   # PRE_MLP_FUSION needs no ADP
    assert adp == {"qkv_proj": False, "o_proj": False, "gate_up_proj": True, "down_proj": True}


def test_bytes_per_token_counted_by_hand():
    # Llama 3.3 70B TP1: (8192 qkv + 8192 gate_up + 28672 down) x 2.5625 bytes x 80 layers per token
    assert trtllm_nvfp4_quantize_bytes(1, True, 8192, 28672, 80, 1) == pytest.approx(9_236_480.0)
    # Llama 3.1 405B TP4 in a fused step: down_proj's 53248 / 4 columns x 126 layers, plus layer 0's qkv
    assert trtllm_nvfp4_quantize_bytes(1, True, 16384, 13312, 126, 4, step_tokens=100) == \
        pytest.approx((13312 * 126 + 16384) * 2.5625)
    # the same rows in a step of 4096 tokens: NCCL, every input quantized
    assert trtllm_nvfp4_quantize_bytes(1, True, 16384, 13312, 126, 4, step_tokens=4096) == \
        pytest.approx((16384 * 2 + 13312) * 126 * 2.5625)


def _sv(mid, gid, weights, engine="trtllm", count=1):
    scn = scenario_from_dict({"model": mid, "task": "infer", "hardware": {"gpu": gid, "count": count},
                              "parallel": {"tp": count},
                              "infer": {"weights": weights, "kv_cache": "fp8", "engine": engine, "prompt_len": 1000,
                                        "output_len": 1000, "concurrency": 64}})
    return speed.serving_model(scn, get_model(mid), get_gpu(gid))


def test_the_serving_step_prices_the_passes_at_the_hbm_roofline():
    sv = _sv("llama-3.3-70b-instruct", "b200", "nvfp4")
    step = sv.decode_step(64, 1500)
    expected = 64 * 9_236_480.0 / speed.memory_rate(sv.P, sv.gpu)
    assert step["quantize_passes"] == pytest.approx(expected)
    # the same step without them is faster by exactly that much
    sv.dense_fp4_quantize = False
    assert sv.decode_step(64, 1500)["gpu_time"] == pytest.approx(step["gpu_time"] - expected, rel=1e-9)


def test_no_passes_for_other_formats_engines_or_moe_models():
    assert _sv("llama-3.3-70b-instruct", "b200", "fp8").decode_step(64, 1500)["quantize_passes"] == 0.0
    assert _sv("llama-3.3-70b-instruct", "b200", "nvfp4", engine="vllm").decode_step(64, 1500)["quantize_passes"] == 0.0
    # MoE: the fused MoE step prices its own quantize (moe.fused_moe_pass_bytes)
    assert _sv("qwen3-30b-a3b", "b200", "nvfp4").decode_step(64, 1500)["quantize_passes"] == 0.0

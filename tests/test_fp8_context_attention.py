"""TensorRT-LLM's FP8 context FMHA (estimate/attention_kernels.py `fp8_context_attention`, speed.py `_Serving`):
an FP8/NVFP4 checkpoint with an FP8 KV cache runs the prefill attention's matmuls in FP8, at the published
FlashAttention-3 FP8/BF16 forward speed ratio (data/attention_fp8.csv). Expected values are hand arithmetic from
the published figures (Shah et al. 2024, Fig. 5 and 7: BF16 467/565/625/638/646/648, FP8 348/596/733/918/974/1008
TFLOP/s at 512 ... 16k tokens), never the code's own output."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from gpuplan.estimate import speed
from gpuplan.estimate.attention_kernels import fp8_context_attention, fp8_forward_speedup
from gpuplan.estimate.calibration import thaw
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_speed as cs  # noqa: E402

LONG = 20000          # the perf-overview's longest prompt: beyond the last published point (16k), flat there
AT_16K = 1008 / 648   # FP8 / BF16 FlashAttention-3 forward at 16k tokens = 1.556


def _scn(engine="trtllm", weights="fp8", kv="fp8", gpu="h100-sxm", model="llama-3.1-8b"):
    return scenario_from_dict({"model": model, "task": "infer", "hardware": {"gpu": gpu, "count": 1},
                               "infer": {"engine": engine, "weights": weights, "kv_cache": kv,
                                         "prompt_len": LONG, "output_len": 2000, "concurrency": 100}})


def _prefill_attention_s(scn, gpu="h100-sxm", model="llama-3.1-8b"):
    sv = speed.serving_model(scn, get_model(model), get_gpu(gpu))
    return sv.prefill_attention_time(sv.prefill_attention_flops(LONG, 0), LONG)


# ---- when TensorRT-LLM runs it (attention.py @c6d3bb2a, trtllm.py @9144c0e6, thop/attentionOp.cpp @38134b13) ----

@pytest.mark.parametrize("engine,compute,kv,expected", [
    ("trtllm", "fp8", "fp8", True),       # ModelOpt FP8 checkpoint + FP8 KV cache: FP8 output -> mFP8ContextFMHA
    ("trtllm", "fp4", "fp8", True),       # NVFP4 checkpoint + FP8 KV cache: FP4/FP8 output -> mFP8ContextFMHA
    ("trtllm", "fp8", "bf16", False),     # 16-bit KV cache: no FP8 output, no paged-context FP8 path
    ("trtllm", "fp16", "fp8", False),     # weight-only format (AWQ/GPTQ dequantize): no o_proj input scale
    ("vllm", "fp8", "fp8", False),        # another engine's kernel
])
def test_fp8_context_fmha_rule(engine, compute, kv, expected):
    assert fp8_context_attention(engine, compute, kv) is expected


# ---- the published speed ratio ---------------------------------------------------------------------

def test_speedup_is_the_published_ratio_at_the_measured_lengths():
    assert fp8_forward_speedup(512) == pytest.approx(348 / 467)       # 0.745: the FP8 kernel is slower there
    assert fp8_forward_speedup(4096) == pytest.approx(918 / 638)
    assert fp8_forward_speedup(16384) == pytest.approx(AT_16K)
    assert fp8_forward_speedup(LONG) == pytest.approx(AT_16K)         # flat beyond the last point
    # halfway between 2k and 4k in log length: the mean of the two ratios
    assert fp8_forward_speedup(2048 * math.sqrt(2)) == pytest.approx((733 / 625 + 918 / 638) / 2)


# ---- the serving model prices it ----------------------------------------------------------------------

def test_hopper_prefill_attention_is_faster_with_an_fp8_kv_cache_by_the_published_ratio():
    # Hopper: the FA3 kernel path; same model and GPU, only the KV cache differs
    t_bf16_kv = _prefill_attention_s(_scn(kv="bf16"))
    t_fp8_kv = _prefill_attention_s(_scn(kv="fp8"))
    assert t_bf16_kv / t_fp8_kv == pytest.approx(AT_16K, rel=1e-6)


def test_blackwell_calibrated_prefill_attention_takes_the_same_ratio():
    # data-centre Blackwell: no TensorRT-LLM kernel figures, the calibrated factor path
    t_bf16_kv = _prefill_attention_s(_scn(weights="nvfp4", kv="bf16", gpu="b200"), gpu="b200")
    t_fp8_kv = _prefill_attention_s(_scn(weights="nvfp4", kv="fp8", gpu="b200"), gpu="b200")
    assert t_bf16_kv / t_fp8_kv == pytest.approx(AT_16K, rel=1e-6)


def test_other_engines_and_weight_only_formats_keep_the_16_bit_kernel():
    assert _prefill_attention_s(_scn(engine="vllm", kv="fp8")) == pytest.approx(
        _prefill_attention_s(_scn(engine="vllm", kv="bf16")), rel=1e-9)
    assert _prefill_attention_s(_scn(weights="awq-int4", kv="fp8")) == pytest.approx(
        _prefill_attention_s(_scn(weights="awq-int4", kv="bf16")), rel=1e-9)


# ---- measured priors of the factors resting on the TensorRT-LLM rows (scripts/calibrate_speed.py) ----------

def test_prefill_attention_prior_reproduces_cudnns_published_b200_forward_rate():
    # the prior x η_attn(Blackwell) x 16-bit peak x clock = cuDNN's B200 causal forward at 16k: 1349.763 TFLOP/s
    P = thaw(speed.load_efficiency())
    b200 = get_gpu("b200")
    rate = (cs.trtllm_prefill_attention_prior(P) * P["attention"]["blackwell"] * speed.peak_flops(b200, "bf16")
            * speed.clock_factor(P, b200))
    assert rate / 1e12 == pytest.approx(1349.763, rel=1e-4)


def test_blackwell_fp4_prior_reproduces_the_measured_nvfp4_gemm_rate():
    # with the prior as Blackwell's FP4 efficiency, the model's own GEMM time at flashinfer's benchmark shape gives
    # back the measured 3370.4 TFLOP/s (CUTLASS NVFP4 on a B200, flashinfer PR #1979)
    P = thaw(speed.load_efficiency())
    P["matmul"]["blackwell"]["fp4"] = cs.blackwell_fp4_prior(P)
    m, n, k = 1024.0, 7168.0, 4608.0
    t = speed.gemm_time(P, get_gpu("b200"), "fp4", m, k, n, weight_bytes_per_el=0.5, act_bytes=0.5)
    assert 2 * m * k * n / t / 1e12 == pytest.approx(3370.4, rel=0.02)

"""Fused-attention kernels in training (estimate/attention_kernels.py). Kernel figures: Shah et al. 2024
(FlashAttention-3), H100 SXM5, BF16, head dim 128 — forward causal / backward TFLOP/s at 8k tokens:
FlashAttention-2 333 / 318, cuDNN 529 / 518, FlashAttention-3 602 / 559."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.estimate.attention_kernels import attention_time, kernel_rates


def test_published_rates_at_8k_and_interpolation_between_points():
    assert kernel_rates("cudnn", "hopper", 8192, 1.0) == (529e12, 518e12)
    assert kernel_rates("fa2", "hopper", 8192, 1.0) == (333e12, 318e12)
    # halfway between 4k (319 / 310) and 8k (333 / 318) in log2(sequence): 326 / 314
    f, b = kernel_rates("fa2", "hopper", 4096 * 2 ** 0.5, 1.0)
    assert f == pytest.approx(326e12) and b == pytest.approx(314e12)
    assert kernel_rates("fa2", "hopper", 100, 1.0) == (191e12, 214e12)      # clamped below 512
    assert kernel_rates("fa2", "ampere", 8192, 1.0) is None                  # sm86 Ampere: calibrated


def test_forward_backward_and_recompute_by_hand():
    # 1e15 forward FLOPs: 1e15/333e12 + 2.5e15/318e12 = 3.003 + 7.862 s; full recompute adds a forward
    assert attention_time(1e15, 0.0, (333e12, 318e12)) == pytest.approx(1e15 / 333e12 + 2.5e15 / 318e12)
    assert attention_time(1e15, 1.0, (333e12, 318e12)) == pytest.approx(2e15 / 333e12 + 2.5e15 / 318e12)


def _attn_seconds(framework: str, gpu: str = "h100-sxm", **train) -> float:
    scn = {"model": "llama-3.1-8b", "task": "train", "framework": framework,
           "hardware": {"gpu": gpu, "count": 8}, "parallel": {"zero": 3},
           "train": {"seq_len": 8192, "micro_batch": 1, "global_batch": 8, **train}}
    return api.estimate(scn).performance.breakdown["compute_attention"]


def test_megatron_runs_cudnn_and_pytorch_stacks_flash_attention_2_on_hopper_before_torch_2_11():
    # same FLOPs, so the times stand in the ratio of the kernels' (1/F + 2.5/B)
    fa2 = 1 / 333 + 2.5 / 318
    cudnn = 1 / 529 + 2.5 / 518
    old = _attn_seconds("torchtitan", torch_version="2.10")
    assert _attn_seconds("megatron") / old == pytest.approx(cudnn / fa2, rel=1e-6)
    assert _attn_seconds("torchtitan", torch_version="unknown") == pytest.approx(old, rel=1e-12)
    assert _attn_seconds("hf", attention_kernel="cudnn") == pytest.approx(_attn_seconds("megatron"), rel=1e-6)
    assert _attn_seconds("torchtitan", attention_kernel="fa3") < _attn_seconds("megatron")


def test_families_without_published_kernels_keep_the_calibrated_efficiency():
    # Ada (L40S) and sm86 Ampere (A40): no published figures for any kernel, so cuDNN and FA2 time the same
    assert _attn_seconds("hf", gpu="l40s", attention_kernel="cudnn") == pytest.approx(_attn_seconds("torchtitan", gpu="l40s"))
    assert _attn_seconds("hf", gpu="a40", attention_kernel="cudnn") == pytest.approx(_attn_seconds("torchtitan", gpu="a40"))


def test_eager_attention_is_not_a_fused_kernel():
    assert _attn_seconds("megatron", attention="eager") > 3 * _attn_seconds("megatron")


def _serving(engine: str, gpu: str = "h100-sxm"):
    from gpuplan import pipeline
    from gpuplan.estimate import speed
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": gpu, "count": 1},
           "infer": {"engine": engine, "prompt_len": 8192, "output_len": 16, "concurrency": 1}}
    r = pipeline.resolve(scn)
    return speed.serving_model(r.scenario, r.model, r.gpu)


def test_serving_prefill_runs_the_engines_kernel_forward_rate():
    # vLLM and SGLang: FlashAttention-3 on Hopper (602 TFLOP/s forward causal at 8k); HF: FlashAttention-2 (333)
    assert _serving("vllm").prefill_attention_time(1e15, 8192) == pytest.approx(1e15 / 602e12, rel=1e-9)
    assert _serving("sglang").prefill_attention_time(1e15, 8192) == pytest.approx(1e15 / 602e12, rel=1e-9)
    assert _serving("hf").prefill_attention_time(1e15, 8192) == pytest.approx(1e15 / 333e12, rel=1e-9)
    # TensorRT-LLM's sm90 context FMHA is a warp-specialized flash-attention kernel: FA3's rate on Hopper;
    # on Blackwell (no published figures) it keeps its calibrated factor (A100: see the sm80 tests below)
    assert _serving("trtllm").prefill_attention_time(1e15, 8192) == pytest.approx(1e15 / 602e12, rel=1e-9)
    b200 = _serving("trtllm", "b200")
    assert b200.prefill_attention_time(1e15, 8192) == pytest.approx(b200.prefill_attention_time(1e15), rel=1e-9)


# AMD Instinct (issue 13). PyTorch SDPA on ROCm runs AOTriton by default (torch/backends/cuda/__init__.py
# `preferred_rocm_fa_library`, torch 2.13.0): with no torch stated to bundle AOTriton 0.10b, the calibrated
# efficiency stays (0.10b's published backward: below).
# Composable Kernel FMHA (ROCm TE, ROCm flash-attn): MI300X, ROCm 6.3.2, BF16, d128, 16k tokens:
# 353 TFLOP/s forward / 194 backward (ROCm/flash-attention#142), one point, so a flat rate.

def test_rocm_defaults_aotriton_for_sdpa_and_ck_for_transformer_engine():
    from gpuplan.estimate.attention_kernels import default_kernel
    assert default_kernel("torchtitan", "cdna3") == "aotriton"
    assert default_kernel("hf", "cdna2") == "aotriton"
    assert default_kernel("megatron", "cdna3") == "ck"
    assert default_kernel("torchtitan", "hopper") == "fa2" and default_kernel("megatron", "hopper") == "cudnn"
    assert default_kernel("megatron") == "cudnn"            # no GPU known: the NVIDIA defaults


def test_ck_on_mi300x_is_one_flat_published_point():
    assert kernel_rates("ck", "cdna3", 16384, 1.0) == (353e12, 194e12)
    assert kernel_rates("ck", "cdna3", 2048, 1.0) == (353e12, 194e12)
    assert kernel_rates("aotriton", "cdna3", 8192, 1.0) is None
    assert kernel_rates("ck", "cdna4", 8192, 1.0) is None       # MI355X: nothing published for CK here


def test_sdpa_on_mi300x_keeps_the_calibrated_efficiency_and_ck_times_by_hand():
    # the calibrated path: forward FLOPs / (peak x eta_attn) x (1 + recompute share + 2 x bwd/2.5), where
    # bwd is the kernel's backward-to-forward matmul ratio: FA2 5/2 (-> 3 + share), AOTriton 7/2 (-> 3.8 + share)
    sdpa = _attn_seconds("torchtitan", gpu="mi300x", recompute="none")
    fa2 = _attn_seconds("torchtitan", gpu="mi300x", attention_kernel="fa2", recompute="none")
    assert sdpa / fa2 == pytest.approx(3.8 / 3.0, rel=1e-9)
    ck = _attn_seconds("torchtitan", gpu="mi300x", attention_kernel="ck")
    assert _attn_seconds("megatron", gpu="mi300x") == pytest.approx(ck, rel=1e-9)
    # llama-3.1-8b, 8k tokens, no recompute: forward causal FLOPs per GPU = 4 * 8192 * (8192+1)/2 (keys seen
    # per query, diagonal included) * 4096 (32 heads x 128) * 32 layers
    f = 4 * 8192 * (8192 + 1) / 2 * 4096 * 32
    assert ck == pytest.approx(f / 353e12 + 2.5 * f / 194e12, rel=1e-6)


# AOTriton 0.10b on MI300X (torch 2.8 and the 2.9 nightlies before the 0.11b bump, pytorch#161754 of 2025-08-29):
# AMD's operator tuning database (ROCm/aotriton@1ad31776 v3python/rules/op_database.sqlite3, "MI300X's attn_bwd
# tuning results", gfx942_mod0, bf16, head dim 128, causal, backend 0 = the Triton split backward) gives op$tflops =
# 4*B*H*S^2*D / t of 53.5835 (1k), 62.3842 (2k) and 60.4826 (8k); in the table's convention (backward 2.5 x the
# causally halved forward FLOPs) x 2.5 x 0.5: 66.98, 77.98, 75.60 TFLOP/s. The forward is not timed there.

TA04_TORCH = "2.9.0.dev20250811+rocm6.4"        # validation/gathered/train.csv TA04-TA07


def test_which_torch_builds_bundle_aotriton_0_10b():
    from gpuplan.estimate.attention_kernels import bundles_aotriton_010b, default_kernel
    assert bundles_aotriton_010b(TA04_TORCH) and bundles_aotriton_010b("2.8.0+rocm6.3")
    assert bundles_aotriton_010b("2.9.0.dev20250828+rocm6.4")
    assert not bundles_aotriton_010b("2.9.0.dev20250829+rocm6.4")     # the day the 0.11b bump was opened
    for v in ("2.9.0", "2.9.1+rocm6.4", "2.7.1+rocm6.3", "2.13", "unknown", None):
        assert not bundles_aotriton_010b(v)
    assert default_kernel("torchtitan", "cdna3", TA04_TORCH) == "aotriton-0.10b"
    assert default_kernel("torchtitan", "cdna3", "2.13") == "aotriton"          # 0.11b and later: calibrated
    assert default_kernel("megatron", "cdna3", TA04_TORCH) == "ck"
    assert default_kernel("torchtitan", "hopper", TA04_TORCH) == "fa2"


def test_aotriton_0_10b_backward_is_amds_published_op_tuning_rate():
    assert 60.482555895449174 * 2.5 * 0.5 == pytest.approx(75.60, abs=0.005)
    assert kernel_rates("aotriton-0.10b", "cdna3", 8192, 1.0) == (None, pytest.approx(75.60e12))
    assert kernel_rates("aotriton-0.10b", "cdna3", 2048, 1.0) == (None, pytest.approx(77.98e12))
    # 4k: halfway in log2(sequence) between 2k and 8k (the database's 4k row, timed at batch 2 x 2 heads, leaves
    # 256 work-groups for 304 CUs and is not in the table)
    assert kernel_rates("aotriton-0.10b", "cdna3", 4096, 1.0)[1] == pytest.approx((77.98e12 + 75.60e12) / 2)
    assert kernel_rates("aotriton-0.10b", "cdna3", 512, 1.0)[1] == pytest.approx(66.98e12)     # clamped
    assert kernel_rates("aotriton-0.10b", "cdna4", 8192, 1.0) is None


@pytest.mark.parametrize("recompute,share", [("none", 0.0), ("full", 1.0)])
def test_sdpa_on_mi300x_with_aotriton_0_10b_times_the_published_backward_by_hand(recompute, share):
    from gpuplan.estimate.calibration import packaged
    # forward at the calibrated CDNA3 rate (eta_attn x 1307.4 TFLOP/s bf16 peak, clock factor 1 on CDNA), the
    # backward at AMD's measured 75.60 TFLOP/s (8k) in the table's 2.5x convention; llama-3.1-8b, 8k tokens
    f = 4 * 8192 * (8192 + 1) / 2 * 4096 * 32
    fwd_rate = packaged()["attention"]["cdna3"] * 1307.4e12
    t = _attn_seconds("torchtitan", gpu="mi300x", recompute=recompute, torch_version=TA04_TORCH)
    assert t == pytest.approx((1 + share) * f / fwd_rate + 2.5 * f / 75.60e12, rel=1e-6)
    # about 2.2x the calibrated AOTriton time (7/5 of FA2's backward at the calibrated rate) for no recompute
    old = _attn_seconds("torchtitan", gpu="mi300x", recompute=recompute)
    assert old == pytest.approx(f / fwd_rate * (1 + share + 2 * 3.5 / 2.5), rel=1e-6)
    assert t > old


def test_vllm_on_rocm_runs_triton_unified_attention_without_figures():
    # vllm/platforms/rocm.py get_attn_backend_cls: default "Triton Unified Attention" (AITER only with
    # VLLM_ROCM_USE_AITER=1): no published MI300X prefill rate, so the calibrated prefill factor stays
    from gpuplan.estimate.attention_kernels import engine_kernel
    assert engine_kernel("vllm", "cdna3") == "triton" and engine_kernel("vllm", "hopper") == "fa3"
    assert engine_kernel("sglang", "cdna3") is None and engine_kernel("vllm") == "fa3"
    mi = _serving("vllm", "mi300x")
    assert mi.prefill_kernel == "triton"
    assert mi.prefill_attention_time(1e15, 8192) == pytest.approx(mi.prefill_attention_time(1e15), rel=1e-9)


def test_aotriton_backward_does_seven_tile_matmuls_to_flash_attention_2s_five():
    # ROCm/aotriton 0.10b tritonsrc/bwd_inner_dk_dv.py: qk, dv, dp, dk; bwd_inner_dq.py: qk, dp, dq
    from gpuplan.estimate.attention_kernels import backward_flop_ratio
    assert backward_flop_ratio("aotriton") == 7 / 2
    assert backward_flop_ratio("fa2") == backward_flop_ratio("ck") == backward_flop_ratio(None) == 5 / 2
    # full recompute adds one forward: (1 + 1 + 2 x 3.5/2.5) / (1 + 1 + 2) = 4.8 / 4
    full = _attn_seconds("torchtitan", gpu="mi300x", recompute="full")
    full_fa2 = _attn_seconds("torchtitan", gpu="mi300x", attention_kernel="fa2", recompute="full")
    assert full / full_fa2 == pytest.approx(4.8 / 4.0, rel=1e-9)
    # NVIDIA stacks keep FlashAttention-2's five matmuls: unchanged
    assert _attn_seconds("torchtitan", torch_version="2.10") == pytest.approx(
        _attn_seconds("torchtitan", attention_kernel="fa2"), rel=1e-12)
    # with a kernel rate, the backward FLOPs scale the same way: f/F + 3.5 f/B
    assert attention_time(1e12, 0.0, (200e12, 100e12), 3.5) == pytest.approx(1e12 / 200e12 + 3.5e12 / 100e12)


# ---- data-centre Blackwell: cudnn-frontend's B200 SDPA training benchmark (cuDNN 9.10.2) -----------------

def test_b200_cudnn_published_points():
    # artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv @cb560b9, pyt_cudnn rows
    assert kernel_rates("cudnn", "blackwell-dc", 8192, 1.0) == (1197.391e12, 939.954e12)
    assert kernel_rates("cudnn", "blackwell-dc", 4096, 1.0) == (874.116e12, 694.726e12)
    # only cuDNN is taken: the benchmark's FlashAttention-2 rows are not (which SDPA backend PyTorch picks on
    # sm_100 is not settled here)
    assert kernel_rates("fa2", "blackwell-dc", 8192, 1.0) is None


def test_megatron_on_b200_times_attention_at_the_published_cudnn_rates():
    # B200 is the reference GPU (scale 1): the time is the forward FLOPs x (1/F + 2.5/B) at 8k
    # (1197.391 / 939.954 TFLOP/s), the same FLOPs H100 runs at cuDNN's 529 / 518 scaled by nothing
    b200 = _attn_seconds("megatron", gpu="b200")
    h100 = _attn_seconds("megatron")
    ratio = (1 / 1197.391 + 2.5 / 939.954) / (1 / 529 + 2.5 / 518)
    assert b200 / h100 == pytest.approx(ratio, rel=1e-6)


def test_consumer_blackwell_keeps_the_calibrated_efficiency():
    # GeForce / workstation Blackwell (sm_120) run other kernels than B200 (sm_100): no published figures
    from gpuplan.estimate import speed
    from gpuplan.hardware import get_gpu
    assert speed._kernel_family(get_gpu("b200")) == "blackwell-dc"
    assert speed._kernel_family(get_gpu("gb300")) == "blackwell-dc"
    assert speed._kernel_family(get_gpu("rtx-5090")) == "blackwell"
    assert speed._kernel_family(get_gpu("rtx-pro-6000")) == "blackwell"
    assert _attn_seconds("megatron", gpu="rtx-pro-6000") == pytest.approx(_attn_seconds("torchtitan", gpu="rtx-pro-6000"))


# ---- A100 (sm80): FlashAttention-2's published forward + backward rate ------------------------------------
# Dao 2023 (arXiv:2307.08691) Fig. 4d = flash-attention assets/flash2_a100_fwd_bwd_benchmark.png @4f285b35,
# "With causal mask, head dimension 128", A100 80GB SXM4: FlashAttention-2 forward + backward TFLOP/s
# 99 / 133 / 155 / 173 / 182 / 189 at 512 / 1k / 2k / 4k / 8k / 16k (FLOPs: 3.5 x the causal forward's).

def test_a100_fa2_rows_are_the_published_combined_rate():
    assert kernel_rates("fa2", "ampere-sm80", 8192, 1.0) == (182e12, 182e12)
    assert kernel_rates("fa2", "ampere-sm80", 512, 1.0) == (99e12, 99e12)
    # halfway between 2k (155) and 4k (173) in log2(sequence): 164
    f, b = kernel_rates("fa2", "ampere-sm80", 2048 * 2 ** 0.5, 1.0)
    assert f == pytest.approx(164e12) and b == pytest.approx(164e12)
    assert kernel_rates("fa2", "ampere-sm80", 65536, 1.0) == (189e12, 189e12)   # clamped above 16k
    assert kernel_rates("cudnn", "ampere-sm80", 8192, 1.0) is None
    assert kernel_rates("fa1-triton", "ampere-sm80", 8192, 1.0) is None


def test_a100_fa2_training_attention_by_hand():
    # llama-3.1-8b, 8k tokens, one sequence per GPU, no recompute: forward causal FLOPs per GPU
    # 4 * 8192 * 8193/2 * 4096 * 32; forward + backward = 3.5 x that at 182 TFLOP/s (A100 SXM 80GB: scale 1)
    f = 4 * 8192 * (8192 + 1) / 2 * 4096 * 32
    fa2 = _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="none")
    assert fa2 == pytest.approx(3.5 * f / 182e12, rel=1e-6)
    # full recompute adds one forward at the same (combined) rate
    assert _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="full") == pytest.approx(4.5 * f / 182e12, rel=1e-6)
    # Transformer Engine keeps FlashAttention below compute capability 9.0: Megatron on A100 runs FA2 too
    assert _attn_seconds("megatron", gpu="a100-sxm-80gb", recompute="none") == pytest.approx(fa2, rel=1e-12)


def test_mpt_triton_kernel_keeps_the_calibrated_efficiency_on_a100():
    # the calibration's own llm-foundry rows (MPT attn_impl: triton) are marked fa1-triton: no rows, so the
    # calibrated path, forward time x (1 + 2) with no recompute, forward = f / (312e12 x eta x clock)
    from gpuplan.estimate.calibration import load_efficiency
    from gpuplan.estimate import speed
    from gpuplan.hardware import get_gpu
    P = load_efficiency()
    a100 = get_gpu("a100-sxm-80gb")
    f = 4 * 8192 * (8192 + 1) / 2 * 4096 * 32
    eta = P["attention"]["ampere"]
    tri = _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="none", attention_kernel="fa1-triton")
    assert tri == pytest.approx(3 * f / (312e12 * eta * speed.clock_factor(P, a100)), rel=1e-6)
    # and FlashAttention-2 is faster than that FA1-era rate
    assert _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="none") < 0.75 * tri


def test_sm86_ampere_and_the_rest_of_sm80_are_told_apart():
    # flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h run_mha_fwd_hdim128: other tiles when
    # is_sm8x (cc 8.x, x > 0); the A100 figures stand for cc 8.0 parts only
    from gpuplan.estimate import speed
    from gpuplan.hardware import get_gpu
    for g in ("a100-sxm-80gb", "a100-pcie-40gb", "a800-sxm-80gb", "a30"):
        assert speed._kernel_family(get_gpu(g)) == "ampere-sm80"
    for g in ("rtx-3090", "a10", "a40", "rtx-a6000", "jetson-agx-orin-64gb"):
        assert speed._kernel_family(get_gpu(g)) == "ampere"


# ---- A100 (sm80) serving prefill: FlashAttention-2's published rate, forward-only ----------------------------
# vLLM: FLASH_ATTN first below cc 10 (vllm/platforms/cuda.py @002db495), FA version 2 unless major == 9
# (vllm/attention/utils/fa_utils.py @0fa99d44); SGLang: FlashInfer by default off Hopper (sgl-project/sglang
# @eea4254e docs/backend/attention_backend.md), an FA2-algorithm prefill. Only the forward + backward rate is
# published for A100 (Fig. 4d: 99 / 133 / 155 / 173 / 182 / 189 TFLOP/s at 512 ... 16k), so the forward takes it.

def test_vllm_and_sglang_run_flash_attention_2_below_hopper():
    from gpuplan.estimate.attention_kernels import engine_kernel
    for eng in ("vllm", "sglang"):
        assert engine_kernel(eng, "ampere") == "fa2" and engine_kernel(eng, "ada") == "fa2"
        assert engine_kernel(eng, "hopper") == "fa3"
    # TensorRT-LLM keeps its own FMHA (calibrated off Hopper), llama.cpp names none
    assert engine_kernel("trtllm", "ampere") == "fa3" and engine_kernel("llama.cpp", "ampere") is None
    assert _serving("vllm", "a100-sxm-80gb").prefill_kernel == "fa2"


def test_a100_serving_prefill_takes_the_published_fa2_rate_by_hand():
    # A100 SXM 80GB is the reference GPU (scale 1): 1e15 FLOPs of a prefix reaching 8k tokens at 182 TFLOP/s,
    # at 512 tokens at 99, and flat at 189 beyond 16k (32k prompt)
    for eng in ("vllm", "sglang", "hf"):
        s = _serving(eng, "a100-sxm-80gb")
        assert s.prefill_scale == pytest.approx(1.0, rel=1e-12)
        assert s.prefill_attention_time(1e15, 8192) == pytest.approx(1e15 / 182e12, rel=1e-9)
        assert s.prefill_attention_time(1e15, 512) == pytest.approx(1e15 / 99e12, rel=1e-9)
        assert s.prefill_attention_time(1e15, 32768) == pytest.approx(1e15 / 189e12, rel=1e-9)


def test_a100_serving_prefill_no_longer_uses_the_training_calibrated_factor():
    # the calibrated path: 312 TFLOP/s x eta_attn(ampere) x clock, the FA1-generation fwd+bwd fit (~0.28 of
    # peak); the published FA2 rate at 16k (189 = 0.61 of peak) is about twice as fast
    from gpuplan.estimate import speed
    from gpuplan.estimate.calibration import load_efficiency
    from gpuplan.hardware import get_gpu
    P = load_efficiency()
    a100 = get_gpu("a100-sxm-80gb")
    calibrated = 1e15 / (312e12 * P["attention"]["ampere"] * speed.clock_factor(P, a100))
    t = _serving("vllm", "a100-sxm-80gb").prefill_attention_time(1e15, 16384)
    assert t == pytest.approx(1e15 / 189e12, rel=1e-9)
    assert t < 0.6 * calibrated


def test_a100_llama_cpp_and_trtllm_prefill_keep_their_calibrated_factors():
    # no kernel figures stand for llama.cpp's or TensorRT-LLM's sm80 kernels: the length does not matter
    for eng in ("llama.cpp", "trtllm"):
        s = _serving(eng, "a100-sxm-80gb")
        assert s.prefill_scale is None
        assert s.prefill_attention_time(1e15, 8192) == pytest.approx(s.prefill_attention_time(1e15), rel=1e-9)


def test_sm86_and_ada_serving_prefill_keep_the_calibrated_factor():
    # vLLM runs FA2 there too, but the A100 figures stand for cc 8.0 only (other tiles on sm86/sm89)
    for g in ("a10", "l40s"):
        s = _serving("vllm", g)
        assert s.prefill_kernel == "fa2" and s.prefill_scale is None
        assert s.prefill_attention_time(1e15, 8192) == pytest.approx(s.prefill_attention_time(1e15), rel=1e-9)


def test_a100_training_attention_is_unchanged_by_the_serving_rate():
    # training keeps FA2's combined rate for forward + backward (3.5 x forward FLOPs at 182 at 8k) and the
    # llm-foundry rows' fa1-triton kernel keeps the calibrated eta_attn: the serving change touches neither
    f = 4 * 8192 * (8192 + 1) / 2 * 4096 * 32
    assert _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="none") == pytest.approx(3.5 * f / 182e12, rel=1e-6)
    from gpuplan.estimate import speed
    from gpuplan.estimate.calibration import load_efficiency
    from gpuplan.hardware import get_gpu
    P = load_efficiency()
    eta = P["attention"]["ampere"]
    tri = _attn_seconds("torchtitan", gpu="a100-sxm-80gb", recompute="none", attention_kernel="fa1-triton")
    assert tri == pytest.approx(3 * f / (312e12 * eta * speed.clock_factor(P, get_gpu("a100-sxm-80gb"))), rel=1e-6)

# PyTorch SDPA from torch 2.11 (issue 13): check_prefer_cudnn_attention puts cuDNN first when the loaded cuDNN is
# past 9.15.0 on sm90/sm100 (pytorch@001f694a sdp_utils.cpp); the 2.11 wheels bundle 9.19. Rates measured through
# torch 2.11 on the lent H200 (validation/device/h200-2026-12-04c-sdpa_mask.csv, is_causal rows, no backend forced).

def test_torch_minor_parses_wheel_and_nightly_versions():
    from gpuplan.estimate.attention_kernels import torch_minor
    assert torch_minor("2.11.0+cu130") == (2, 11) and torch_minor("2.6.0a0+git1963fc8") == (2, 6)
    assert torch_minor("2.9.0.dev20250811+rocm6.4") == (2, 9) and torch_minor("2.13") == (2, 13)
    assert torch_minor("unknown") is None and torch_minor(None) is None


def test_sdpa_stacks_pick_cudnn_from_torch_2_11_on_sm90_and_sm100_only():
    from gpuplan.estimate.attention_kernels import default_kernel
    assert default_kernel("torchtitan", "hopper", "2.13", "hopper") == "cudnn-sdpa"
    assert default_kernel("hf", "hopper", "2.11.0+cu130", "hopper") == "cudnn-sdpa"
    assert default_kernel("hf", "blackwell", "2.11", "blackwell-dc") == "cudnn"       # B200 rows: SDPA on cuDNN
    assert default_kernel("hf", "blackwell", "2.13", "blackwell") == "fa2"            # GeForce/workstation sm120
    assert default_kernel("hf", "ampere", "2.13", "ampere-sm80") == "fa2"             # sm80: not preferred
    for old in ("2.10", "2.8.0", "unknown", None):
        assert default_kernel("deepspeed", "hopper", old, "hopper") == "fa2"
    assert default_kernel("megatron", "hopper", "2.8", "hopper") == "cudnn"           # Transformer Engine: any torch


def test_cudnn_sdpa_rates_are_the_h200_timings_by_hand():
    # head dim 128, batch 4 x 32 heads x 2048 tokens: causal forward FLOPs 2*4*32*128*2048^2 = 1.37439e11;
    # forward 0.2652992 ms -> 518.1 TFLOP/s; backward 2.5x those FLOPs over 1.2532224 - 0.2652992 ms -> 347.8
    assert kernel_rates("cudnn-sdpa", "hopper", 2048, 1.0, 128) == (518.1e12, 347.8e12)
    assert 1.37439e11 / 0.2652992e-3 == pytest.approx(518.1e12, rel=2e-4)
    assert 2.5 * 1.37439e11 / (1.2532224e-3 - 0.2652992e-3) == pytest.approx(347.8e12, rel=2e-4)
    # head dim 64 runs its own tile (368.4 / 274.2 at 2k); head dim 96 the 128 tile padded: x 96/128
    assert kernel_rates("cudnn-sdpa", "hopper", 2048, 1.0, 64) == (368.4e12, 274.2e12)
    f, b = kernel_rates("cudnn-sdpa", "hopper", 2048, 1.0, 96)
    assert f == pytest.approx(518.1e12 * 0.75) and b == pytest.approx(347.8e12 * 0.75)


def test_torch_version_picks_the_timed_kernel_end_to_end():
    # the default torch (2.13) prices cudnn-sdpa on an H200; a stated 2.10 prices FlashAttention-2
    assert _attn_seconds("torchtitan", gpu="h200-sxm") == pytest.approx(
        _attn_seconds("torchtitan", gpu="h200-sxm", attention_kernel="cudnn-sdpa"), rel=1e-12)
    assert _attn_seconds("hf", gpu="h200-sxm", torch_version="2.10") == pytest.approx(
        _attn_seconds("hf", gpu="h200-sxm", attention_kernel="fa2"), rel=1e-12)

"""transformers' SDPA path with an explicit mask (estimate/attention_kernels.py MASKED_SDPA_KERNEL, speed.py
sdpa_masked_windows). Measured on the lent H200 (validation/device/h200-2026-12-04c-sdpa_mask.csv, torch 2.11.0+cu130,
cuDNN 9.19, bf16, boolean causal mask (b, 1, s, s) with is_causal=False; backend CUDNN_ATTENTION):

    b x h x s x d            forward ms   forward + backward ms
    4 x 32 x 2048 x 128      0.8121536    3.364031982
    4 x 32 x 2048 x  96      0.8163       3.2245 (window 2047: 0.8172 / 3.2092)   <- not in the rate table

The kernel computes the whole s x s square: forward FLOPs 4·b·h·d·s², backward 2.5x. The Phi-3-mini step profile
(HK06, validation/device/h200-2026-12-04-kernels.jsonl): 32 fprop calls 25.63 ms, 32 bprop calls 75.72 ms."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.estimate.attention_kernels import kernel_rates, masked_sdpa_kernel

SQUARE_128 = 4 * 4 * 32 * 128 * 2048 ** 2          # 2.749e11 forward FLOPs of the d=128 call
SQUARE_96 = 4 * 4 * 32 * 96 * 2048 ** 2            # 2.062e11


def test_masked_rate_is_the_measured_square_rate():
    f, b = kernel_rates("cudnn-masked", "hopper", 2048, 1.0, 128)
    # 2.749e11 / 0.8121536 ms = 338.5 TFLOP/s; backward 2.5 x 2.749e11 / (3.364032 - 0.812154) ms = 269.3
    assert f == pytest.approx(SQUARE_128 / 0.8121536e-3, rel=1e-3)
    assert b == pytest.approx(2.5 * SQUARE_128 / (3.364031982e-3 - 0.8121536e-3), rel=1e-3)


def test_head_dim_96_runs_the_128_tile_held_out():
    # the d=96 rows are not in the table: the 128 tile's rate x 96/128 predicts them
    f, b = kernel_rates("cudnn-masked", "hopper", 2048, 1.0, 96)
    assert f == pytest.approx(338.5e12 * 0.75, rel=2e-3)
    fwd_ms, bwd_ms = SQUARE_96 / f * 1e3, 2.5 * SQUARE_96 / b * 1e3      # 0.812 and 2.552 ms
    assert fwd_ms == pytest.approx(0.8163, rel=0.02)                      # measured 0.8163
    assert bwd_ms == pytest.approx(3.2245 - 0.8163, rel=0.08)             # measured 2.408: +6 %


def test_masked_kernel_only_where_measured():
    assert masked_sdpa_kernel("hopper") == "cudnn-masked"
    # torch before 2.11 does not try cuDNN first: the masked call goes to the memory-efficient kernel (no rows);
    # an unknown version keeps the measured torch 2.11 kernel
    assert masked_sdpa_kernel("hopper", "2.10") is None
    assert masked_sdpa_kernel("hopper", "2.11.0+cu130") == masked_sdpa_kernel("hopper", "unknown") == "cudnn-masked"
    assert masked_sdpa_kernel("ampere") is None and masked_sdpa_kernel("blackwell-dc") is None


def _attn_ms(model: str, seq: int, attention: str = "sdpa", gpu: str = "h200-sxm", mb: int = 4) -> float:
    scn = {"model": model, "task": "finetune", "framework": "hf", "hardware": {"gpu": gpu, "count": 1},
           "train": {"method": "full", "seq_len": seq, "micro_batch": mb, "global_batch": mb, "recompute": "none",
                     "attention": attention}}
    return api.estimate(scn).performance.breakdown["compute_attention"] * 1e3


def test_phi3_mini_step_against_its_profile():
    # 32 layers x (2.062e11 / 253.9e12 + 2.5 x 2.062e11 / 202.0e12) s = 32 x (0.812 + 2.552) ms = 107.6 ms
    ms = _attn_ms("phi-3-mini-4k-instruct", 2048)
    f, b = 338.5e12 * 0.75, 269.3e12 * 0.75
    assert ms == pytest.approx(32 * (SQUARE_96 / f + 2.5 * SQUARE_96 / b) * 1e3, rel=2e-3)
    assert ms == pytest.approx(25.63 + 75.72, rel=0.08)                   # the HK06 profile: 101.4 ms
    # flash_attention_2 gets the window natively (no mask): the causal pricing, under half of it
    assert _attn_ms("phi-3-mini-4k-instruct", 2048, "flash") < 0.5 * ms


def test_no_mask_below_the_window_and_off_hopper():
    # 2,046 keys < window 2,047: transformers drops the mask (is_causal), priced as flash
    assert _attn_ms("phi-3-mini-4k-instruct", 2046) == pytest.approx(_attn_ms("phi-3-mini-4k-instruct", 2046, "flash"))
    # Gemma-2's local window 4,096 is not reached at 2,048 tokens (the HK05 run: is_causal, cuDNN kernels)
    assert _attn_ms("gemma-2-2b", 2048) == pytest.approx(_attn_ms("gemma-2-2b", 2048, "flash"))
    # A100: the masked call falls to the memory-efficient kernel, which has no rows: unchanged
    assert _attn_ms("phi-3-mini-4k-instruct", 2048, gpu="a100-sxm-80gb") == pytest.approx(
        _attn_ms("phi-3-mini-4k-instruct", 2048, "flash", gpu="a100-sxm-80gb"))


def test_only_the_local_layers_of_a_hybrid_model_are_masked():
    from gpuplan.models import get_model
    windows = get_model("gemma-3-4b-it").attention_windows
    local = sum(1 for w in windows if w)
    assert 0 < local < len(windows) and set(windows) == {1024, None}
    # the local layers (window 1,024) compute 4,096 keys a query instead of ~1,024 (window-capped causal)
    sdpa, flash = _attn_ms("gemma-3-4b-it", 4096, mb=1), _attn_ms("gemma-3-4b-it", 4096, "flash", mb=1)
    assert sdpa > 2 * flash
    # below the local window (1,000 < 1,024 keys) nothing is masked
    assert _attn_ms("gemma-3-4b-it", 1000, mb=1) == pytest.approx(_attn_ms("gemma-3-4b-it", 1000, "flash", mb=1))

"""Megatron-Core's dropless MoE host sync (estimate/moe_host.py, docs/speed.md §2.7). Expected values come from the
code read at NVIDIA/Megatron-LM core_v0.15.0 (0d7e02bd) and Transformer Engine's GroupedLinear, counted by hand."""
from __future__ import annotations

import pytest

from gpuplan.estimate import moe_host, speed
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict


def test_sync_counts_from_the_dispatcher_code():
    # token_dispatcher.py @core_v0.15.0: dropless all-to-all syncs at "before_ep_alltoall" (:524), the all-gather
    # dispatcher calls .cpu() (:280), DeepEP busy-waits (fused_a2a.py:103), HybridEP sizes its buffer on the host
    for d in ("alltoall", "allgather", "deepep", "hybridep"):
        assert moe_host.forward_syncs(d, drop_and_pad=False) == 1
    # drop-and-pad: torch.full(capacity) on the host, cuda_sync_point stays "no_sync" (:415, :446-466)
    assert moe_host.forward_syncs("alltoall", drop_and_pad=True) == 0
    # the backward reuses the host split lists (_AllToAll ctx, GroupedLinear ctx.m_splits)
    assert moe_host.BACKWARD_SYNCS_PER_MOE_LAYER == 0


def test_per_expert_launch_counts_from_grouped_linear():
    # forward: one GEMM per split; FP8 adds split_quantize's per-split quantize and the per-expert weight workspace
    assert moe_host.EXPERT_LAUNCHES_PER_LINEAR == {False: 1, True: 3}
    # backward: dgrad + wgrad GEMM per split; FP8 adds the grad-output split_quantize
    assert moe_host.EXPERT_BACKWARD_LAUNCHES_PER_LINEAR == {False: 2, True: 3}
    # 16 local experts, FP8, 100 Python ops of 20 us, launches of 3 us: (100 + 9) x 20 + 16 x 2 x 3 x 3 us
    h = moe_host.layer_forward_host_seconds(100, "alltoall", 16, True, 20e-6, 3e-6)
    assert h == pytest.approx((109 * 20 + 288) * 1e-6)


def test_exposure_segments_hand_arithmetic():
    # 24 MoE layers in 1 chunk: 23 forward-only segments at (3 - 2) ms; the last holds the 24-layer backward (hidden)
    e = moe_host.exposure(24, 1, 1, 3e-3, 2e-3, 2e-3, 4e-3)
    assert e.forward_segments == 23
    assert e.seconds == pytest.approx(23e-3)
    # a host-bound backward too: the last segment adds 3 + 24 x (5 - 4) - 2 = 25 ms
    assert moe_host.exposure(24, 1, 1, 3e-3, 5e-3, 2e-3, 4e-3).seconds == pytest.approx(23e-3 + 25e-3)
    # one layer per virtual chunk (Megatron-Bridge's VP 24 on 24 layers): every segment holds a backward chunk
    assert moe_host.exposure(24, 1, 24, 3e-3, 2e-3, 2e-3, 4e-3).seconds == 0.0
    # EP overlap pairs every forward layer with a backward: nothing exposed while host < GPU over the pair
    assert moe_host.exposure(24, 1, 1, 3e-3, 2e-3, 2e-3, 4e-3, paired=True).seconds == 0.0
    # forward-only (log-prob): every segment exposed
    assert moe_host.exposure(24, 1, 1, 3e-3, 0, 2e-3, 0, forward_only=True).seconds == pytest.approx(24e-3)
    # a GPU-bound layer exposes nothing
    assert moe_host.exposure(24, 1, 1, 1e-3, 1e-3, 2e-3, 4e-3).seconds == 0.0


def _scn(micro_batch: int, seq: int = 4096, **train):
    return scenario_from_dict({
        "model": "qwen3-30b-a3b", "task": "train", "framework": "megatron",
        "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
        "parallel": {"dp": 8, "tp": 1, "pp": 1, "ep": 8, "zero": 1},
        "train": {"seq_len": seq, "micro_batch": micro_batch, "global_batch": 8 * micro_batch, "precision": "bf16",
                  "recompute": "none", **train}})


def test_host_bound_dropless_step_waits_and_token_drop_does_not():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    short = speed.train_performance(_scn(1, seq=256), m, g)         # 256 tokens a layer: host-bound
    assert short.breakdown.get("host_wait", 0.0) > 0.0
    assert short.details["moe_sync_wait_s_per_microbatch"] > 0.0
    drop = speed.train_performance(_scn(1, seq=256, moe_capacity_factor=1.0), m, g)
    assert "host_wait" not in drop.breakdown and "moe_host_syncs_per_microbatch" not in drop.details
    long = speed.train_performance(_scn(2, seq=4096), m, g)         # 8,192 tokens a layer: GPU-bound
    assert "host_wait" not in long.breakdown


def test_dense_and_hf_steps_are_not_charged():
    g = get_gpu("h100-sxm")
    dense = scenario_from_dict({
        "model": "qwen3-8b", "task": "train", "framework": "megatron",
        "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
        "parallel": {"dp": 8, "tp": 1, "pp": 1, "zero": 1},
        "train": {"seq_len": 256, "micro_batch": 1, "global_batch": 8, "precision": "bf16", "recompute": "none"}})
    assert "host_wait" not in speed.train_performance(dense, get_model("qwen3-8b"), g).breakdown



def test_host_layer_time_and_exposed_segments_hand_arithmetic():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    est = speed.train_performance(_scn(1, seq=256), m, g)
    d = est.details
    # H100's default host is the reference host (speed 1): Qwen3-MoE's 82 counted forward ops per layer + the
    # all-to-all dispatcher's 9 calls at 0.77 ms / 42 ops (Llama-3.1-8B's layer under transformers 4.46.3) = 18.333 us,
    # and 16 local experts x 2 GroupedLinears x 1 BF16 GEMM launch at the 2.6 us bare op: 91 x 18.333 + 32 x 2.6 =
    # 1,751.53 us
    assert d["moe_sync_host_layer_forward_s"] == pytest.approx(1751.53e-6, abs=5e-7)   # details round to the microsecond
    # backward: 139 counted engine ops at 18.333 - (14.8 - 8.8) = 12.333 us, 32 x 2 BF16 GEMM launches (dgrad, wgrad)
    # at 2.6 us: 1,714.33 + 166.4 = 1,880.73 us
    assert d["moe_sync_host_layer_backward_s"] == pytest.approx(1880.73e-6, abs=5e-7)
    # PP 1, VP 1: 48 syncs a micro-batch, 47 forward-only segments; the last holds the last layer's forward rest and
    # the whole 48-layer backward (host-bound too at 256 tokens)
    assert d["moe_host_syncs_per_microbatch"] == 48
    h_f, g_f = d["moe_sync_host_layer_forward_s"], d["moe_sync_gpu_layer_forward_s"]
    h_b, g_b = d["moe_sync_host_layer_backward_s"], d["moe_sync_gpu_layer_backward_s"]
    per_mb = 47 * (h_f - g_f) + max(h_f + 48 * (h_b - g_b) - g_f, 0.0)
    assert d["moe_sync_wait_s_per_microbatch"] == pytest.approx(per_mb, rel=1e-3)
    assert est.breakdown["host_wait"] == pytest.approx(d["microbatches"] * per_mb, rel=1e-3)

"""Megatron without gradient_accumulation_fusion (train.grad_accum_fusion false): every micro-batch the DDP hook adds
each weight gradient into the gradient buffer, `param.main_grad.add_(param.grad.data)` (distributed_data_parallel.py
L493-507 @terrykong/Megatron-LM 2ff0f099), where the fused path accumulates inside the weight-gradient GEMM
(speed._unfused_wgrad_time; docs/speed.md sec. 2.19). NeMo RL runs this way: NeMo's GPTConfig and Megatron-Bridge's
GPTModelProvider set the flag from APEX's fused_weight_gradient_mlp_cuda importing, and NeMo RL v0.3.0 / 06beed91
lock no APEX."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
H100_BW = 3.35e12          # H100 SXM HBM3, datasheet (the catalog's mem_bandwidth_bytes_per_s)
VECTORIZED_SHARE = 0.8837  # elementwise_bandwidth.csv `vectorized` (the contiguous-copy share FSDP2's copies use)


def _scn(fusion=None, framework="megatron", method="full", **train):
    t = {"seq_len": 4096, "micro_batch": 1, "global_batch": 32, "recompute": "none", "method": method, **train}
    if fusion is not None:
        t["grad_accum_fusion"] = fusion
    return {"model": "llama-3.1-8b", "task": "train", "framework": framework,
            "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": 1},
            "train": t}


def _llama8b_fusable_params() -> int:
    # Llama-3.1-8B config.json: hidden 4096, 32 layers, 32 heads x 128, 8 kv heads, intermediate 14336, vocab 128256,
    # untied: per layer q + k + v + o = 4096 x (4096 + 1024 + 1024 + 4096), gate + up + down = 3 x 4096 x 14336;
    # the output layer 128256 x 4096 (the input embedding's gradient is added by the hook either way)
    per_layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    return 32 * per_layer + 128256 * 4096


def test_unfused_accumulation_by_hand_bf16_buffer():
    fused = api.estimate(_scn(grad_reduce_dtype="bf16")).performance
    unfused = api.estimate(_scn(False, grad_reduce_dtype="bf16")).performance
    assert "unfused_wgrad_accumulation_s" not in fused.details
    m = unfused.details["microbatches"]
    # read the bf16 gradient (2), read and write the bf16 buffer (2 + 2), every micro-batch
    by_hand = m * _llama8b_fusable_params() * 6.0 / (H100_BW * VECTORIZED_SHARE)
    assert unfused.details["unfused_wgrad_accumulation_s"] == pytest.approx(by_hand, rel=1e-4)   # rounded to 1 us
    assert unfused.step_time_s - fused.step_time_s == pytest.approx(by_hand, rel=1e-3)
    assert unfused.breakdown["compute_matmul"] == pytest.approx(fused.breakdown["compute_matmul"], rel=1e-12)


def test_fp32_buffer_reads_and_writes_four_bytes():
    unfused = api.estimate(_scn(False)).performance          # grad_reduce_dtype auto: Megatron-LM's fp32 buffer
    m = unfused.details["microbatches"]
    by_hand = m * _llama8b_fusable_params() * (2.0 + 4.0 + 4.0) / (H100_BW * VECTORIZED_SHARE)
    assert unfused.details["unfused_wgrad_accumulation_s"] == pytest.approx(by_hand, rel=1e-4)


def test_lora_base_weights_have_no_gradient_to_add():
    e = api.estimate(_scn(False, method="lora")).performance
    assert "unfused_wgrad_accumulation_s" not in e.details


def test_grad_accum_fusion_is_a_megatron_switch():
    from gpuplan.errors import InputError
    with pytest.raises(InputError, match="grad_accum_fusion"):
        scenario_from_dict(_scn(False, framework="torchtitan"))


def test_forward_only_pass_does_not_pay_it():
    from gpuplan.estimate.speed import forward_only_time
    from gpuplan.pipeline import resolve
    a, b = resolve(_scn()), resolve(_scn(False))
    fa = forward_only_time(a.scenario, a.model, a.gpu, network=a.network, params=a.speed_params)
    fb = forward_only_time(b.scenario, b.model, b.gpu, network=b.network, params=b.speed_params)
    assert fa["time"] == pytest.approx(fb["time"], rel=1e-12)


def test_nemo_rl_megatron_rows_run_without_it():
    rows = list(csv.DictReader(open(ROOT / "validation/gathered/posttrain.csv")))
    for r in rows:
        nemo_megatron = r["framework"] == "nemo-rl" and r["train_backend"] == "megatron-core"
        assert r["grad_accum_fusion"] == ("false" if nemo_megatron else ""), r["id"]


def test_megatron_launch_flag():
    from gpuplan.launch import launch_files
    for fused in (True, False):
        text = launch_files(scenario_from_dict(_scn(fused)), "megatron")["train_megatron.sh"]
        assert ("--no-gradient-accumulation-fusion" in text) is (not fused)

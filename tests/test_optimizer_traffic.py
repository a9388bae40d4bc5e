"""torch AdamW's optimizer-step traffic by implementation (estimate/optim.py), against the kernel times measured on
an H200 (validation/device/h200-2026-12-04-kernels.jsonl)."""
import pytest

from gpuplan import api
from gpuplan.estimate import optim


def test_adamw_element_passes_by_implementation():
    # foreach: mul_ 2 + lerp_ 3 + mul_ 2 + addcmul_ 3 + sqrt 2 + div_ 2 + add_ 2 + addcdiv_ 4 = 20 element accesses;
    # fused: read p, g, m, v and write p, m, v = 7
    assert optim.torch_adamw_traffic_bytes_per_param("foreach", 4.0) == 80.0
    assert optim.torch_adamw_traffic_bytes_per_param("fused", 4.0) == 28.0
    assert optim.torch_adamw_traffic_bytes_per_param("foreach", 2.0) == 40.0     # 16-bit params keep 16-bit states


def test_only_torch_optimizer_frameworks_follow_the_implementation():
    assert optim.step_traffic_bytes_per_param("adamw", "hf", "foreach", 4.0) == 80.0
    # Megatron-LM and DeepSpeed step with their own fused Adam whatever the field says
    assert optim.step_traffic_bytes_per_param("adamw", "megatron", "foreach", 4.0) == 30.0
    assert optim.step_traffic_bytes_per_param("adamw-8bit", "hf", "foreach", 4.0) == 18.0


def _opt_ms(impl: str) -> float:
    est = api.estimate({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                        "train": {"method": "full", "precision": "bf16", "seq_len": 2048, "micro_batch": 8,
                                  "recompute": "none", "optimizer_impl": impl}})
    return est.performance.breakdown["optimizer"] * 1e3


def test_llama_1b_optimizer_step_matches_the_measured_kernels():
    # measured on the H200: foreach AdamW kernels 26.4 ms, fused 10.0 ms for 1.24e9 fp32 parameters
    foreach, fused = _opt_ms("foreach"), _opt_ms("fused")
    assert foreach / fused == pytest.approx(20 / 7, rel=1e-6)
    assert foreach == pytest.approx(26.4, rel=0.10)
    assert fused == pytest.approx(10.0, rel=0.15)

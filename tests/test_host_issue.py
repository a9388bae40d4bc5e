"""The host issue floor of eager HF training steps (estimate/host_issue.py, docs/speed.md §2.12).

Expected values are hand arithmetic on measured facts: op counts of the real transformers code counted on CPU
(estimate/data/hf_train_ops.csv), CPU seconds per op timed on the development machine, the lent H200 host's timed
eager op (29.08 us), the HF decode constant (0.77 ms per Llama layer) and the kernel counts profiled on the H200.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.estimate import host_issue as hi
from gpuplan.hardware.hosts import get_host_cpu, host_eager_op_s
from gpuplan.models import get_model
from gpuplan.models.hf_ops import hf_ops_layer_kind

ROOT = Path(__file__).resolve().parents[1]

# Qwen1.5-MoE-A2.7B LoRA all-linear, full recompute, as HT11 ran it (validation/gathered/measured.csv)
HT11 = {"model": "qwen1.5-moe-a2.7b", "task": "finetune", "framework": "hf",
        "hardware": {"gpu": "h200-sxm", "count": 1, "host_cpu": "lent-h200-vm"},
        "train": {"method": "lora", "precision": "bf16", "master_weights": True, "optimizer": "adamw",
                  "optimizer_impl": "foreach", "recompute": "full", "attention": "sdpa", "seq_len": 2048,
                  "micro_batch": 2, "lora_rank": 16, "torch_version": "2.11.0+cu130"}}


def _scn(**over) -> dict:
    scn = json.loads(json.dumps(HT11))
    for k, v in over.items():
        part, key = k.split("__")
        if part == "top":
            scn[key] = v
        else:
            scn[part][key] = v
    return scn


def test_qwen2_moe_lora_step_ops_by_hand():
    """hf_train_ops.csv qwen2_moe rows: lora/full forward 127 per layer + 52, backward 294 per layer + 19; lora/none
    backward 172 per layer - 13. The recompute is the backward's excess over the no-recompute backward (294 - 172 =
    122 per layer, 19 + 13 = 32 fixed) and is Python-issued like the forward."""
    ops = hi.step_ops("qwen2_moe", "lora", "full", 24)
    assert ops.python == 24 * 127 + 52 + 24 * (294 - 172) + (19 + 13)        # 6,060
    assert ops.engine == 24 * 172 - 13                                        # 4,115


def test_lent_host_issue_seconds_by_hand():
    """The lent host pays its own timed op (29.08 us) plus the framework's extra over a bare op, timed on CPU:
    forward 14.8 - 2.6 = 12.2 us, autograd engine 8.8 - 2.6 = 6.2 us."""
    per = hi.op_seconds(0.77e-3, 1.0, 29.08e-6)
    assert per == (pytest.approx(41.28e-6), pytest.approx(35.28e-6))
    t = hi.issue_seconds(hi.step_ops("qwen2_moe", "lora", "full", 24), per)
    assert t == pytest.approx(6060 * 41.28e-6 + 4115 * 35.28e-6)             # 0.3953 s


def test_reference_host_per_op_is_the_decode_constant_per_counted_op():
    """0.77 ms per HF Llama decode layer, read on Llama-3.1-8B (GQA) under transformers 4.46.3, / the 42 ops that layer
    issues there (docs/speed.md §3.30 table) = 18.333 us a Python-issued op; an autograd-engine op is cheaper by the
    CPU-timed difference (14.8 - 8.8 = 6.0 us): 12.333 us. A desktop host (PassMark 4,243 vs 2,893) divides both."""
    assert hi.op_seconds(0.77e-3, 1.0, None) == (pytest.approx(0.77e-3 / 42), pytest.approx(0.77e-3 / 42 - 6.0e-6))
    fast = 4243 / 2893
    assert hi.op_seconds(0.77e-3, fast, None) == (pytest.approx(0.77e-3 / 42 / fast), pytest.approx((0.77e-3 / 42 - 6.0e-6) / fast))


def test_counted_ops_are_a_lower_bound_on_profiled_kernel_launches():
    """Each profiled H200 training step launched more kernels than the CPU count of its forward and backward ops
    (multi-kernel CUDA ops, the optimizer's per-chunk launches): the count is 0.65-0.89 of the launches."""
    seen = 0
    for name in ("h200-2026-12-04-measure.jsonl", "h200-2026-12-04-kernels.jsonl"):
        for line in (ROOT / "validation" / "device" / name).open(encoding="utf-8"):
            rec = json.loads(line)
            ops, t = (rec.get("measured") or {}).get("ops"), rec["scenario"].get("train")
            if not ops or not t:
                continue
            spec = get_model(rec["scenario"]["model"])
            n = hi.step_ops(hf_ops_layer_kind(spec, hi.counted_kinds()), t["method"], t["recompute"], spec.num_layers)
            assert 0.6 * ops["kernel_launches"] < n.python + n.engine < ops["kernel_launches"], rec["id"]
            seen += 1
    assert seen == 12


def test_lora_targets_interpolate_between_counted_rows():
    """q_proj + v_proj is the counted lora-qv row; all-linear the lora row; a target set between them lies between."""
    qv = hi.step_ops("llama", "lora", "full", 32, adapted_per_layer=2.0)
    assert qv.python == 32 * 54 + 33 + 32 * (132 - 82) + (19 + 18)
    assert qv.engine == 32 * 82 - 18
    full = hi.step_ops("llama", "lora", "full", 32)
    mid = hi.step_ops("llama", "lora", "full", 32, adapted_per_layer=4.5)       # half way from 2 to 7
    assert mid.python == pytest.approx((qv.python + full.python) / 2)
    # Phi-3 has no q_proj/v_proj (fused qkv_proj): its all-linear row stands
    assert hi.step_ops("phi3", "lora", "full", 32, 2.0) == hi.step_ops("phi3", "lora", "full", 32)


def test_lent_host_row():
    host = get_host_cpu("lent-h200-vm")
    assert host.eager_op_s == pytest.approx(29.08e-6)
    assert host_eager_op_s("lent-h200-vm", None) == pytest.approx(29.08e-6)
    assert host_eager_op_s("lent-h200-vm", 3000.0) is None      # a given rating describes another host
    assert host_eager_op_s("epyc-9654", None) is None


def test_moe_lora_step_is_host_bound_on_the_lent_host():
    """HT11: the GPU needs ~0.19 s; issuing the step takes 0.395 s on the lent host, which sets the step."""
    perf = api.estimate(_scn()).performance
    host = 6060 * 41.28e-6 + 4115 * 35.28e-6
    assert perf.details["step_bound"] == "host"
    assert perf.details["host_issue_s_per_microbatch"] == pytest.approx(host, rel=1e-5)
    assert perf.breakdown["compute"] + perf.breakdown["host_wait"] == pytest.approx(host, rel=1e-9)
    assert perf.breakdown["compute"] < 0.25 < host
    assert any("host-bound" in n for n in perf.notes)


def test_gpu_bound_steps_do_not_move():
    """A dense 8B LoRA step (HT03's settings) issues in ~0.39 s on the lent host but needs ~1 s of GPU: the floor
    leaves it where it was, as on the default host."""
    dense = json.loads(json.dumps(HT11))
    dense["model"] = "llama-3.1-8b"
    dense["train"]["micro_batch"] = 4
    lent = api.estimate(dense).performance
    dense["hardware"].pop("host_cpu")
    ref = api.estimate(dense).performance
    assert lent.details["step_bound"] == "gpu" == ref.details["step_bound"]
    assert lent.step_time_s == ref.step_time_s
    assert "host_wait" not in lent.breakdown


def test_uncounted_model_types_take_the_closest_counted_layer():
    """A dense type without its own rows is priced as a Llama layer, a MoE as Qwen3-MoE's; counted types keep theirs."""
    counted = hi.counted_kinds()
    assert {"llama", "qwen2_moe", "qwen3_moe", "mixtral", "gemma2", "phi3"} <= counted
    assert hf_ops_layer_kind(get_model("qwen1.5-moe-a2.7b"), counted) == "qwen2_moe"
    assert hf_ops_layer_kind(get_model("llama-3.2-1b"), frozenset({"qwen3_moe", "llama"})) == "llama"
    assert hf_ops_layer_kind(get_model("qwen1.5-moe-a2.7b"), frozenset({"qwen3_moe", "llama"})) == "qwen3_moe"


@pytest.mark.parametrize("over", [{"top__framework": "torchtitan"}, {"train__compile": True},
                                  {"top__tool": "unsloth"}])
def test_floor_only_for_eager_hf(over):
    """Other frameworks (their own fused ops), torch.compile and Unsloth's patched kernels are not priced by it."""
    perf = api.estimate(_scn(**over)).performance
    assert "host_issue_s_per_microbatch" not in perf.details and "host_wait" not in perf.breakdown

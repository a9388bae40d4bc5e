"""Megatron with tensor parallelism but without sequence parallelism (parallel.sp false): the layer's residual adds
and norms run over the whole sequence on every TP rank (speed._unsplit_residual_bytes; docs/speed.md sec. 2.18).
NeMo RL v0.3.0's Megatron configs run this way: grpo_math_1B_megatron.yaml L85 @b1c86a8 `sequence_parallel: false`,
which grpo_math_70B_megatron.yaml (NB03, TP 4) does not override."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.estimate import elementwise

ROOT = Path(__file__).resolve().parents[1]
H100_BW = 3.35e12          # H100 SXM HBM3, datasheet (the catalog's mem_bandwidth_bytes_per_s)


def _perf(framework: str = "megatron", model: str = "llama-3.1-70b", seq: int = 4096, **parallel):
    p = {"tp": 4, "pp": 1, "dp": 1, "zero": 1, **parallel}
    count = p["tp"] * p["pp"] * p["dp"]
    scn = {"model": model, "task": "train", "framework": framework,
           "hardware": {"gpu": "h100-sxm", "count": count}, "parallel": p,
           "train": {"seq_len": seq, "micro_batch": 1, "global_batch": 4, "recompute": "none"}}
    return api.estimate(scn).performance


def test_residual_region_is_two_add_norm_regions_of_22_bytes_fused():
    # region_bytes' docstring: fused add 6 + norm 4 forward, norm 6 + residual grad 6 backward = 22 per norm, two a layer
    assert elementwise.residual_region_bytes("fused", 8192) == 2 * 22 * 8192
    assert elementwise.residual_region_bytes("compiled", 4096) == 2 * 20 * 4096
    # the layer total keeps its value: Llama 70B (h 8192, kv 1024, i 28672) = 44 h + 8 (h + kv) + 16 i = 892,928
    assert elementwise.region_bytes("fused", 8192, 28672, 1024, gated=True, rope=True, gqa_copies=False) == 892928


def test_no_sequence_parallel_adds_the_replicated_region_by_hand():
    sp, nosp = _perf(sp=True), _perf(sp=False)
    assert "no_sequence_parallel_s" not in sp.details
    h, L, tokens, tp = 8192, 80, 4096, 4
    share = sp.details["elementwise_bandwidth_share"]
    m = sp.details["microbatches"]
    # 44 h bytes a token-layer, paid on each of the tp ranks instead of once over them: (tp - 1) / tp of it extra
    by_hand = m * 44 * h * (tp - 1) / tp * tokens * L / (H100_BW * share)
    assert nosp.details["no_sequence_parallel_s"] == pytest.approx(by_hand, rel=1e-6)
    assert nosp.breakdown["compute_memory_bound"] - sp.breakdown["compute_memory_bound"] == pytest.approx(by_hand, rel=1e-6)
    # nothing else of the step moves (the TP collectives are an all-reduce either way; no pipeline here)
    assert nosp.breakdown["compute_matmul"] == pytest.approx(sp.breakdown["compute_matmul"], rel=1e-12)
    assert nosp.breakdown["comm_tp_s"] == pytest.approx(sp.breakdown["comm_tp_s"], rel=1e-12)
    assert nosp.step_time_s > sp.step_time_s


def test_only_megatron_with_tensor_parallel_pays_it():
    assert "no_sequence_parallel_s" not in _perf(tp=1, dp=4, sp=False).details
    assert "no_sequence_parallel_s" not in _perf("torchtitan", sp=False).details
    assert "no_sequence_parallel_s" not in _perf("hf", model="llama-3.1-8b", tp=1, sp=False).details


def test_posttrain_rows_carry_the_sequence_parallel_their_configs_set():
    rows = {r["id"]: r for r in csv.DictReader(open(ROOT / "validation/gathered/posttrain.csv"))}
    # v0.3.0 / @06f6343: grpo_math_1B_megatron.yaml sequence_parallel false, kept by the 70B config (NB03, TP 4);
    # Qwen3-32B has no v0.3.0 config: the base's false (NB05, assumed, its notes say so)
    assert rows["NB03"]["train_sp"] == "false" and rows["NB05"]["train_sp"] == "false"
    # grpo_math_qwen30ba3b_megatron.yaml L40 @v0.3.0 sets True (NB06); the Qwen3-32B and Qwen3-235B performance
    # recipes set true (grpo-qwen3-32b-4n8g.yaml L23 @0b88ccc, async-grpo-qwen3-32b-8n8g.yaml L15 @519ac90,
    # grpo-qwen3-235b-16n8g.yaml L27 and -32n8g-async-1off.yaml L14 @06beed91)
    for rid in ("NB06", "NR05", "NR06", "NR09", "NR10"):
        assert rows[rid]["train_sp"] == "true", rid
    # every Megatron row with TP > 1 states it, but NR07: its recipe (@0b88ccc) runs TP 1 with sequence_parallel false,
    # the table TP 2, and gpuplan refuses a Megatron MoE at TP > 1 without sequence parallel (validate.py): default true
    for rid, r in rows.items():
        if r["train_backend"] == "megatron-core" and int(r["train_tp"] or 1) > 1 and not r["notes"].startswith("unscored"):
            assert r["train_sp"] in ("true", "false") or rid == "NR07", rid


def test_validate_gathered_passes_the_column_to_the_scenario():
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    import validate_gathered as vg
    rows = {r["id"]: r for r in csv.DictReader(open(ROOT / "validation/gathered/posttrain.csv"))}
    assert vg.posttrain_scenario(rows["NB03"])["parallel"]["sp"] is False
    assert vg.posttrain_scenario(rows["NB06"])["parallel"]["sp"] is True
    assert "sp" not in vg.posttrain_scenario(rows["NB01"])["parallel"]

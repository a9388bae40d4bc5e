"""Activation checkpointing, FSDP under pipeline parallelism, DeepSpeed buffers and FP8 training
(issue 13). Expected values are worked out by hand from the mechanisms' sources (estimate/recompute.py,
estimate/memory.py docstrings) or are published measurements."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.estimate.recompute import op_sac_layer_bytes, op_sac_recomputed_linear_share, recompute_plan
from gpuplan.models.registry import get_model
from gpuplan.scenario import Scenario

GiB = 1024 ** 3


def _scn(**over) -> Scenario:
    base = {"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
            "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
            "parallel": {"zero": 3},
            "train": {"precision": "bf16", "seq_len": 8192, "micro_batch": 2, "global_batch": 16,
                      "recompute": "selective"}}
    for k, v in over.items():
        if isinstance(v, dict):
            base[k] = {**base.get(k, {}), **v}
        else:
            base[k] = v
    return Scenario.model_validate(base)


def _mem(scn):
    return api.estimate(scn).memory


def test_torchtitan_op_sac_keeps_every_other_matmul_by_hand():
    # Llama-3.1-8B layer, bf16, tp=1. Forward matmuls: q(4096) k(1024) v(1024) o(4096) gate(14336)
    # up(14336) down(4096); saved: 1st, 3rd, 5th, 7th -> q, v, gate, down = 23552 elements.
    # + layer input 4096 + attention output 4096 (16-bit) + fp32 lse 32 heads.
    rep, shard, per_rank = op_sac_layer_bytes(get_model("llama-3.1-8b"), 2, 2)
    assert rep + shard + per_rank == 2 * (23552 + 4096 + 4096) + 4 * 32 == 63616
    assert per_rank == 2 * 4096           # down_proj's output: row-parallel, full width on every rank


def test_torchtitan_op_sac_recomputes_the_even_matmuls():
    # k (4096x1024) + o (4096x4096) + up (4096x14336) of 4096*(4096+1024+1024+4096) + 3*4096*14336
    k, o, up = 4096 * 1024, 4096 * 4096, 4096 * 14336
    total = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336
    assert op_sac_recomputed_linear_share(get_model("llama-3.1-8b")) == pytest.approx((k + o + up) / total)


def test_selective_means_core_attention_outside_torchtitan():
    m = get_model("llama-3.1-8b")
    assert recompute_plan("megatron", "selective", m, 32).kind == "selective-core"
    assert recompute_plan("torchtitan", "selective", m, 32).kind == "selective-op"
    assert recompute_plan("hf", "none", m, 32).linear_share == 0


def test_op_sac_cuts_torchtitan_activations_to_the_save_list():
    no_ac = _mem(_scn(train={"recompute": "none"})).components["activations"]
    sac = _mem(_scn()).components["activations"]
    # 16,384 tokens x 32 layers x 63,616 B = 33.35 GB kept under the per-op policy
    assert sac == pytest.approx(16384 * 32 * 63616, rel=0.02)
    assert sac < 0.5 * no_ac


def test_partial_full_recompute_interpolates_between_none_and_full():
    none = _mem(_scn(train={"recompute": "none"})).components["activations"]
    zero_layers = _mem(_scn(train={"recompute": "full", "recompute_layers": 0})).components["activations"]
    assert zero_layers == pytest.approx(none, rel=1e-9)
    full = _mem(_scn(train={"recompute": "full"})).components["activations"]
    half = _mem(_scn(train={"recompute": "full", "recompute_layers": 16})).components["activations"]
    assert half == pytest.approx((none + full) / 2, rel=0.01)


def test_uniform_groups_keep_one_input_per_group():
    full = _mem(_scn(train={"recompute": "full"})).components["activations"]
    grouped = _mem(_scn(train={"recompute": "full", "recompute_group": 4})).components["activations"]
    # 32 layers' inputs (16,384 tokens x 4096 x 2 B) become 8
    assert full - grouped == pytest.approx(16384 * 4096 * 2 * (32 - 8), rel=0.01)


def test_fsdp_under_pipeline_parallelism_holds_stage_weights_and_fp32_grads():
    kw = dict(hardware={"count": 16}, parallel={"zero": 3, "pp": 2},
              train={"global_batch": 64, "recompute": "full"})
    tt = _mem(_scn(**kw))
    assert any("pipeline parallelism keeps the stage's parameters" in n for n in tt.notes)
    one_mb = _mem(_scn(**{**kw, "train": {"global_batch": 16, "recompute": "full"}}))
    # a stage holds about half of 8.03B parameters: +2 bytes each gathered, +4 bytes fp32 gradients
    assert tt.components["weights"] - one_mb.components["weights"] == pytest.approx(8.03e9 / 2 * 2, rel=0.08)
    assert tt.components["gradients"] - one_mb.components.get("gradients", 0) >= 8.03e9 / 2 * 4 * 0.92


def test_deepspeed_zero3_buffers_from_the_generated_config():
    scn = _scn(framework="deepspeed", train={"recompute": "full"})
    mem = _mem(scn)
    # 3 reduce buckets + 5e8 reuse-distance/2 + 5e8 prefetch, 16-bit: 5e9 bytes
    assert mem.components["temporary"] >= 5.0e9
    assert any("DeepSpeed ZeRO buckets" in n for n in mem.notes)


def test_fp8_training_speedup_matches_torchtitan_published_ratio():
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1 (8 H100, FSDP, bs 2, seq 8192,
    # SAC op, torch.compile): bf16 6,667 TPS/GPU, +Float8 8,532 -> 1.28x. Tensorwise casts included.
    bf16 = api.estimate(_scn(train={"compile": True})).performance.tokens_per_s_per_gpu
    fp8 = api.estimate(_scn(train={"compile": True, "precision": "fp8"})).performance.tokens_per_s_per_gpu
    assert fp8 / bf16 == pytest.approx(8532 / 6667, rel=0.10)

"""TensorRT-LLM's per-layer step cost is measured, not fitted (estimate/trtllm_kernels.py, docs/speed.md §3.33): the
ops of one Llama decoder layer counted in TensorRT-LLM's code, each at its CUDA-graph floor in NVIDIA's aiconfigurator
databases (estimate/data/trtllm_op_floors.csv). Expected numbers are read off those published tables
(aiconfigurator @095f58a5, systems/data/<gpu>/.../trtllm/<version>/*.parquet: median of each table's 20 smallest
latencies) and hand arithmetic on the counted ops, not the code under test."""
import sys
from pathlib import Path

import pytest

from gpuplan.estimate import speed, trtllm_kernels as tk
from gpuplan.estimate.datafiles import rows
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import calibrate_speed as cs  # noqa: E402


def _floor(gpu, ver, op):
    return next(float(r["floor_us"]) for r in rows("trtllm_op_floors.csv")
                if r["gpu"] == gpu and r["trtllm_version"] == ver and r["op"] == op)


@pytest.mark.parametrize("gpu,ver,op,published_us", [
    # read from the parquet tables (latency in ms x 1000, median of the 20 smallest)
    ("h200-sxm", "1.2.0rc5", "attention_decode", 5.563),
    ("h200-sxm", "1.2.0rc5", "fp8_quantize", 2.636),
    ("h100-sxm", "1.3.0rc20", "linear_fp8_dynamic", 12.177),
    ("h100-sxm", "1.3.0rc20", "fp8_compute_scale", 6.803),
    ("b200", "1.3.0rc20", "linear_nvfp4", 5.922),
    ("gb200", "1.3.0rc10", "attention_decode", 8.973),
    # the MoE module (moe_perf.parquet, gated, CUTLASS, FP8 on Hopper / NVFP4 on Blackwell), the 16-bit Linear
    # (gemm_perf.parquet, bfloat16), TRT-LLM's all-reduce (custom_allreduce_perf.parquet, bf16, messages <= 16 KiB)
    ("h100-sxm", "1.3.0rc20", "moe_fp8_cutlass", 24.076),
    ("h200-sxm", "1.2.0rc5", "moe_fp8_cutlass", 28.926),
    ("b200", "1.3.0rc20", "moe_nvfp4_cutlass", 27.898),
    ("h200-sxm", "1.3.0rc10", "linear_bf16", 2.526),
    ("h100-sxm", "1.3.0rc20", "allreduce_tp8", 3.468),
])
def test_the_floors_are_the_published_tables(gpu, ver, op, published_us):
    assert _floor(gpu, ver, op) == pytest.approx(published_us, abs=0.002)


def test_every_floor_is_a_few_microseconds_and_cites_its_table():
    for r in rows("trtllm_op_floors.csv"):
        if r["op"].startswith("moe_"):        # the MoE module: routing, quantize, permute, 2 GEMMs, finalize
            assert 20.0 < float(r["floor_us"]) < 35.0, r
        else:                                  # a kernel launch in a graph, not a workload
            assert 0.4 < float(r["floor_us"]) < 20.0, r
        assert r["source_url"].startswith("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a5"), r
        # the all-reduce tables hold one row per message size: the 8 messages of 128 B ... 16 KiB
        assert int(r["points"]) == (8 if r["op"].startswith("allreduce_") else 20), r


def test_the_counted_layer_by_hand():
    # per family, the median over its GPU x version tables (H100/H200 x 1.2.0rc5/1.3.0rc10/1.3.0rc20; B200 x 3,
    # GB200 x 2)
    # Hopper: static FP8 Linear = 12.171 - 6.6195 (fp8 dynamic minus compute-scale, aiconfigurator's fp8_static);
    # o_proj on an FP8 input = that - 2.4405 (the quantize kernel); attention 5.5575; element-wise 2.4405
    lin = 12.171 - 6.6195
    hopper = 3 * lin + (lin - 2.4405) + 5.5575 + 3 * 2.4405
    assert tk.layer_fixed_seconds("hopper") == pytest.approx(hopper * 1e-6, rel=1e-3)
    # Blackwell: NVFP4 Linear 5.922, o_proj 5.922 - 2.153, attention 8.973, element-wise 2.153
    blackwell = 3 * 5.922 + (5.922 - 2.153) + 8.973 + 3 * 2.153
    assert tk.layer_fixed_seconds("blackwell") == pytest.approx(blackwell * 1e-6, rel=1e-3)


def test_the_layer_runs_eight_ops_in_both_formats():
    # modeling_llama.py @3a5901cd at TP1: qkv, gate_up, down (quantize + GEMM each), o_proj (GEMM), attention,
    # two fused add + RMSNorm and a SwiGLU
    for fam in ("hopper", "blackwell"):
        assert sum(n for _, n, _ in tk.LLAMA_LAYER_OPS[fam]) == 8


def test_the_packaged_cost_is_the_count_not_a_fit():
    assert ("engines", "trtllm", "layer_overhead_s") not in [p for p, _ in cs.FITTED]
    P = speed.load_efficiency()
    pri = tk.layer_overhead_priors()
    trt = P["engines"]["trtllm"]
    assert trt["family"]["hopper"]["layer_overhead_s"] == pytest.approx(pri["hopper"], rel=1e-3)
    assert trt["family"]["blackwell"]["layer_overhead_s"] == pytest.approx(pri["blackwell"], rel=1e-3)
    assert trt["layer_overhead_s"] == pytest.approx((pri["hopper"] + pri["blackwell"]) / 2, rel=1e-3)


@pytest.mark.parametrize("gid,fam", [("h200-sxm", "hopper"), ("b200", "blackwell")])
def test_a_step_pays_its_family_cost_per_layer(gid, fam):
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": gid, "count": 1},
                              "infer": {"weights": "fp8", "kv_cache": "fp8", "engine": "trtllm", "prompt_len": 128,
                                        "output_len": 128, "concurrency": 64}})
    m = get_model("llama-3.1-8b")
    sv = speed.serving_model(scn, m, get_gpu(gid))
    step = speed.load_efficiency()["engines"]["trtllm"]["step_overhead_s"]
    assert sv.decode_step(64, 256)["overhead"] == pytest.approx(step + tk.layer_overhead_priors()[fam] * m.num_layers,
                                                                rel=1e-3)


def test_the_moe_layer_by_hand():
    # medians over the family's tables (H100/H200 x 3 versions; B200 x 3, GB200 x 2), read off the CSV by hand:
    # Hopper MoE module 26.1505 (23.869 24.076 | 26.024 26.277 | 28.926 29.595), 16-bit Linear 2.5475 (0.471 2.519
    # 2.526 | 2.569 2.575 2.584); the GatedMLP's three ops it replaces: 2 x 5.5515 (static FP8 Linear) + 2.4405
    hopper = 2.5475 + 26.1505 - (2 * (12.171 - 6.6195) + 2.4405)
    assert tk.moe_layer_extra_seconds("hopper") == pytest.approx(hopper * 1e-6, rel=1e-3)
    # Blackwell: MoE module 28.630 (27.731 27.898 28.630 28.925 31.082), 16-bit Linear 1.763, less 2 x 5.922 + 2.153
    blackwell = 1.763 + 28.630 - (2 * 5.922 + 2.153)
    assert tk.moe_layer_extra_seconds("blackwell") == pytest.approx(blackwell * 1e-6, rel=1e-3)
    # an MoE layer costs more than a dense one: the MoE module alone is ~2x the three MLP ops
    assert 10e-6 < tk.moe_layer_extra_seconds("hopper") < 20e-6


def test_the_packaged_moe_cost_is_the_count():
    pri = tk.moe_layer_overhead_priors()
    trt = speed.load_efficiency()["engines"]["trtllm"]
    assert trt["family"]["hopper"]["moe_layer_overhead_s"] == pytest.approx(pri["hopper"], rel=1e-3)
    assert trt["family"]["blackwell"]["moe_layer_overhead_s"] == pytest.approx(pri["blackwell"], rel=1e-3)
    assert trt["moe_layer_overhead_s"] == pytest.approx((pri["hopper"] + pri["blackwell"]) / 2, rel=1e-3)


def _qwen3_moe_step(gid, weights):
    scn = scenario_from_dict({"model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": gid, "count": 1},
                              "infer": {"weights": weights, "kv_cache": "fp8", "engine": "trtllm", "prompt_len": 128,
                                        "output_len": 128, "concurrency": 64}})
    m = get_model("qwen3-30b-a3b")
    return speed.serving_model(scn, m, get_gpu(gid)), m


def test_a_hopper_fp8_moe_step_pays_the_moe_layers():
    # Qwen3-30B-A3B: 48 decoder layers, every one sparse (config.json: num_hidden_layers 48, decoder_sparse_step 1,
    # mlp_only_layers [])
    sv, m = _qwen3_moe_step("h100-sxm", "fp8")
    P = speed.load_efficiency()["engines"]["trtllm"]
    want = P["step_overhead_s"] + 48 * (P["family"]["hopper"]["layer_overhead_s"]
                                        + P["family"]["hopper"]["moe_layer_overhead_s"]
                                        + P["family"]["hopper"]["qk_norm_layer_overhead_s"])
    assert sv.decode_step(64, 256)["overhead"] == pytest.approx(want, rel=1e-3)


def test_the_nvfp4_moe_curve_carries_its_own_fixed_time():
    # on data-centre Blackwell the NVFP4 MoE call follows flashinfer PR 5301's published curve, whose points (>= 1
    # routed row per expert) hold the call's fixed time (speed.fp4_moe_rows_scale): no MoE floor on top
    sv, m = _qwen3_moe_step("b200", "nvfp4")
    assert sv.fp4_moe_curve
    P = speed.load_efficiency()["engines"]["trtllm"]
    want = P["step_overhead_s"] + 48 * (P["family"]["blackwell"]["layer_overhead_s"]
                                        + P["family"]["blackwell"]["qk_norm_layer_overhead_s"])
    assert sv.decode_step(64, 256)["overhead"] == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_collectives_alpha_already_exceeds_trtllm_all_reduce_floor(n):
    # why no all-reduce floor is added at TP > 1 (docs/speed.md §3.33): the alpha-beta model charges 2(n-1) x 3 us of
    # NVLink latency per all-reduce (estimate/comm.py), above TensorRT-LLM's own all-reduce kernel's measured floor
    # (2.8-3.9 us on Hopper, 3.9-5.7 us on Blackwell over 2-8 GPUs) at every TP size
    from gpuplan.estimate.comm import all_reduce_time, group_link
    for gid, fam in (("h100-sxm", "hopper"), ("b200", "blackwell")):
        link = group_link(get_gpu(gid), n, n, 8)
        assert all_reduce_time(16384, n, link) > tk.op_floor_us(fam, f"allreduce_tp{n}") * 1e-6


def test_a_qk_norm_layer_adds_one_elementwise_kernel():
    # Qwen3Attention(QKNormRoPEAttention), fuse_qk_norm_rope=True: one torch.ops.trtllm.fused_qk_norm_rope kernel a
    # layer (modules/qk_norm_attention.py @034c3f0a), at the element-wise floor: the FP8 quantize kernel's median
    # over the family's tables, Hopper 2.4405 us (1.219 1.307 2.280 | 2.601 2.636 2.684), Blackwell 2.153 us
    pri = tk.qk_norm_layer_overhead_priors()
    assert pri["hopper"] == pytest.approx(2.4405e-6, rel=1e-3)
    assert pri["blackwell"] == pytest.approx(2.153e-6, rel=1e-3)
    trt = speed.load_efficiency()["engines"]["trtllm"]
    assert trt["family"]["hopper"]["qk_norm_layer_overhead_s"] == pytest.approx(pri["hopper"], rel=1e-3)
    assert trt["qk_norm_layer_overhead_s"] == pytest.approx((pri["hopper"] + pri["blackwell"]) / 2, rel=1e-3)

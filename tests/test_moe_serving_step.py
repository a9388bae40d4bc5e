"""TensorRT-LLM's fused MoE step in serving (estimate/moe.py: tile padding of each expert's grouped-GEMM rows, the
memory-bound kernels around the GEMMs) and the measured prior of the grouped-GEMM row constant.

Expected numbers are hand arithmetic (written out in each test) or closed forms, never the code under test.
"""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from gpuplan.estimate import speed
from gpuplan.estimate.moe import fused_moe_pass_bytes, padded_rows_per_expert, serving_moe_kernel
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def test_padded_rows_one_and_two_tokens_by_hand():
    # one token, top-8 of 128: an expert runs with probability 8/128 = 1/16, and then one 128-row tile
    assert padded_rows_per_expert(1, 8, 128, 128) == pytest.approx(128 / 16)
    # two tokens: any row at all (1 - (15/16)^2 = 31/256) costs one tile: 128 x 31/256 = 15.5
    assert padded_rows_per_expert(2, 8, 128, 128) == pytest.approx(15.5)
    # every token on every expert (k = E): the rows are n exactly, rounded up to the tile
    assert padded_rows_per_expert(300, 4, 4, 128) == 384.0
    assert padded_rows_per_expert(0, 8, 128, 128) == 0.0


def test_padded_rows_many_tokens_add_half_a_tile():
    # 2^20 tokens, p = 1/16: X has mean 65536 and sd 248 (about two tiles), so X mod 128 is close to uniform and
    # E[ceil(X/128)·128] - E[X] = E[(-X) mod 128] = (0 + 1 + ... + 127)/128 = 63.5
    assert padded_rows_per_expert(2 ** 20, 8, 128, 128) == pytest.approx(65536 + 63.5, abs=0.5)


def test_fused_moe_pass_bytes_by_hand():
    # Qwen3-30B-A3B NVFP4 on one GPU, one token: h 2048, GEMM1 width 2 x 768, I 768, 8 routed rows,
    # GEMM inputs at 0.5 + 1/16 = 0.5625 B, 16-bit GEMM outputs
    quant = 2048 * (2 + 0.5625)                                  # 5248
    expand = 2048 * 2 * 0.5625                                   # 2304
    gemm1 = 2048 * 0.5625 + 1536 * 2                             # 4224
    act = 1536 * 2 + 768 * 0.5625                                # 3504
    gemm2 = 768 * 0.5625 + 2048 * 2                              # 4528
    finalize = 2048 * 2                                          # 4096 per row, + 4096 per token written
    want = quant + 8 * (expand + gemm1 + act + gemm2 + finalize) + 2048 * 2     # 158592
    assert want == 158592
    assert fused_moe_pass_bytes(1, 8, 2048, 1536, 768, 0.5625) == pytest.approx(want)
    # a 16-bit checkpoint is not quantized first
    assert fused_moe_pass_bytes(1, 8, 2048, 1536, 768, 2.0, quantize_input=False) == pytest.approx(
        8 * (2048 * 4 + (2048 * 2 + 1536 * 2) + (1536 * 2 + 768 * 2) + (768 * 2 + 2048 * 2) + 2048 * 2) + 2048 * 2)


def _qwen30b_b200(engine: str, batch: int):
    return scenario_from_dict({
        "model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": "b200", "count": 1},
        "infer": {"weights": "nvfp4", "kv_cache": "fp8", "engine": engine, "prompt_len": 128, "output_len": 128,
                  "concurrency": batch}})


def test_decode_step_prices_the_moe_passes_at_the_hbm_roofline():
    # 512 decode rows: 512 x 158592 B per MoE layer (test above) x 48 layers, over the B200's HBM bandwidth
    # times the packaged memory efficiency of its family
    m, g = get_model("qwen3-30b-a3b"), get_gpu("b200")
    P = speed.load_efficiency()
    sv = speed._Serving(_qwen30b_b200("trtllm", 512), m, g, P, None)
    step = sv.decode_step(512, 192)
    bw = g.mem_bandwidth_bytes_per_s * P["memory"].get("blackwell", P["memory"]["default"])
    assert step["moe_passes"] == pytest.approx(512 * 158592 * 48 / bw, rel=1e-9)
    # an engine whose MoE step is not priced kernel by kernel has none
    assert serving_moe_kernel("vllm") is None
    vl = speed._Serving(_qwen30b_b200("vllm", 512), m, g, P, None)
    assert vl.decode_step(512, 192)["moe_passes"] == 0.0


def test_expert_tiles_at_one_token_are_a_whole_tile():
    # one token: each of its 8 experts computes a whole 128-row tile for one row: 128 computed rows per running
    # expert, 128 computed rows per routed row
    m, g = get_model("qwen3-30b-a3b"), get_gpu("b200")
    sv = speed._Serving(_qwen30b_b200("trtllm", 1), m, g, speed.load_efficiency(), None)
    rows, pad = sv._expert_tiles(1)
    assert rows == pytest.approx(128.0) and pad == pytest.approx(128.0)
    # 4096 tokens: 256 rows per expert on average, a multiple of the tile, plus the spread's rounding:
    # between 256 and 256 + 128 rows computed
    rows, pad = sv._expert_tiles(4096)
    assert 256 < rows < 384 and pad == pytest.approx(rows / 256)


def test_rows_half_prior_reproduces_deepgemm_grouped_gemm_curve():
    # the prior is fitted on DeepGEMM's published grouped-GEMM rates; its form A·M/(M + d0_M) must pass within 5 %
    # of every published point (1297, 1288, 1233, 1040, 932 TFLOP/s at 8192 ... 256 rows per group)
    sys.path.insert(0, str(ROOT / "scripts"))
    import calibrate_speed as cs
    d0m = cs.grouped_gemm_rows_half_prior()
    assert 90.0 < d0m < 140.0
    rows = [r for r in csv.DictReader((ROOT / "src/gpuplan/estimate/data/grouped_gemm_rows.csv").open(encoding="utf-8"))
            if r["layout"] in ("contiguous", "masked")]     # DeepGEMM's rows (the H200 torch rows train a training D)
    m = [float(r["m_per_group"]) for r in rows]
    rate = [float(r["tflops_per_s"]) for r in rows]
    # the asymptote that best fits in log space, given d0_M: the geometric mean of rate x (M + d0_M)/M
    a = math.exp(sum(math.log(t * (x + d0m) / x) for x, t in zip(m, rate)) / len(m))
    for x, t in zip(m, rate):
        assert a * x / (x + d0m) == pytest.approx(t, rel=0.05)


def test_h200_grouped_gemm_measurement_sides_with_the_prior_not_the_fitted_constant():
    # gpuplan's own H200 run (validation/device/h200-2026-12-04-expert_gemm.csv, torch._grouped_mm, bf16, the
    # Qwen3-30B-A3B fc1 shape, 16 groups): 293.0 TFLOP/s at 128 rows per group, 712.8 at 2048, a ratio of 2.43.
    # M/(M + d0_M) predicts (2048/2160.5)/(128/240.5) = 1.78 at the prior d0_M = 112.5 and
    # (2048/4742)/(128/2822) = 9.52 at the fitted 2694: the measured curve is 1.4x from the prior, 3.9x from the fit.
    rows = {(r["test"], r["shape"], r["experts"], r["rows_per_expert"]): float(r["tflops"] or "nan") for r in
            csv.DictReader((ROOT / "validation/device/h200-2026-12-04-expert_gemm.csv").open(encoding="utf-8"))}
    ratio = rows[("torch_grouped_mm", "qwen3-30b-a3b fc1", "16", "2048")] / \
        rows[("torch_grouped_mm", "qwen3-30b-a3b fc1", "16", "128")]
    assert ratio == pytest.approx(712.8 / 293.0)

    def predicted(d0m):
        return (2048 / (2048 + d0m)) / (128 / (128 + d0m))
    assert predicted(112.5) == pytest.approx(1.78, abs=0.01)
    assert predicted(2694.0) == pytest.approx(9.52, abs=0.01)
    assert abs(math.log(ratio / predicted(112.5))) < abs(math.log(ratio / predicted(2694.0))) / 2


def test_tile_padding_only_where_the_kernels_fix_a_128_row_tile():
    # FP8 experts on Hopper run TMA warp-specialized grouped GEMMs only (M tiles 128/256); NVFP4 experts on B200 the
    # SM100 FP4 grouped GEMMs (M tiles 128/256). 16-bit experts may fall back to SM80 tiles from 16 rows, MXFP4 runs
    # mixed-input kernels: no padding priced there.
    def tile(model, weights, gpu_id):
        scn = scenario_from_dict({
            "model": model, "task": "infer", "hardware": {"gpu": gpu_id, "count": 1},
            "infer": {"weights": weights, "engine": "trtllm", "prompt_len": 128, "output_len": 128, "concurrency": 1}})
        return speed._Serving(scn, get_model(model), get_gpu(gpu_id), speed.load_efficiency(), None).moe_tile
    assert tile("qwen3-30b-a3b", "fp8", "h100-sxm") == 128
    assert tile("qwen3-30b-a3b", "nvfp4", "b200") == 128
    assert tile("qwen3-30b-a3b", "bf16", "h100-sxm") is None
    assert tile("gpt-oss-20b", "mxfp4", "h100-sxm") is None


def test_decode_tiles_run_at_the_measured_row_curve_not_the_fitted_constant():
    # a decode-only step's tile-padded expert GEMMs take DeepGEMM's measured d0_M (moe.measured_rows_half, ~112
    # rows), not matmul_rows_half fitted on prompt-carrying rows: batch-1 TPOT must not move with the fitted value,
    # while the prompt (TTFT) does
    import copy

    from gpuplan.estimate.moe import measured_rows_half
    assert 100 < measured_rows_half() < 125
    scn = scenario_from_dict({"model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"engine": "trtllm", "weights": "fp8", "kv_cache": "fp8", "prompt_len": 1024,
                                        "output_len": 128, "concurrency": 1}})
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    P = speed.load_efficiency()
    lo, hi = copy.deepcopy(P), copy.deepcopy(P)
    lo["matmul_rows_half"], hi["matmul_rows_half"] = 100.0, 5000.0
    a = speed.infer_performance(scn, m, g, params=lo)
    b = speed.infer_performance(scn, m, g, params=hi)
    assert a.tpot_s == pytest.approx(b.tpot_s, rel=1e-9)
    assert b.ttft_s > a.ttft_s


# ---------------------------------------------------------------------------------------------
# vLLM / SGLang: the Triton fused MoE's own tile padding (moe.triton_moe_block_m), no TensorRT-LLM-fitted constant


def test_triton_block_m_default_configs_by_hand():
    from gpuplan.estimate.moe import triton_moe_block_m
    # vLLM get_default_config (fused_moe.py @000d1458): 16-bit experts BLOCK_SIZE_M 16 while M <= E, else 64;
    # E = 8 with no tuned file for (E=8, N=1000) on an A100
    assert triton_moe_block_m("vllm", 8, 8, 1000, "a100-sxm-80gb", "bf16") == 16
    assert triton_moe_block_m("vllm", 9, 8, 1000, "a100-sxm-80gb", "bf16") == 64
    assert triton_moe_block_m("vllm", 9, 8, 1000, "a100-sxm-80gb", "fp8") == 64
    # SGLang (@006fc202): per-tensor FP8 64 while M <= E, else 128; 16-bit as vLLM
    assert triton_moe_block_m("sglang", 8, 8, 1000, "a100-sxm-80gb", "fp8") == 64
    assert triton_moe_block_m("sglang", 9, 8, 1000, "a100-sxm-80gb", "fp8") == 128
    assert triton_moe_block_m("sglang", 9, 8, 1000, "a100-sxm-80gb", "bf16") == 64
    # formats and engines the rule does not describe
    assert triton_moe_block_m("vllm", 9, 8, 1000, "b200", "fp4") is None
    assert triton_moe_block_m("trtllm", 9, 8, 1000, "h100-sxm", "bf16") is None


def test_triton_block_m_tuned_config_nearest_key():
    from gpuplan.estimate.moe import triton_moe_block_m
    # vLLM's E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json (@4466f1b5): keys ... 128 -> 16, 256 -> 32,
    # 512 -> 64, 1024 -> 64, 1536 -> 128 ... 4096 -> 128; the config at the key nearest M
    blk = lambda m: triton_moe_block_m("vllm", m, 128, 768, "h100-sxm", "bf16")   # noqa: E731
    assert blk(1) == 16
    assert blk(200) == 32        # |200 - 256| = 56 < |200 - 128| = 72
    assert blk(192) == 16        # a tie (64 each way): min() keeps the first key, 128
    assert blk(1300) == 128      # |1300 - 1536| = 236 < |1300 - 1024| = 276
    assert blk(10 ** 6) == 128
    # the file is for one rank's N: tensor parallel 2 leaves N = 384, whose own H100 file (@cd20a578) also has 32
    # at key 256; tensor parallel 8 leaves N = 96, with no file here -> the default, 64 (M = 200 > E = 128)
    assert triton_moe_block_m("vllm", 200, 128, 384, "h100-sxm", "bf16") == 32
    assert triton_moe_block_m("vllm", 200, 128, 96, "h100-sxm", "bf16") == 64
    # another GPU has no file here either -> default
    assert triton_moe_block_m("vllm", 200, 128, 768, "a100-sxm-80gb", "bf16") == 64


def _qwen30b_h100(engine: str, tp: int = 1, prompt: int = 1024, conc: int = 1):
    return scenario_from_dict({
        "model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": tp},
        "parallel": {"tp": tp},
        "infer": {"weights": "bf16", "kv_cache": "bf16", "engine": engine, "prompt_len": prompt, "output_len": 128,
                  "concurrency": conc}})


def test_vllm_expert_tiles_one_token_by_hand():
    # one token, top-8 of 128 experts, BLOCK_SIZE_M 16 (M = 1 <= E): each of its 8 experts computes one 16-row
    # tile for its one row: 16 rows per running expert, 16 computed rows per routed row
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    sv = speed._Serving(_qwen30b_h100("vllm"), m, g, speed.load_efficiency(), None)
    assert sv.triton_moe and sv._triton_block_m(1) == 16
    rows, pad = sv._expert_tiles(1, 16)
    assert rows == pytest.approx(16.0) and pad == pytest.approx(16.0)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_vllm_sglang_moe_do_not_read_the_trtllm_fitted_row_constant(engine):
    # matmul_rows_half is fitted on TensorRT-LLM rows only: a vLLM / SGLang MoE prompt and decode must not move
    # with it (a factor fitted on one source must not drive another)
    import copy
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    P = speed.load_efficiency()
    lo, hi = copy.deepcopy(P), copy.deepcopy(P)
    lo["matmul_rows_half"], hi["matmul_rows_half"] = 100.0, 5000.0
    for conc in (1, 64):
        scn = _qwen30b_h100(engine, prompt=4096, conc=conc)
        a = speed.infer_performance(scn, m, g, params=lo)
        b = speed.infer_performance(scn, m, g, params=hi)
        assert a.ttft_s == pytest.approx(b.ttft_s, rel=1e-12)
        assert a.tpot_s == pytest.approx(b.tpot_s, rel=1e-12)
    # MXFP4 experts (not the Triton fused MoE) neither
    scn = scenario_from_dict({"model": "gpt-oss-20b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"weights": "mxfp4", "engine": engine, "prompt_len": 4096, "output_len": 128,
                                        "concurrency": 8}})
    mm = get_model("gpt-oss-20b")
    assert speed.infer_performance(scn, mm, g, params=lo).ttft_s == pytest.approx(
        speed.infer_performance(scn, mm, g, params=hi).ttft_s, rel=1e-12)


def test_vllm_prompt_prices_the_padded_rows():
    # a 4096-token prompt chunk in vLLM's Triton MoE computes its padded rows: more FLOPs than the routed rows by
    # E[ceil(X/b)·b]/E[X] > 1, so the expert GEMM time is above the same rows unpadded and below twice that
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    sv = speed._Serving(_qwen30b_h100("vllm"), m, g, speed.load_efficiency(), None)
    blk = sv._triton_block_m(4096)
    assert blk == 128            # the tuned file's entry at 4096
    rows, pad = sv._expert_tiles(4096, blk)
    # 4096 x 8 / 128 = 256 routed rows per expert on average, two 128-row tiles; the spread adds up to one tile
    assert 256 < rows < 384 and 1.0 < pad < 1.5

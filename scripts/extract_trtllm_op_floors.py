"""Provenance of src/gpuplan/estimate/data/trtllm_op_floors.csv: the fixed time of TensorRT-LLM's own decode-step ops
in a CUDA graph, read out of NVIDIA's aiconfigurator databases (docs/speed.md §3.33).

aiconfigurator (github.com/ai-dynamo/aiconfigurator) times each TensorRT-LLM op in a CUDA graph (collector/helper.py
benchmark_with_power: the graph replayed 6 times after 3 warm-ups, latency = elapsed / calls): the Linear layer
(collector/trtllm/collect_gemm.py: tensorrt_llm._torch.modules.linear.Linear, up to 5 distinct copies per graph),
TensorRT-LLM's FP8 quantize ops (collect_computescale.py: 5 calls of
torch.ops.tensorrt_llm.static_quantize_e4m3_per_tensor per graph = `scale_matrix`; dynamic minus static =
`compute_scale`) and the attention op in its generation phase (collect_attn.py: the TRTLLM backend's attention
forward, one call per graph). Latencies are milliseconds per call.

An op's floor here is the median of its 20 smallest latencies over the table's whole grid (shapes where the work is
nil: what the op costs in a CUDA graph whatever it computes), per GPU and TensorRT-LLM version:

  linear_fp8_dynamic  TRT-LLM's FP8 Linear as collected: its checkpoint-less weights carry no input scale, so it runs
                      the dynamic path (quantize_e4m3_per_tensor: amax, scale and quantize, then cublas_scaled_mm)
  fp8_compute_scale   dynamic minus static FP8 quantize (the amax/scale part)
  fp8_quantize        static_quantize_e4m3_per_tensor (`scale_matrix`): one memory-bound element-wise kernel
  linear_nvfp4        TRT-LLM's NVFP4 Linear (fp4_quantize + nvfp4_gemm, static input scale), Blackwell only
  attention_decode    the attention op of a decode step (generation phase): FP8 KV cache, head_dim 128 (the Llama
                      rows' cache)
  linear_bf16         TRT-LLM's 16-bit Linear (one cuBLAS GEMM): an MoE layer's router (Qwen3Gate.forward is
                      torch.ops.trtllm.cublas_mm)
  moe_fp8_cutlass     the MoE module's forward (collector/trtllm/collect_moe.py: `moe.forward(hidden_states,
  moe_nvfp4_cutlass   router_logits)` of create_moe's module in a CUDA graph: routing, input quantize, the fused-MoE
                      op with its permute, grouped GEMMs, SwiGLU and finalize; no router GEMM, reduce_results=False),
                      gated experts, CUTLASS backend (kernel_source moe_torch_flow_cutlass; H200 1.2.0rc5's table,
                      from the older collector, is labelled moe_torch_flow: CUTLASS is the one Hopper FP8 per-tensor
                      backend), FP8 per-tensor on Hopper, NVFP4 on Blackwell
  allreduce_tp2/4/8   TRT-LLM's own all-reduce kernel (comm/trtllm/*/custom_allreduce_perf.parquet, bf16, one-shot
                      / two-shot by message size) over 2, 4 or 8 GPUs of the node, median over the messages of at
                      most AR_SMALL_BYTES (the grid has one row per size): for docs/speed.md §3.33 against
                      the collectives' alpha term (estimate/comm.py); nothing in the engine reads these rows

estimate/trtllm_kernels.py derives from them, as aiconfigurator derives its own `fp8_static` GEMM (aic-core
operators/gemm.rs: fp8 minus compute_scale, minus scale_matrix when the input is already FP8), the fixed time of
each op of one Llama decoder layer.

    PYTHONPATH=<dir with pyarrow> python3 scripts/extract_trtllm_op_floors.py <aiconfigurator git dir>

Needs pyarrow (not a gpuplan dependency) and a clone of aiconfigurator at COMMIT. Nothing in gpuplan imports it.
"""
from __future__ import annotations

import io
import statistics
import subprocess
import sys
from pathlib import Path

from cuda_timing import write_rows   # the device benchmarks' CSV writer (scripts/ is on sys.path)

COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"   # aiconfigurator main, 2026-08-21
DATA = "aic-core/src/aiconfigurator_core/systems/data"
# (gpuplan gpu id, gpuplan family, aiconfigurator system): every system with TensorRT-LLM GEMM, quantize and attention
# tables for the formats the perf-overview rows run (FP8 on Hopper, NVFP4 on data-centre Blackwell)
SYSTEMS = [("h100-sxm", "hopper", "h100_sxm"), ("h200-sxm", "hopper", "h200_sxm"),
           ("b200", "blackwell", "b200_sxm"), ("gb200", "blackwell", "gb200")]
VERSIONS = ("1.2.0rc5", "1.3.0rc10", "1.3.0rc20")
FLOOR_POINTS = 20
AR_SMALL_BYTES = 16384          # all-reduce floor: messages up to 16 KiB (one token of an 8192-wide bf16 hidden)
RETRIEVED = "2026-12-04"
OUT = Path(__file__).resolve().parents[1] / "src" / "gpuplan" / "estimate" / "data" / "trtllm_op_floors.csv"


def _table(git_dir: str, path: str) -> dict | None:
    import pyarrow.parquet as pq
    r = subprocess.run(["git", "--git-dir", git_dir, "show", f"{COMMIT}:{DATA}/{path}"], capture_output=True)
    return pq.read_table(io.BytesIO(r.stdout)).to_pydict() if r.returncode == 0 else None


def _floor(values: list[float]) -> tuple[float, int]:
    v = sorted(x for x in values if x > 0)[:FLOOR_POINTS]
    return statistics.median(v), len(v)


def main(git_dir: str) -> int:
    out = []
    for gpu, family, system in SYSTEMS:
        for ver in VERSIONS:
            gemm = _table(git_dir, f"{system}/gemm/trtllm/{ver}/gemm_perf.parquet")
            cs = _table(git_dir, f"{system}/quantize/trtllm/{ver}/computescale_perf.parquet")
            sm = _table(git_dir, f"{system}/quantize/trtllm/{ver}/scale_matrix_perf.parquet")
            attn = _table(git_dir, f"{system}/attention/trtllm/{ver}/generation_attention_perf.parquet")
            moe = _table(git_dir, f"{system}/moe/trtllm/{ver}/moe_perf.parquet")
            ar = _table(git_dir, f"{system}/comm/trtllm/{ver}/custom_allreduce_perf.parquet")
            if not (gemm and cs and sm and attn and moe and ar):
                continue
            moe_dt = "fp8" if family == "hopper" else "nvfp4"
            moe_gated = [ms for dt, src, ms in zip(moe["moe_dtype"], moe["kernel_source"], moe["latency"])
                         if dt == moe_dt and src in ("moe_torch_flow", "moe_torch_flow_cutlass")]
            ops = {"linear_fp8_dynamic": [ms for dt, ms in zip(gemm["gemm_dtype"], gemm["latency"]) if dt == "fp8"],
                   "linear_nvfp4": [ms for dt, ms in zip(gemm["gemm_dtype"], gemm["latency"]) if dt == "nvfp4"],
                   "fp8_compute_scale": list(cs["latency"]),
                   "fp8_quantize": list(sm["latency"]),
                   "attention_decode": [ms for ms, kv, hd in zip(attn["latency"], attn["kv_cache_dtype"],
                                                                 attn["head_dim"]) if kv == "fp8" and hd == 128],
                   "linear_bf16": [ms for dt, ms in zip(gemm["gemm_dtype"], gemm["latency"]) if dt == "bfloat16"],
                   f"moe_{moe_dt}_cutlass": moe_gated}
            for n in (2, 4, 8):
                # the table's grid is one row per message size (128 B ... ): the floor is the median over the
                # messages of at most AR_SMALL_BYTES (a few decode tokens), not the 20 smallest of the whole grid
                ops[f"allreduce_tp{n}"] = [ms for g, dt, b, ms in zip(ar["num_gpus"], ar["allreduce_dtype"],
                                                                     ar["message_size"], ar["latency"])
                                           if g == n and dt == "bfloat16" and b <= AR_SMALL_BYTES]
            if family == "hopper":
                ops.pop("linear_nvfp4")                 # no NVFP4 on Hopper
            base = f"https://github.com/ai-dynamo/aiconfigurator/blob/{COMMIT}/{DATA}/{system}"
            src = {"fp8_quantize": f"{base}/quantize/trtllm/{ver}/scale_matrix_perf.parquet",
                   "fp8_compute_scale": f"{base}/quantize/trtllm/{ver}/computescale_perf.parquet",
                   "attention_decode": f"{base}/attention/trtllm/{ver}/generation_attention_perf.parquet",
                   f"moe_{moe_dt}_cutlass": f"{base}/moe/trtllm/{ver}/moe_perf.parquet"}
            src.update({f"allreduce_tp{n}": f"{base}/comm/trtllm/{ver}/custom_allreduce_perf.parquet"
                        for n in (2, 4, 8)})
            for op, vals in sorted(ops.items()):
                if not vals:
                    continue
                ms, n = _floor(vals)
                out.append({"gpu": gpu, "family": family, "trtllm_version": ver, "op": op,
                            "floor_us": f"{ms * 1000:.3f}", "points": n,
                            "source_url": src.get(op, f"{base}/gemm/trtllm/{ver}/gemm_perf.parquet"),
                            "retrieved": RETRIEVED})
    write_rows(out, str(OUT))
    print(f"{len(out)} rows -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/ai-dynamo+aiconfigurator/repo"))

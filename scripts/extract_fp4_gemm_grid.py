"""Provenance of src/gpuplan/estimate/data/fp4_gemm_shapes.csv: NVIDIA's aiconfigurator GEMM databases, read out.

aiconfigurator (github.com/ai-dynamo/aiconfigurator) ships per-GPU, per-framework GEMM latency tables collected by its
collectors (collector/<framework>/collect_gemm.py): each framework's own linear layer timed in a CUDA graph (mean of 6
replays after 3 warm-ups, collector/helper.py benchmark_with_power), for bf16, fp8, fp8_block and nvfp4 on the same
(M, N, K) grid in one collection. The NVFP4 rows time the whole quantized linear: the activation's NVFP4 quantize
kernel plus the NVFP4 x NVFP4 GEMM (TensorRT-LLM: tensorrt_llm._torch.modules.linear.Linear with QuantAlgo.NVFP4 and a
static input scale; vLLM 0.24.0: FlashInferCuteDslNvFp4LinearKernel; SGLang 0.5.14: flashinfer fp4_quantize +
mm_fp4(backend="cute-dsl")). Latencies are milliseconds per call.

This keeps the rows at M = 4,096 / 8,192 / 16,384 (the rows-per-GEMM of a prefill step, and the M >= 4,096 cut of
the FP8 fit) and K, N in {512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384}.

    PYTHONPATH=<dir with pyarrow> python3 scripts/extract_fp4_gemm_grid.py <aiconfigurator git dir>

Needs pyarrow (not a gpuplan dependency) and a clone of aiconfigurator at COMMIT. Nothing in gpuplan imports it.
"""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from cuda_timing import write_rows   # the device benchmarks' CSV writer (scripts/ is on sys.path)

COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"   # aiconfigurator main, 2026-08-21
DATA = "aic-core/src/aiconfigurator_core/systems/data"
# (gpuplan gpu id, aiconfigurator system, framework, version, NVFP4 kernel the collector's linear ran)
SOURCES = [
    ("b200", "b200_sxm", "trtllm", "1.3.0rc20", "TensorRT-LLM Linear NVFP4 (fp4_quantize + nvfp4_gemm)"),
    ("gb200", "gb200", "trtllm", "1.3.0rc20", "TensorRT-LLM Linear NVFP4 (fp4_quantize + nvfp4_gemm)"),
    ("b200", "b200_sxm", "vllm", "0.24.0", "vLLM FlashInferCuteDslNvFp4LinearKernel (scaled_fp4_quant + mm_fp4 cute-dsl)"),
    ("b200", "b200_sxm", "sglang", "0.5.14", "SGLang flashinfer fp4_quantize + mm_fp4 cute-dsl"),
]
ROWS = (4096, 8192, 16384)
DIMS = (512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
RETRIEVED = "2026-12-04"
OUT = Path(__file__).resolve().parents[1] / "src" / "gpuplan" / "estimate" / "data" / "fp4_gemm_shapes.csv"


def main(git_dir: str) -> int:
    import pyarrow.parquet as pq
    out = []
    for gpu, system, fw, ver, kernel in SOURCES:
        path = f"{DATA}/{system}/gemm/{fw}/{ver}/gemm_perf.parquet"
        blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], check=True,
                              capture_output=True).stdout
        t = pq.read_table(io.BytesIO(blob)).to_pydict()
        lat = {}
        for dt, m, n, k, ms in zip(t["gemm_dtype"], t["m"], t["n"], t["k"], t["latency"]):
            lat.setdefault((dt, m, n, k), ms)
        url = f"https://github.com/ai-dynamo/aiconfigurator/blob/{COMMIT}/{path}"
        for m in ROWS:
            for n in DIMS:
                for k in DIMS:
                    b, f = lat.get(("bfloat16", m, n, k)), lat.get(("nvfp4", m, n, k))
                    if b is None or f is None:
                        continue
                    out.append({"gpu": gpu, "framework": fw, "framework_version": ver, "nvfp4_kernel": kernel,
                                "m": m, "n": n, "k": k, "bf16_ms": f"{b:.6g}", "nvfp4_ms": f"{f:.6g}",
                                "source_url": url, "retrieved": RETRIEVED})
    write_rows(out, str(OUT))
    print(f"{len(out)} rows -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/ai-dynamo+aiconfigurator/repo"))

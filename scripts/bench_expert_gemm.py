"""Device check for the MoE training terms that rest on no published table (docs/speed.md §2.7, "What is left"):

1. Expert GEMM efficiency by rows per expert. Transformer Engine's GroupedLinear on Hopper issues one cuBLAS GEMM
   per local expert, spread over compute streams (`nvte_multi_stream_cublas_gemm`). This emulates it with
   torch.matmul over `--streams` CUDA streams and reports the achieved TFLOP/s and its share of a large square
   GEMM measured on the same GPU, for the expert shapes of the gathered MoE rows (Qwen3-30B-A3B, GPT-OSS-120B)
   and M = 128 ... 8192 rows per expert. With torch._grouped_mm available, the single-kernel grouped GEMM too.
2. Host seconds per eager op: the CPU time to enqueue small kernels while the GPU is busy, the unit a host-bound
   (dropless, per-layer synchronised) MoE step is made of.

Nothing here is imported by gpuplan or its tests. Run it on a GPU machine and keep the CSV it writes:

    python3 scripts/bench_expert_gemm.py --out "$OUT/expert_gemm.csv"      # ~1-2 minutes on an H100/H200

The CSV columns say what each number is; feed nothing back into the package without citing the run (GPU, driver,
torch and cuBLAS versions are written into every row).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_timing import seconds_per_call, write_rows  # noqa: E402

# (label, K, N): expert fc1 is [h -> 2 x ffn] (gate and up fused), fc2 [ffn -> h]
SHAPES = (("qwen3-30b-a3b fc1", 2048, 1536), ("qwen3-30b-a3b fc2", 768, 2048),
          ("gpt-oss-120b fc1", 2880, 5760), ("gpt-oss-120b fc2", 2880, 2880))
ROWS = (128, 256, 512, 1024, 2048, 4096, 8192)


def _square_tflops(torch, dtype) -> float:
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    return 2 * n ** 3 / seconds_per_call(lambda: a @ b, 20) / 1e12


def _expert_loop(torch, xs, ws, streams):
    main = torch.cuda.current_stream()
    outs = []
    for s in streams:
        s.wait_stream(main)
    for i, (x, w) in enumerate(zip(xs, ws)):
        with torch.cuda.stream(streams[i % len(streams)]):
            outs.append(x @ w)
    for s in streams:
        main.wait_stream(s)
    return outs


def _host_seconds_per_op(torch, n_ops: int = 2000) -> float:
    """CPU seconds to enqueue one small elementwise kernel while a long GEMM keeps the GPU busy."""
    big = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(1024, device="cuda")
    torch.cuda.synchronize()
    for _ in range(3):
        big @ big                        # the GPU now has seconds of queued work: enqueueing never blocks
    t0 = time.perf_counter()
    for _ in range(n_ops):
        small.add_(1.0)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n_ops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="-", help="CSV path ('-': stdout)")
    ap.add_argument("--experts", type=int, nargs="+", default=[16, 4], help="local experts per GEMM group")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4], help="CUDA streams the loop spreads over")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_expert_gemm: needs torch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_expert_gemm: no CUDA device; run it on a GPU machine", file=sys.stderr)
        return 2
    dtype = torch.bfloat16
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    square = _square_tflops(torch, dtype)
    rows = [{**env, "test": "square_gemm_8192", "shape": "", "experts": 1, "rows_per_expert": 8192, "streams": 1,
             "tflops": round(square, 1), "share_of_square": 1.0, "host_us_per_op": ""}]
    grouped = getattr(torch, "_grouped_mm", None)
    for label, k, n in SHAPES:
        for e in args.experts:
            for m in ROWS:
                xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(e)]
                ws = [torch.randn(k, n, device="cuda", dtype=dtype) for _ in range(e)]
                flops = 2.0 * m * k * n * e
                for s in args.streams:
                    streams = [torch.cuda.Stream() for _ in range(s)]
                    t = seconds_per_call(lambda: _expert_loop(torch, xs, ws, streams), args.iters)
                    rows.append({**env, "test": "per_expert_cublas", "shape": label, "experts": e,
                                 "rows_per_expert": m, "streams": s, "tflops": round(flops / t / 1e12, 1),
                                 "share_of_square": round(flops / t / 1e12 / square, 4), "host_us_per_op": ""})
                if grouped is not None:
                    try:
                        x = torch.cat(xs)
                        w = torch.stack([wi.t().contiguous() for wi in ws]).transpose(-2, -1)
                        offs = torch.arange(m, m * e + 1, m, device="cuda", dtype=torch.int32)
                        t = seconds_per_call(lambda: grouped(x, w, offs=offs), args.iters)
                        rows.append({**env, "test": "torch_grouped_mm", "shape": label, "experts": e,
                                     "rows_per_expert": m, "streams": 1, "tflops": round(flops / t / 1e12, 1),
                                     "share_of_square": round(flops / t / 1e12 / square, 4), "host_us_per_op": ""})
                    except (RuntimeError, TypeError) as exc:   # unsupported dtype/arch: say so once per shape
                        rows.append({**env, "test": "torch_grouped_mm", "shape": f"{label}: {exc}"[:120],
                                     "experts": e, "rows_per_expert": m, "streams": 1, "tflops": "",
                                     "share_of_square": "", "host_us_per_op": ""})
                        grouped = None
    rows.append({**env, "test": "host_enqueue_small_op", "shape": "", "experts": "", "rows_per_expert": "",
                 "streams": "", "tflops": "", "share_of_square": "",
                 "host_us_per_op": round(1e6 * _host_seconds_per_op(torch), 2)})
    write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

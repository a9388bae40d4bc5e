"""Device check: GPU time of the per-expert GEMMs of an MoE training step, 16-bit against FP8, without the host.

Transformer Engine's GroupedLinear on Hopper issues one cuBLAS GEMM per local expert (`general_grouped_gemm` ->
`nvte_multi_stream_cublas_gemm`). scripts/bench_expert_gemm.py timed that loop eagerly, and on a virtualised host
(29 us to enqueue one op) every GEMM under ~40 us measured the host. Here the loop over 16 experts is captured in
one CUDA graph and replayed, so the events time the GPU only. For each expert shape of the gathered MoE rows
(Qwen3-30B-A3B, GPT-OSS-120B) and M rows per expert it times the three GEMMs of a training linear:
  fwd    [M,K] x [K,N]      dgrad  [M,N] x [N,K]      wgrad  [K,M] x [M,N]  (inner dimension M)
in bf16 (torch.mm) and FP8 e4m3 with per-tensor scales and a bf16 output (torch._scaled_mm: the cuBLAS FP8 GEMM
that Transformer Engine's current-scaling recipe calls), and an 8192^3 GEMM of each format on the same GPU.

    python3 scripts/bench_expert_gemm_graph.py --out "$OUT/expert_gemm_graph.csv"     # ~10 s on an H200

validation/device/h200-2026-12-04-expert_gemm_graph.csv is its output on the lent H200 (run as the same code inlined
in the device command, since the device copies the main checkout; docs/device-runs.md).

Nothing here is imported by gpuplan or its tests.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_timing import write_rows  # noqa: E402

SHAPES = (("qwen3-30b-a3b fc1", 2048, 1536), ("qwen3-30b-a3b fc2", 768, 2048),
          ("gpt-oss-120b fc1", 2880, 5760), ("gpt-oss-120b fc2", 2880, 2880))
ROWS = (512, 1024, 2048, 4096, 8192)
EXPERTS = 16


def _graph_seconds(torch, fn, iters: int = 20) -> float:
    """Seconds per replay of `fn` captured in a CUDA graph (warm-up on a side stream first, as torch requires)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 1e3 / iters


def _operands(torch, m: int, k: int, n: int, fmt: str, count: int):
    """`count` pairs (A [m,k] row-major, B [k,n] column-major, as cuBLAS FP8 wants) and the GEMM call."""
    pairs = []
    for _ in range(count):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        if fmt == "fp8":
            a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        pairs.append((a, b))
    one = torch.ones((), device="cuda", dtype=torch.float32)
    if fmt == "fp8":
        def call():
            for a, b in pairs:
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def call():
            for a, b in pairs:
                torch.mm(a, b)
    return call


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    import torch
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    rows = []
    square = {}
    for fmt in ("bf16", "fp8"):
        n = 8192
        t = _graph_seconds(torch, _operands(torch, n, n, n, fmt, 1))
        square[fmt] = 2 * n ** 3 / t / 1e12
        rows.append({**meta, "test": "square_8192", "format": fmt, "shape": "", "gemm": "fwd", "rows_per_expert": "",
                     "m": n, "k": n, "n": n, "experts": 1, "seconds": t, "tflops": round(square[fmt], 1), "share_of_square": 1.0})
    for label, k, n in SHAPES:
        for m in ROWS:
            for gemm, (mm, kk, nn) in (("fwd", (m, k, n)), ("dgrad", (m, n, k)), ("wgrad", (k, m, n))):
                for fmt in ("bf16", "fp8"):
                    t = _graph_seconds(torch, _operands(torch, mm, kk, nn, fmt, EXPERTS))
                    tf = 2 * mm * kk * nn * EXPERTS / t / 1e12
                    rows.append({**meta, "test": "per_expert_graph", "format": fmt, "shape": label, "gemm": gemm,
                                 "rows_per_expert": m, "m": mm, "k": kk, "n": nn, "experts": EXPERTS, "seconds": t,
                                 "tflops": round(tf, 1), "share_of_square": round(tf / square[fmt], 4)})
                    print(label, gemm, m, fmt, round(tf, 1), flush=True)
            torch.cuda.empty_cache()
    write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Seconds per call of a CUDA workload by CUDA events after a warm-up (shared by the device benchmarks:
bench_expert_gemm.py, bench_hf_eager_decode.py). Needs torch with a GPU; imports it only when called."""
from __future__ import annotations


def seconds_per_call(fn, iters: int, warmup: int = 3) -> float:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters

"""Seconds per call of a CUDA workload by CUDA events after a warm-up, and the CSV writer (shared by the device
benchmarks: bench_expert_gemm.py, bench_gemm_shapes.py, bench_hf_eager_decode.py). Needs torch with a GPU; imports
it only when called."""
from __future__ import annotations

import csv
import sys


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


def write_rows(rows: list[dict], out: str) -> None:
    """The rows as CSV to `out` ('-': stdout), columns in the first row's order."""
    fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
    try:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    finally:
        if fh is not sys.stdout:
            fh.close()

"""Device check for the dense GEMM efficiency gpuplan prices by shape (docs/speed.md §2.1: eta = eta_max * K/(K+d0) *
N/(N+d0) for a training-sized M): cuBLAS bf16 through torch.mm at M = 16384 and 4096 rows for a grid of K x N
weight shapes, in the three layouts a linear layer's forward and backward run (y = x W^T: NT; grad_x = grad_y W: NN;
grad_W = grad_y^T x: TN), and the share of a large square GEMM measured on the same GPU. Writes one CSV row per case.
Nothing in gpuplan imports it; run it on a GPU machine and keep the CSV:

    python3 scripts/bench_gemm_shapes.py --out "$OUT/gemm_shapes.csv"     # ~30 s on an H100/H200
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_timing import seconds_per_call, write_rows  # noqa: E402

DIMS = (512, 1024, 2048, 3072, 4096, 8192, 14336, 28672)
ROWS = (16384, 4096)


def _operands(torch, layout: str, m: int, k: int, n: int, dt):
    """(a, b) whose product is the layer's GEMM with M tokens, K inputs, N outputs in this layout."""
    r = lambda *s: torch.randn(*s, device="cuda", dtype=dt)   # noqa: E731
    if layout == "fwd_NT":       # x [M,K] @ W[N,K]^T
        return r(m, k), r(n, k).t()
    if layout == "dgrad_NN":     # grad_y [M,N] @ W [N,K]  -> [M,K]
        return r(m, n), r(n, k)
    return r(m, n).t(), r(m, k)  # wgrad_TN: grad_y^T [N,M] @ x [M,K] -> [N,K]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="-")
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_gemm_shapes: no CUDA device", file=sys.stderr)
        return 2
    dt = torch.bfloat16
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    x = torch.randn(8192, 8192, device="cuda", dtype=dt)
    square = 2 * 8192 ** 3 / seconds_per_call(lambda: x @ x, 20) / 1e12
    rows = []
    for m in ROWS:
        for k in DIMS:
            for n in DIMS:
                for layout in ("fwd_NT", "dgrad_NN", "wgrad_TN"):
                    p, q = _operands(torch, layout, m, k, n, dt)
                    t = seconds_per_call(lambda: p @ q, a.iters)
                    tf = 2.0 * m * k * n / t / 1e12
                    rows.append({**env, "layout": layout, "m": m, "k": k, "n": n, "seconds": f"{t:.4e}",
                                 "tflops": round(tf, 1), "share_of_square": round(tf / square, 4),
                                 "square_tflops": round(square, 1)})
                    del p, q
    write_rows(rows, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

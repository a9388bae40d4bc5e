"""Measure what one HF-transformers decode step costs on a GPU, op by op, for the pieces gpuplan prices
from bytes (docs/hf_eager_decode.md): the KV-cache `torch.cat`, eager attention's two batched matmuls
(transformers < 4.36, or attn_implementation="eager"), SDPA's call with a mask (4.36+), GQA's `repeat_kv`
copy, and the 16-bit weight GEMMs at decode row counts. Prints one CSV row per op with the achieved HBM
bandwidth, so the efficiencies the model assumes can be checked — and replaced by measured ones — per GPU
and torch version. Needs a CUDA GPU; not run by the tests.

    python3 scripts/bench_hf_eager_decode.py --heads 40 --kv-heads 40 --head-dim 128 --context 768 \
        --batch 1 2 4 8 16 --hidden 5120 --ffn 13824 > eager_a100.csv
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_timing import seconds_per_call  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=40)
    ap.add_argument("--kv-heads", type=int, default=40)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--context", type=int, default=768)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--hidden", type=int, default=5120)
    ap.add_argument("--ffn", type=int, default=13824)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    dt = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    dev, el = "cuda", 2
    gpu, tv = torch.cuda.get_device_name(0), torch.__version__
    print("gpu,torch,op,batch,context,bytes,seconds,achieved_GBps")

    def row(op: str, b: int, nbytes: float, fn) -> None:
        s = seconds_per_call(fn, a.iters)
        print(f"{gpu},{tv},{op},{b},{a.context},{nbytes:.0f},{s:.3e},{nbytes / s / 1e9:.1f}")

    g = a.heads // a.kv_heads
    for b in a.batch:
        L, D, H, KV = a.context, a.head_dim, a.heads, a.kv_heads
        past = torch.randn(b, KV, L, D, device=dev, dtype=dt)
        new = torch.randn(b, KV, 1, D, device=dev, dtype=dt)
        q = torch.randn(b, H, 1, D, device=dev, dtype=dt)
        mask = torch.zeros(b, 1, 1, L + 1, device=dev, dtype=dt)
        kv = b * KV * L * D * el                                   # one of K or V, one layer
        row("cat", b, 2 * kv, lambda: torch.cat([past, new], dim=2))
        k = torch.cat([past, new], dim=2)
        if g > 1:
            row("repeat_kv", b, kv * (1 + g),
                lambda: k[:, :, None].expand(b, KV, g, L + 1, D).reshape(b, H, L + 1, D))
            k = k[:, :, None].expand(b, KV, g, L + 1, D).reshape(b, H, L + 1, D)
        row("eager_qk", b, kv * g, lambda: torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D))
        w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) + mask, dim=-1, dtype=torch.float32).to(dt)
        row("eager_pv", b, kv * g, lambda: torch.matmul(w, k))
        row("eager_softmax", b, b * H * (L + 1) * (2 + 4 + 4 + 2),
            lambda: torch.softmax(w + mask, dim=-1, dtype=torch.float32).to(dt))
        row("sdpa_masked", b, 2 * kv * g, lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=mask))
        x = torch.randn(b, a.hidden, device=dev, dtype=dt)
        for name, (n_in, n_out) in {"linear_qkvo": (a.hidden, a.hidden), "linear_up": (a.hidden, a.ffn),
                                    "linear_down": (a.ffn, a.hidden)}.items():
            wt = torch.randn(n_out, n_in, device=dev, dtype=dt)
            xi = x if n_in == a.hidden else torch.randn(b, n_in, device=dev, dtype=dt)
            row(name, b, n_in * n_out * el, lambda: F.linear(xi, wt))
    return 0


if __name__ == "__main__":
    sys.exit(main())

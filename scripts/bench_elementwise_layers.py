"""Element-wise kernel time of one decoder layer (and of the loss block) on a GPU, eager and compiled, beside the
bytes gpuplan prices for it: the bandwidth share each stack's element-wise kernels reach
(src/gpuplan/estimate/data/elementwise_bandwidth.csv, docs/speed.md §2.3.1).

Each case builds the layer of scripts/trace_elementwise.py (torchtitan's Llama block, transformers'
LlamaDecoderLayer, llm-foundry's MPT-style GPT block) at a real width, runs forward + backward in bf16 under
torch.profiler, and splits the GPU time of its kernels into GEMMs, attention and the rest. The rest is the
element-wise work; its bytes are the model's (estimate/elementwise.py: traced eager aten ops, or the fused regions'
reads and writes once torch.compile fuses them), so share = bytes / (time x the GPU's spec bandwidth). A device
copy gives the copy rate for comparison. One CSV row per case and mode.

    PYTHONPATH=$PWD/src python3 scripts/bench_elementwise_layers.py --gpu h200-sxm --out elementwise.csv
    PYTHONPATH=$PWD/src python3 scripts/bench_elementwise_layers.py --device cpu --small --out -     (smoke test)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (case, recipe, h, i, heads, kv_heads, micro-batch, sequence): the layers whose steps gpuplan scores
CASES = [
    ("TT01 layer: Llama-3.1-8B, torchtitan, 2 x 8192", "torchtitan", 4096, 14336, 32, 8, 2, 8192),
    ("HK03 layer: Llama-3.2-1B, transformers, 8 x 2048", "hf", 2048, 8192, 32, 8, 8, 2048),
    ("HK04 base layer: Llama-3.1-8B, transformers, 4 x 2048", "hf", 4096, 14336, 32, 8, 4, 2048),
    ("llm-foundry MPT-7B layer, 4 x 2048", "layernorm_gelu", 4096, 16384, 32, 32, 4, 2048),
    ("Llama-3.2-1B layer, torchtitan, 8 x 2048", "torchtitan", 2048, 8192, 32, 8, 8, 2048),
]
SMALL = [("smoke", r, 256, 512, 4, 2, 1, 64) for r in ("torchtitan", "hf", "layernorm_gelu")]
LOSS = ("loss block: 16,384 tokens x 128,256 vocabulary, h 2048", 16384, 128256, 2048)
SMALL_LOSS = ("smoke loss", 64, 512, 64)

_GEMM = ("nvjet", "gemm", "cutlass", "xmma", "cublas", "splitkreduce", "sm90_", "sm80_", "mm_")
_CPU_GEMM = ("aten::mm", "aten::addmm", "aten::bmm")
_ATTN = ("sdpa", "flash", "fmha", "attention", "cudnn")


def kernel_category(name: str) -> str:
    """gemm | attention | other for a kernel (or, on CPU, a leaf aten op) name."""
    n = name.lower()
    if any(k in n for k in _ATTN):
        return "attention"
    if (any(k in n for k in _GEMM) and not n.startswith("triton_")) or n in _CPU_GEMM:
        return "gemm"
    return "other"


def profile_seconds(torch, fn, device: str, iters: int) -> dict[str, float]:
    """Seconds per call of `fn` by kernel category (profiler kernels on CUDA; leaf aten ops' self time on CPU)."""
    from torch.profiler import ProfilerActivity, profile
    from gpuplan.local.measure import is_profiler_annotation
    for _ in range(2):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(iters):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
    out = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for e in prof.key_averages():
        if is_profiler_annotation(e.key):
            continue
        if device == "cuda":
            if "CUDA" not in str(getattr(e, "device_type", "")):
                continue
            us = float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) or 0.0)
        else:
            if not e.key.startswith("aten::"):
                continue
            us = float(e.self_cpu_time_total or 0.0)
        out[kernel_category(e.key)] += us / 1e6 / iters
    return out


def priced_bytes(recipe: str, mode: str, h: int, i: int, heads: int, kv_heads: int) -> float:
    """gpuplan's element-wise bytes per token of this layer (estimate/elementwise.py), fwd + bwd, bf16."""
    from gpuplan.estimate import elementwise as ew
    kv = kv_heads * (h // heads)
    framework, norm = {"torchtitan": ("torchtitan", "rms"), "hf": ("hf", "rms"),
                       "layernorm_gelu": ("hf", "layernorm")}[recipe]
    gated = rope = recipe != "layernorm_gelu"
    return ew.layer_bytes(mode, framework, norm, h, i, kv, gated=gated, rope=rope, gqa=kv_heads < heads)


def run_layer(torch, te, case, mode: str, device: str, iters: int, bw: float) -> dict:
    label, recipe, h, i, heads, kv, b, s = case
    blk, x, extra = te.build_layer(recipe, h, i, heads, kv, b, s, device)
    g = torch.randn(b, s, h, dtype=torch.bfloat16, device=device)
    fwd = torch.compile(blk) if mode == "compiled" else blk

    def step():
        x.grad = None
        fwd(x, *extra).backward(g)
    t0 = time.perf_counter()
    sec = profile_seconds(torch, step, device, iters)
    tokens = b * s
    moved = priced_bytes(recipe, mode, h, i, heads, kv) * tokens
    return {"case": label, "recipe": recipe, "mode": mode, "h": h, "i": i, "heads": heads, "kv_heads": kv,
            "tokens": tokens, "gemm_s": round(sec["gemm"], 6), "attention_s": round(sec["attention"], 6),
            "elementwise_s": round(sec["other"], 6), "priced_bytes": round(moved),
            "bandwidth_share": round(moved / sec["other"] / bw, 4) if sec["other"] > 0 else "",
            "wall_incl_compile_s": round(time.perf_counter() - t0, 1)}


def run_loss(torch, case, mode: str, device: str, iters: int, bw: float) -> dict:
    """The loss block as transformers and torchtitan run it: bf16 logits from the lm_head, upcast, cross entropy."""
    import torch.nn.functional as F
    label, tokens, vocab, h = case
    hid = torch.randn(tokens, h, dtype=torch.bfloat16, device=device, requires_grad=True)
    w = torch.randn(vocab, h, dtype=torch.bfloat16, device=device) * 0.02
    labels = torch.randint(0, vocab, (tokens,), device=device)

    def loss(hd):
        return F.cross_entropy((hd @ w.t()).float(), labels)
    fn = torch.compile(loss) if mode == "compiled" else loss

    def step():
        hid.grad = None
        fn(hid).backward()
    sec = profile_seconds(torch, step, device, iters)
    from gpuplan.estimate.elementwise import EAGER_LOSS_BYTES_PER_LOGIT
    moved = EAGER_LOSS_BYTES_PER_LOGIT * tokens * vocab
    return {"case": label, "recipe": "loss", "mode": mode, "h": h, "i": "", "heads": "", "kv_heads": "",
            "tokens": tokens, "gemm_s": round(sec["gemm"], 6), "attention_s": 0.0,
            "elementwise_s": round(sec["other"], 6), "priced_bytes": round(moved),
            "bandwidth_share": round(moved / sec["other"] / bw, 4) if sec["other"] > 0 else "",
            "wall_incl_compile_s": ""}


def copy_row(torch, device: str, bw: float, n_bytes: int) -> dict:
    from cuda_timing import seconds_per_call
    a = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    if device == "cuda":
        t = seconds_per_call(lambda: b.copy_(a), 20)
    else:
        t0 = time.perf_counter()
        b.copy_(a)
        t = time.perf_counter() - t0
    return {"case": f"device copy {n_bytes / 2**30:.2f} GiB", "recipe": "copy", "mode": "copy", "h": "", "i": "",
            "heads": "", "kv_heads": "", "tokens": "", "gemm_s": 0.0, "attention_s": 0.0,
            "elementwise_s": round(t, 6), "priced_bytes": 2 * n_bytes,
            "bandwidth_share": round(2 * n_bytes / t / bw, 4), "wall_incl_compile_s": ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200-sxm", help="catalog id whose spec bandwidth the shares divide by")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a CPU smoke test)")
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--out", default="-")
    args = ap.parse_args(argv)
    import torch
    import trace_elementwise as te
    from cuda_timing import write_rows
    from gpuplan.hardware import get_gpu
    bw = float(get_gpu(args.gpu).mem_bandwidth_bytes_per_s)
    torch.manual_seed(0)
    rows = [copy_row(torch, args.device, bw, 2**20 if args.small else 2**30)]
    jobs = [(mode, case) for mode in args.modes.split(",")
            for case in (SMALL if args.small else CASES) + [SMALL_LOSS if args.small else LOSS]]
    for mode, case in jobs:
        try:
            if case in (LOSS, SMALL_LOSS):
                rows.append(run_loss(torch, case, mode, args.device, args.iters, bw))
            else:
                rows.append(run_layer(torch, te, case, mode, args.device, args.iters, bw))
            print(rows[-1], file=sys.stderr, flush=True)
        except Exception as exc:       # one failing case (a compile error) must not lose the others
            print(f"{case[0]} {mode}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if args.out != "-":
            write_rows(rows, args.out)      # after every case: a run cut short keeps what it measured
    if args.out == "-":
        write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

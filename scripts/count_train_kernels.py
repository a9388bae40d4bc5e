"""Count the device ops one eager HF training step issues, on CPU (docs/speed.md §2.12).

Builds the real transformers model class from a registry config shrunk to tiny widths (layer count, heads, experts,
top-k and the module structure kept), wraps it as `gpuplan measure` does (local/measure.py `_run_train`: peft LoRA
all-linear with fp32 adapters over a 16-bit base, or fp32 full weights; bf16 autocast; gradient checkpointing for
full recompute; AdamW), runs one warm-up step and then one counted step under a TorchDispatchMode, and counts every
aten op that would launch work on a GPU: everything except views, `empty*` allocations and `detach`/alias ops
(metadata only). Counted per phase: forward (Python-issued), backward (the autograd engine; with full recompute the
re-run forward happens inside it) and optimizer. Each phase is counted at two layer counts so that the per-layer
count and the fixed rest (embedding, loss, lm_head) come out separately.

One aten op is one launch here. On CUDA a few ops launch more than one kernel (sort, index_put_ with accumulate,
cuDNN attention backward) and the foreach optimizer ops launch one per chunk of tensors (counted in
estimate/host_issue.py from torch's multi_tensor_apply, not here); `scripts/count_train_kernels.py --check` compares
the totals with the kernel counts profiled on the lent H200 (validation/device/h200-2026-12-04-*.jsonl).

    PYTHONPATH=src python3 scripts/count_train_kernels.py > src/gpuplan/estimate/data/hf_train_ops.csv   # ~15 min
    PYTHONPATH=src python3 scripts/count_train_kernels.py --decode     # ops of one HF Llama decode layer
    PYTHONPATH=src python3 scripts/count_train_kernels.py --time       # host seconds per op on this CPU
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter

import datetime

import peft
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

# (model, method, recompute): the layer kinds the lent H200's HF rows ran (validation/gathered/measured.csv HT/HK)
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "gemma-2-2b", "phi-3-mini-4k-instruct", "mistral-7b-v0.3", "qwen3-8b",
          "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "mixtral-8x7b-v0.1")
CASES = tuple((m, meth, rc) for m in MODELS for meth in ("full", "lora", "lora-qv") for rc in ("none", "full"))

_NO_KERNEL = {"empty", "empty_like", "empty_strided", "detach", "alias", "lift_fresh", "_local_scalar_dense",
              "set_", "resize_", "_unsafe_view", "view", "_reshape_alias", "as_strided", "t", "transpose",
              "permute", "expand", "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes",
              "unbind", "chunk", "narrow", "unfold", "diagonal", "view_as_real", "view_as_complex", "clone_meta"}


def launches_kernel(func) -> bool:
    """Whether an aten op does device work (not a view, allocation or alias)."""
    name = func.overloadpacket.__name__
    if name in _NO_KERNEL:
        return False
    if getattr(func, "is_view", False):
        return False
    return True


class Counter_(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.phase = "forward"
        self.counts: Counter = Counter()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if launches_kernel(func):
            self.counts[self.phase] += 1
            self.ops[(self.phase, func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def tiny_config(name: str, layers: int):
    from transformers import AutoConfig
    sys.path.insert(0, "src")
    from gpuplan.models import get_model
    spec = get_model(name)
    cfg = dict(spec.config)
    mt = cfg.pop("model_type", spec.model_type)
    heads, kv = cfg.get("num_attention_heads", 8), cfg.get("num_key_value_heads") or cfg.get("num_attention_heads", 8)
    group = max(1, heads // kv)
    tiny_heads = 2 * group
    cfg.update(num_hidden_layers=layers, hidden_size=16 * tiny_heads, num_attention_heads=tiny_heads,
               num_key_value_heads=2, head_dim=16, intermediate_size=32, vocab_size=256,
               max_position_embeddings=max(64, int(cfg.get("max_position_embeddings") or 64)))
    for k in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if k in cfg:
            cfg[k] = 16
    for k in ("max_window_layers",):
        if k in cfg:
            cfg[k] = layers
    cfg.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)        # inside the tiny vocabulary
    cfg.pop("torch_dtype", None)
    cfg.pop("dtype", None)
    return AutoConfig.for_model(mt, **cfg)


def count_step(name: str, method: str, recompute: str, layers: int, seq: int = 32, batch: int = 2) -> dict:
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config = tiny_config(name, layers)
    lora = method.startswith("lora")
    dtype = torch.bfloat16 if lora else torch.float32          # measure.py: 16-bit LoRA base, fp32 full weights
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    except ValueError:          # Gemma-2 in transformers 5.25 refuses sdpa (soft-capping): its eager attention
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")
    if lora:      # "lora": all-linear (what gpuplan measure ran); "lora-qv": peft's default q_proj + v_proj
        import peft
        targets = ["q_proj", "v_proj"] if method == "lora-qv" else "all-linear"
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    if recompute == "full":
        model.gradient_checkpointing_enable()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    mode = Counter_()

    def step(counted: bool):
        mode.phase = "forward"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        mode.phase = "backward"
        loss.backward()
        mode.phase = "optimizer"
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(False)                                   # optimizer states are created in the first step
    with mode:
        step(True)
    return {"counts": dict(mode.counts), "ops": mode.ops, "trainable_tensors": len(params)}


def per_layer(name: str, method: str, recompute: str) -> dict:
    # 2 and 3 layers: the first layer differs (under LoRA its input needs no gradient), so 1 -> 2 would not be a
    # middle layer's count
    a, b = count_step(name, method, recompute, 2), count_step(name, method, recompute, 3)
    # the rows of estimate/data/hf_train_ops.csv (the optimizer is left out: CPU runs each foreach op as one op,
    # CUDA launches one kernel per chunk of tensors)
    out = {"layer_kind": tiny_config(name, 2).model_type, "model": name, "method": method, "recompute": recompute}
    for ph in ("forward", "backward"):
        out[f"{ph}_ops_per_layer"] = b["counts"].get(ph, 0) - a["counts"].get(ph, 0)
        out[f"{ph}_ops_fixed"] = a["counts"].get(ph, 0) - 2 * out[f"{ph}_ops_per_layer"]
    out["trainable_tensors_per_layer"] = b["trainable_tensors"] - a["trainable_tensors"]
    out["source"] = (f"scripts/count_train_kernels.py (transformers {transformers.__version__}, peft {peft.__version__}, "
                     f"torch {torch.__version__}; sdpa attention, eager for gemma2)")
    out["retrieved"] = datetime.date.today().isoformat()
    return out


def bare_op_s(n: int = 20000, reps: int = 7) -> float:
    """Seconds of one `t.add_(1.0)` on a 1,024-element CPU tensor in a Python loop: the loop of
    scripts/bench_expert_gemm.py `_host_seconds_per_op` without a GPU (Python, dispatcher and a trivial kernel)."""
    import time
    small = torch.randn(1024)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            small.add_(1.0)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def phase_op_s(name: str, method: str, layers: int = 8, steps: int = 40) -> dict:
    """CPU seconds per op of the forward (Python: HF modules, peft, autocast) and of the backward (the autograd
    engine, no recompute) of a tiny model whose kernels cost next to nothing (1 x 8 tokens, width 32-64): the
    framework's own host cost per op, without any launch. The fastest of `steps` steps after 3 warm-ups (the least
    disturbed by other work on the machine; the median is printed beside it)."""
    import statistics
    import time
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config = tiny_config(name, layers)
    lora = method == "lora"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if lora else torch.float32,
                                             attn_implementation="sdpa")
    if lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    model.train()
    ids = torch.randint(0, config.vocab_size, (1, 8))
    fwd, bwd = [], []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        if i >= 3:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    mode = Counter_()
    with mode:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        mode.phase = "backward"
        loss.backward()
    model.zero_grad(set_to_none=True)
    return {"model": name, "method": method, "forward_ops": mode.counts["forward"],
            "backward_ops": mode.counts["backward"],
            "forward_us_per_op": round(1e6 * min(fwd) / mode.counts["forward"], 2),
            "backward_us_per_op": round(1e6 * min(bwd) / mode.counts["backward"], 2),
            "forward_us_per_op_median": round(1e6 * statistics.median(fwd) / mode.counts["forward"], 2),
            "backward_us_per_op_median": round(1e6 * statistics.median(bwd) / mode.counts["backward"], 2)}


def decode_ops(name: str, layers: int) -> int:
    """Ops of one HF decode step (batch 1, DynamicCache, fp16, no grad) after a 16-token prefill and one step."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(name, layers), dtype=torch.float16,
                                             attn_implementation="sdpa").eval()
    ids = torch.randint(0, 256, (1, 16))
    mode = Counter_()
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        out = model(input_ids=out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values, use_cache=True)
        with mode:
            model(input_ids=out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values, use_cache=True)
    return mode.counts["forward"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", action="store_true", help="also print the per-layer op names of each case")
    ap.add_argument("--models", nargs="*", default=MODELS, help="registry names to count (default: MODELS)")
    ap.add_argument("--time", action="store_true", help="time the host cost per op on this CPU instead")
    ap.add_argument("--decode", action="store_true", help="count the ops of one HF Llama decode layer instead")
    args = ap.parse_args(argv)
    if args.decode:
        a, b = decode_ops("llama-3.1-8b", 2), decode_ops("llama-3.1-8b", 3)
        print(f"hf_decode_ops_per_layer,{b - a}\nhf_decode_ops_fixed,{a - 2 * (b - a)}")
        return 0
    if args.time:
        torch.set_num_threads(1)
        print(f"bare_op_us,{1e6 * bare_op_s():.2f}")
        for name in ("llama-3.1-8b", "qwen1.5-moe-a2.7b"):
            for method in ("full", "lora"):
                print(phase_op_s(name, method))
        return 0
    w = None
    for case in (c for c in CASES if c[0] in args.models):
        try:
            row = per_layer(*case)
        except ValueError as exc:     # peft: no q_proj/v_proj in a fused-qkv model (Phi-3): no lora-qv row
            print(f"skipped {case}: {str(exc).splitlines()[0]}", file=sys.stderr)
            continue
        if w is None:
            w = csv.DictWriter(sys.stdout, fieldnames=list(row))
            w.writeheader()
        w.writerow(row)
        sys.stdout.flush()
        if args.ops:
            a, b = count_step(*case, 1), count_step(*case, 2)
            diff = {k: b["ops"][k] - a["ops"].get(k, 0) for k in b["ops"] if b["ops"][k] != a["ops"].get(k, 0)}
            print(case, sorted(diff.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Trace a set of realistic scenarios and write docs/trace-table.md and validation/traces.json.

    PYTHONPATH=src python benchmarks/trace_table.py [--only SUBSTRING] [--quick]

validation/traces.json is a list of {name, scenario, peak_bytes, components, phase, seconds, ...};
the memory engine calibrates against it, so keep its schema stable.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.errors import GpuplanError  # noqa: E402
from gpuplan.estimate.results import MEMORY_COMPONENTS  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402
from gpuplan.trace import trace  # noqa: E402

H100 = {"gpu": "h100-sxm", "count": 1}


def _train(name, model, *, count=1, parallel=None, task="train", **train):
    d = {"model": model, "task": task, "hardware": {**H100, "count": count}, "train": train}
    if parallel:
        d["parallel"] = parallel
    return name, d


def _infer(name, model, **infer):
    return name, {"model": model, "task": "infer", "hardware": H100, "infer": infer}


def _cut(config_file, layers):
    """A real bundled config with fewer decoder layers (keeps each trace short on CPU); per-layer
    lists (layer_types, mlp_only_layers) are cut alike."""
    c = json.loads((ROOT / "src/gpuplan/models/configs" / f"{config_file}.json").read_text())
    c = dict(c.get("text_config", c)) if c.get("model_type") == "gemma3" else c
    key = "n_layer" if "n_layer" in c else "num_hidden_layers"
    c[key] = layers
    if isinstance(c.get("layer_types"), list):
        c["layer_types"] = c["layer_types"][:layers]
    return c


SCENARIOS = [
    _train("qwen2.5-0.5b full mw s2048", "qwen2.5-0.5b", seq_len=2048),
    _train("qwen2.5-0.5b full mw s4096 mb2 recompute", "qwen2.5-0.5b", seq_len=4096, micro_batch=2, recompute="full"),
    _train("llama-3.2-1b full mw s2048", "llama-3.2-1b", seq_len=2048),
    _train("llama-3.2-1b full mw s2048 recompute", "llama-3.2-1b", seq_len=2048, recompute="full"),
    _train("llama-3.2-1b full bf16 s2048", "llama-3.2-1b", seq_len=2048, master_weights=False),
    _train("llama-3.2-1b full mw s2048 fused", "llama-3.2-1b", seq_len=2048, optimizer_impl="fused"),
    _train("llama-3.2-1b full mw s2048 eager", "llama-3.2-1b", seq_len=2048, attention="eager"),
    _train("llama-3.2-1b full mw s4096 mb2", "llama-3.2-1b", seq_len=4096, micro_batch=2),
    _train("llama-3.2-1b lora s2048", "llama-3.2-1b", task="finetune", seq_len=2048, method="lora"),
    _train("llama-3.2-1b qlora s2048", "llama-3.2-1b", task="finetune", seq_len=2048, method="qlora"),
    _train("llama-3.2-1b full mw s2048 fsdp8", "llama-3.2-1b", count=8, parallel={"dp": 8, "zero": 3}, seq_len=2048),
    _train("llama-3.2-1b full mw s2048 tp8", "llama-3.2-1b", count=8, parallel={"tp": 8, "dp": 1}, seq_len=2048),
    _train("qwen3-1.7b full mw s2048", "qwen3-1.7b", seq_len=2048),
    _train("qwen3-1.7b full bf16 s4096 recompute", "qwen3-1.7b", seq_len=4096, master_weights=False, recompute="full"),
    _train("llama-3.2-3b full mw s2048 recompute", "llama-3.2-3b", seq_len=2048, recompute="full"),
    _train("llama-3.2-3b lora s4096", "llama-3.2-3b", task="finetune", seq_len=4096, method="lora"),
    _train("llama-3.1-8b lora s2048 recompute", "llama-3.1-8b", task="finetune", seq_len=2048, method="lora", recompute="full"),
    _train("llama-3.1-8b qlora s2048 recompute", "llama-3.1-8b", task="finetune", seq_len=2048, method="qlora", recompute="full"),
    _train("llama-3.1-8b full mw s2048 recompute", "llama-3.1-8b", seq_len=2048, recompute="full"),
    _infer("llama-3.2-1b infer bf16 c1 p1024", "llama-3.2-1b", prompt_len=1024, concurrency=1),
    _infer("llama-3.2-1b infer bf16 c32 p1024", "llama-3.2-1b", prompt_len=1024, concurrency=32),
    _infer("qwen2.5-0.5b infer bf16 c8 p2048", "qwen2.5-0.5b", prompt_len=2048, concurrency=8),
    _infer("llama-3.1-8b infer bf16 c16 p2048", "llama-3.1-8b", prompt_len=2048, concurrency=16),
    _infer("llama-3.1-8b infer awq-int4 c16 p2048", "llama-3.1-8b", weights="awq-int4", prompt_len=2048, concurrency=16),
    _train("qwen3-moe cut 4 layers full bf16 s2048", {**json.loads((ROOT / "src/gpuplan/models/configs/Qwen__Qwen3-30B-A3B.json").read_text()), "num_hidden_layers": 4}, seq_len=2048, master_weights=False),
    # ---- other families (real configs, layers cut where the full model would trace slowly)
    _train("gemma-2-2b cut 4 layers full mw s2048", _cut("google__gemma-2-2b-it", 4), seq_len=2048),
    _train("gemma-2-2b cut 4 layers full bf16 s2048 recompute", _cut("google__gemma-2-2b-it", 4), seq_len=2048,
           master_weights=False, recompute="full"),
    _train("gemma-3-1b cut 6 layers full mw s2048", _cut("google__gemma-3-1b-it", 6), seq_len=2048),
    _train("gemma-3-1b cut 6 layers lora s2048", _cut("google__gemma-3-1b-it", 6), task="finetune", seq_len=2048,
           method="lora"),
    _train("phi-3-mini cut 2 layers full mw s2048", _cut("microsoft__Phi-3-mini-4k-instruct", 2), seq_len=2048, micro_batch=4),
    _train("phi-3-mini cut 2 layers full bf16 s1024", _cut("microsoft__Phi-3-mini-4k-instruct", 2), seq_len=1024,
           master_weights=False),
    _train("olmo-2-7b cut 2 layers full mw s2048", _cut("allenai__OLMo-2-1124-7B", 2), seq_len=2048, micro_batch=4),
    _train("olmo-2-7b cut 2 layers lora s2048", _cut("allenai__OLMo-2-1124-7B", 2), task="finetune", seq_len=2048,
           method="lora"),
    _train("gpt2 full mw s1024", "gpt2", seq_len=1024, micro_batch=4),
    _train("gpt2-medium full bf16 s1024 recompute", "gpt2-medium", seq_len=1024, micro_batch=4,
           master_weights=False, recompute="full"),
    _train("gpt-neox-20b cut 2 layers full bf16 s2048", _cut("EleutherAI__gpt-neox-20b", 2), seq_len=2048,
           micro_batch=4, master_weights=False),
    _train("falcon-7b cut 2 layers full mw s2048", _cut("tiiuae__falcon-7b-instruct", 2), seq_len=2048),
    _train("mistral-7b cut 2 layers full mw s2048", _cut("mistralai__Mistral-7B-v0.1", 2), seq_len=2048, micro_batch=4),
    _train("mistral-7b cut 2 layers full bf16 s8192 (above window)", _cut("mistralai__Mistral-7B-v0.1", 2),
           seq_len=8192, master_weights=False),
    _train("mixtral-8x7b cut 2 layers full bf16 s2048", _cut("mistralai__Mixtral-8x7B-v0.1", 2), seq_len=2048,
           micro_batch=8, master_weights=False),
    _train("mixtral-8x7b cut 2 layers full mw s2048", _cut("mistralai__Mixtral-8x7B-v0.1", 2), seq_len=2048, micro_batch=8),
    _train("gpt-oss-20b cut 2 layers full bf16 s2048", _cut("openai__gpt-oss-20b", 2), seq_len=2048,
           micro_batch=4, master_weights=False),
    _train("deepseek-v2-lite cut 3 layers full bf16 s2048", _cut("deepseek-ai__DeepSeek-V2-Lite", 3), seq_len=2048,
           micro_batch=4, master_weights=False),
    _train("deepseek-v2-lite cut 3 layers full bf16 s2048 recompute", _cut("deepseek-ai__DeepSeek-V2-Lite", 3),
           seq_len=2048, master_weights=False, recompute="full"),
    _train("qwen3-moe cut 4 layers lora s2048", _cut("Qwen__Qwen3-30B-A3B", 4), task="finetune", seq_len=2048,
           method="lora"),
    _train("gemma-2-2b cut 4 layers full mw s2048 fsdp4", _cut("google__gemma-2-2b-it", 4), count=4,
           parallel={"dp": 4, "zero": 3}, seq_len=2048),
    _train("gemma-2-2b cut 4 layers full mw s2048 tp2", _cut("google__gemma-2-2b-it", 4), count=2,
           parallel={"tp": 2, "dp": 1}, seq_len=2048),
    _train("olmo-2-7b cut 2 layers full bf16 s2048 fsdp2", _cut("allenai__OLMo-2-1124-7B", 2), count=2,
           parallel={"dp": 2, "zero": 3}, seq_len=2048, master_weights=False),
    _train("mixtral-8x7b cut 2 layers full mw s2048 recompute", _cut("mistralai__Mixtral-8x7B-v0.1", 2),
           seq_len=2048, recompute="full"),
    _infer("gemma-2-2b infer bf16 c8 p2048", "gemma-2-2b", prompt_len=2048, concurrency=8),
    _infer("gemma-3-1b infer bf16 c8 p2048 (above window)", "gemma-3-1b-it", prompt_len=2048, concurrency=8),
    _infer("phi-3-mini infer bf16 c8 p1024", "phi-3-mini-4k-instruct", prompt_len=1024, concurrency=8),
    _infer("olmo-2-7b infer bf16 c8 p2048", "olmo-2-1124-7b", prompt_len=2048, concurrency=8),
    _infer("gpt2 infer bf16 c16 p1000", "gpt2", prompt_len=1000, concurrency=16),
    _infer("falcon-7b infer bf16 c8 p1024", "falcon-7b-instruct", prompt_len=1024, concurrency=8),
    _infer("mistral-7b infer bf16 c2 p6144 (above window)", "mistral-7b-v0.1", prompt_len=6144, concurrency=2),
    _infer("mixtral-8x7b infer bf16 c4 p2048", "mixtral-8x7b-v0.1", prompt_len=2048, concurrency=4),
    _infer("gpt-oss-20b infer bf16 c4 p2048", "gpt-oss-20b", prompt_len=2048, concurrency=4),
    _infer("deepseek-v2-lite infer bf16 c8 p2048", "deepseek-v2-lite", prompt_len=2048, concurrency=8),
    _infer("qwen3-30b-a3b infer bf16 c4 p2048", "qwen3-30b-a3b", prompt_len=2048, concurrency=4),
    # encoder-decoders (docs/encoder-decoder.md) and beam search
    _train("t5-small full mw s512 t128 mb8", "t5-small", task="finetune", seq_len=512, target_len=128, micro_batch=8,
           attention="sdpa"),
    _train("flan-t5-small full bf16 s512 t128 mb8", "flan-t5-small", task="finetune", seq_len=512, target_len=128,
           micro_batch=8, attention="sdpa", master_weights=False),
    _train("t5-small full mw s512 t128 mb8 recompute", "t5-small", task="finetune", seq_len=512, target_len=128,
           micro_batch=8, attention="sdpa", recompute="full"),
    _infer("flan-t5-small infer bf16 c8 p512 beams4", "flan-t5-small", engine="hf", prompt_len=512, concurrency=8,
           beam_width=4),
    _infer("flan-t5-small infer bf16 c1 p2048 (encoder peak)", "flan-t5-small", engine="hf", prompt_len=2048,
           concurrency=1),
    _infer("qwen2.5-0.5b infer bf16 c4 p1024 beams4", "qwen2.5-0.5b", engine="hf", prompt_len=1024, concurrency=4,
           beam_width=4),
]


def gib(n):
    return f"{n / 2**30:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="trace only scenarios whose name contains this")
    ap.add_argument("--out-json", default=str(ROOT / "validation/traces.json"))
    ap.add_argument("--out-md", default=str(ROOT / "docs/trace-table.md"))
    args = ap.parse_args(argv)
    rows, failures = [], []
    for name, d in SCENARIOS:
        if args.only and args.only not in name:
            continue
        scenario_from_dict(d)      # validate before tracing
        t0 = time.monotonic()
        try:
            r = trace(d)
        except GpuplanError as err:
            print(f"FAIL {name}: {err}", flush=True)
            failures.append({"name": name, "error": str(err)})
            continue
        j = r.to_json()
        rows.append({"name": name, "scenario": d, "peak_bytes": j["peak_bytes"], "components": j["components"],
                     "phase": j["phase"], "seconds": round(time.monotonic() - t0, 2), "phases": j["phases"],
                     "details": j["details"], "world_size": j["world_size"], "per_rank": j["per_rank"],
                     "kv_cache_bytes": j["kv_cache_bytes"], "method_notes": j["method_notes"]})
        print(f"{rows[-1]['seconds']:7.1f}s  {gib(j['peak_bytes']):>7} GiB  {j['phase']:<15} {name}", flush=True)
    if args.only:   # merge into the existing file
        old = json.loads(Path(args.out_json).read_text()) if Path(args.out_json).exists() else []
        names = {r["name"] for r in rows}
        order = [n for n, _ in SCENARIOS]
        merged = {r["name"]: r for r in old if r["name"] not in names}
        merged.update({r["name"]: r for r in rows})
        rows = sorted(merged.values(), key=lambda r: order.index(r["name"]) if r["name"] in order else 999)
    Path(args.out_json).write_text(json.dumps(rows, indent=1) + "\n")
    Path(args.out_md).write_text(render_md(rows, failures))
    print(f"wrote {args.out_json} and {args.out_md} ({len(rows)} traces, {len(failures)} failures)")
    return 1 if failures else 0


def render_md(rows, failures) -> str:
    short = {"weights": "weights", "gradients": "grads", "optimizer_states": "optim", "activations": "act",
             "logits": "logits", "kv_cache": "kv", "temporary": "temp"}
    lines = ["# Traced peak memory per GPU", "",
             "Generated by `benchmarks/trace_table.py` (`gpuplan trace`, fake tensors, torch + transformers on CPU); "
             "do not edit by hand. GiB = 2^30 bytes. Peak = `torch.cuda.max_memory_allocated()` equivalent of the "
             "steady-state (second) iteration, per rank; CUDA context, allocator reserve and workspaces are not "
             "included (see docs/trace.md). Training scenarios: H100, HF Trainer-like loop, AdamW foreach unless "
             "named; `mw` = fp32 master weights + bf16 autocast, `bf16` = pure bf16; flash traced as SDPA.", "",
             "| scenario | peak GiB | phase | " + " | ".join(short.values()) + " | trace s |",
             "|---|---:|---|" + "---:|" * len(short) + "---:|"]
    for r in rows:
        c = r["components"]
        lines.append(f"| {r['name']} | {gib(r['peak_bytes'])} | {r['phase']} | "
                     + " | ".join(gib(c.get(k, 0)) for k in short) + f" | {r['seconds']:.1f} |")
    if failures:
        lines += ["", "## Not traced", ""] + [f"- {f['name']}: {f['error']}" for f in failures]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

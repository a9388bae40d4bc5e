"""TensorRT-LLM (PyTorch backend): `trtllm-serve` and `trtllm-bench` scripts plus the extra LLM API
options YAML (KV-cache fraction and dtype, CUDA graphs, model dtype)."""
from __future__ import annotations

from ._common import (GIB, Plan, check_serve_precision, hash_header, max_model_len, require_serving, shell_command,
                      unsupported, yaml_text)
from ._serve import TRTLLM_KV, canonical_weights, kv_name, model_dtype, prequantized_note

ALTERNATIVES = ("vllm", "sglang", "llama.cpp")
# weight formats the PyTorch backend reads from a (ModelOpt / AutoAWQ / GPTQ) checkpoint
_TRT_WEIGHTS = {"bf16", "fp16", "fp8", "fp8-block", "awq-int4", "gptq-int4", "nvfp4", "mxfp4", "mxfp4-experts"}


def kv_fraction(plan: Plan) -> float:
    """TRT-LLM sizes the KV pool as a fraction of the memory still *free* after weights and
    activations (vLLM uses a fraction of total). From the estimate: KV bytes / (capacity - rest)."""
    i = plan.s.infer
    mem = (plan.estimate or {}).get("memory") or {}
    kv, peak, cap = (mem.get("components") or {}).get("kv_cache"), mem.get("peak_bytes_per_gpu"), mem.get("capacity_bytes_per_gpu")
    if kv and peak and cap and cap > peak - kv:
        free = cap - (peak - kv)
        return round(min(0.95, max(0.05, kv / free)), 2)
    return round(i.gpu_memory_utilization, 2)


def engine_limits(plan: Plan) -> tuple[int, int, str]:
    """(max_batch_size, max_num_tokens, where from): the pair the estimate runs TensorRT-LLM with
    (estimate.speed.trtllm_limits: the scenario's pair, else trtllm-bench's heuristic), so the engine the
    files start batches exactly as predicted. Written explicitly, because trtllm-serve's own defaults
    (2048 / 8192) differ from trtllm-bench's heuristic."""
    from ..estimate.speed import trtllm_limits
    from ..hardware import get_gpu
    return trtllm_limits(plan.s, plan.spec, get_gpu(plan.s.hardware.gpu))


def options(plan: Plan, max_batch: int) -> dict:
    i = plan.s.infer
    kv = {"free_gpu_memory_fraction": kv_fraction(plan), "dtype": kv_name(plan, TRTLLM_KV, ("llama.cpp",)),
          "enable_block_reuse": True}
    opts = {"dtype": model_dtype(plan), "kv_cache_config": kv}
    # graphs up to the engine's batch cap, as trtllm-bench captures them (general.py @0171265e get_settings)
    opts["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": max_batch} if i.cuda_graphs else None
    if i.capacity_scheduler is not None:     # LLM API SchedulerConfig (default GUARANTEED_NO_EVICT)
        opts["scheduler_config"] = {"capacity_scheduler_policy": i.capacity_scheduler.upper()}
    return opts


def cli_args(plan: Plan, bench: bool, mbs: int, mnt: int) -> list[str]:
    i, p = plan.s.infer, plan.s.parallel
    if bench:
        return ["--backend", "pytorch", "--tp", str(p.tp), "--pp", str(p.pp)] + (["--ep", str(p.ep)] if p.ep > 1 else []) + [
            "--max_batch_size", str(mbs), "--max_num_tokens", str(mnt), "--max_seq_len", str(max_model_len(plan)),
            "--concurrency", str(i.concurrency), "--extra_llm_api_options", "extra_llm_api_options.yaml"]
    return ["--backend", "pytorch", "--host", "0.0.0.0", "--port", '"${PORT:-8000}"',
            "--tp_size", str(p.tp), "--pp_size", str(p.pp)] + (["--ep_size", str(p.ep)] if p.ep > 1 else []) + [
            "--max_batch_size", str(mbs), "--max_num_tokens", str(mnt), "--max_seq_len", str(max_model_len(plan)),
            "--kv_cache_free_gpu_memory_fraction", f"{kv_fraction(plan):g}",
            "--extra_llm_api_options", "extra_llm_api_options.yaml"]


def files(plan: Plan) -> dict[str, str]:
    require_serving(plan)
    g = plan.gpu
    if g is not None and g.vendor and g.vendor.upper() != "NVIDIA":
        raise unsupported(plan, f"GPU '{g.id}' ({g.vendor})", "TensorRT-LLM runs on NVIDIA GPUs only.", ALTERNATIVES)
    check_serve_precision(plan)
    w = canonical_weights(plan)
    if w not in _TRT_WEIGHTS:
        raise unsupported(plan, f"infer.weights '{w}'", "the TensorRT-LLM PyTorch backend does not load this format.",
                          ("llama.cpp",) if w.startswith("gguf") else ("vllm", "sglang"))
    if plan.s.dp > 1:
        raise unsupported(plan, f"dp={plan.s.dp}", "one trtllm-serve process is one model replica; "
                          "run one per replica behind a load balancer.", ("vllm", "sglang"),
                          "set hardware.count = tp x pp, or")
    i = plan.s.infer
    notes = prequantized_note(plan)
    if w.startswith("fp8"):
        notes.append("fp8 weights: point MODEL at an FP8 checkpoint (e.g. a ModelOpt export); the backend reads "
                     "the quantization from the checkpoint")
    mem = (plan.estimate or {}).get("memory") or {}
    mbs, mnt, source = engine_limits(plan)
    notes.append(f"max_batch_size {mbs} / max_num_tokens {mnt}: {source}, the same pair the estimate runs with")
    if mem.get("components", {}).get("kv_cache"):
        notes.append(f"free_gpu_memory_fraction from the plan's KV cache of {mem['components']['kv_cache'] / GIB:.2f} GiB")
    yaml_file = hash_header(plan, notes) + yaml_text(options(plan, mbs))
    launch = "# multi-node: start under MPI, e.g. srun --mpi=pmix trtllm-llmapi-launch ./serve.sh\n" if plan.multi_node else ""
    serve = (hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "set -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
             + f'MODEL="${{MODEL:-{plan.model_ref}}}"\n' + launch
             + shell_command(["trtllm-serve", '"$MODEL"'] + cli_args(plan, False, mbs, mnt)) + "\n")
    prep = ["trtllm-bench", "--model", '"$MODEL"', "prepare-dataset", "--output", "dataset.jsonl", "token-norm-dist",
            "--num-requests", str(max(100, 4 * i.concurrency)), "--input-mean", str(i.prompt_len), "--input-stdev", "0",
            "--output-mean", str(i.output_len), "--output-stdev", "0"]
    bench = (hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "set -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
             + f'MODEL="${{MODEL:-{plan.model_ref}}}"\n'
             + "# synthetic requests with the plan's prompt and output lengths (older releases: benchmarks/cpp/prepare_dataset.py)\n"
             + shell_command(prep) + "\n"
             + shell_command(["trtllm-bench", "--model", '"$MODEL"', "throughput", "--dataset", "dataset.jsonl"]
                             + cli_args(plan, True, mbs, mnt)) + "\n")
    return {"extra_llm_api_options.yaml": yaml_file, "serve.sh": serve, "bench.sh": bench}

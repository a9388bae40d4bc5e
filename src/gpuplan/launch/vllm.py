"""vLLM: a `vllm serve` script (and Ray steps for plans that span nodes)."""
from __future__ import annotations

from ._common import (Plan, check_serve_precision, hash_header, max_model_len, require_serving, shell_command)
from ._serve import (BNB_WEIGHTS, VLLM_KV, VLLM_QUANT, canonical_weights, kv_name, model_dtype,
                     prequantized_note, quant_name)

# bitsandbytes left vLLM's tree in PR #43529 (first release without it: 0.28.0; vllm issue #52802):
# QuantizationMethods in vllm/model_executor/layers/quantization/__init__.py no longer lists it, and
# "--quantization bitsandbytes" fails unless the out-of-tree vllm-bnb-plugin registers the method
# (register_quantization_config). In-flight quantization is 4-bit NF4 only (docs/features/quantization/
# bnb.md); 8-bit needs a checkpoint saved with load_in_8bit.
BNB_PLUGIN = "vllm-bnb-plugin"
BNB_GUARD = (f'python -c "import vllm_bnb_plugin" 2>/dev/null || {{ echo "bitsandbytes weights need {BNB_PLUGIN} '
             f'on vLLM >= 0.28: pip install {BNB_PLUGIN}" >&2; exit 1; }}')

ALTERNATIVES = ("sglang", "trtllm", "llama.cpp")


def _max_num_seqs(plan: Plan) -> int:
    """The scenario's max_num_seqs, else its concurrency capped at vLLM's default (the same cap the memory
    estimate's start-up profile uses: estimate.memory.engine_max_num_seqs)."""
    i = plan.s.infer
    if i.max_num_seqs:
        return i.max_num_seqs
    from ..estimate.memory import engine_max_num_seqs
    from ..hardware import get_gpu
    return engine_max_num_seqs(plan.s, int(get_gpu(plan.s.hardware.gpu).usable_memory_bytes))


def serve_argv(plan: Plan) -> tuple[list[str], list[str]]:
    i, p, s = plan.s.infer, plan.s.parallel, plan.s
    notes = prequantized_note(plan)
    if canonical_weights(plan) in BNB_WEIGHTS:
        notes.append(f"bitsandbytes is the out-of-tree {BNB_PLUGIN} on vLLM >= 0.28 (serve.sh checks it is installed)"
                     + ("; in-flight quantization is NF4 only, so int8 needs a load_in_8bit checkpoint"
                        if canonical_weights(plan) == "int8" else ""))
    argv = ["vllm", "serve", '"$MODEL"', "--host", "0.0.0.0", "--port", '"${PORT:-8000}"',
            "--tensor-parallel-size", str(p.tp), "--pipeline-parallel-size", str(p.pp)]
    if s.dp > 1:
        argv += ["--data-parallel-size", str(s.dp)]
    if p.ep > 1:
        argv.append("--enable-expert-parallel")
        notes.append(f"vLLM sets the expert-parallel size to tp x dp = {p.tp * s.dp} (plan ep={p.ep})")
    argv += ["--max-model-len", str(max_model_len(plan)), "--gpu-memory-utilization", f"{i.gpu_memory_utilization:g}",
             "--max-num-seqs", str(_max_num_seqs(plan)), "--dtype", model_dtype(plan),
             "--kv-cache-dtype", kv_name(plan, VLLM_KV, ("llama.cpp",))]
    q = quant_name(plan, VLLM_QUANT, ("llama.cpp",) if plan.s.infer.weights.startswith("gguf") else ALTERNATIVES)
    if q:
        argv += ["--quantization", q]
    if i.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(i.max_num_batched_tokens)]
    if not i.cuda_graphs:
        argv.append("--enforce-eager")
    if i.async_scheduling is False and i.num_scheduler_steps == 1:   # V1's flag (on by default since vLLM 0.14,
        # release notes: "--no-async-scheduling"); V0 (multi-step) schedules synchronously and has no such flag
        argv.append("--no-async-scheduling")
    if getattr(i, "api_server_count", 1) > 1:   # vLLM's --api-server-count (PR 17546): more API-server processes
        argv += ["--api-server-count", str(i.api_server_count)]
    if i.num_scheduler_steps > 1:     # vLLM V0's multi-step scheduling (EngineArgs --num-scheduler-steps)
        argv += ["--num-scheduler-steps", str(i.num_scheduler_steps)]
        notes.append("--num-scheduler-steps is vLLM's V0 engine (from 0.5.5; gone with V0): run it on such a "
                     "version, or drop infer.num_scheduler_steps for today's V1 scheduler")
    if plan.multi_node:
        argv += ["--distributed-executor-backend", "ray"]
    return argv, notes


def files(plan: Plan) -> dict[str, str]:
    require_serving(plan)
    check_serve_precision(plan)
    if plan.s.infer.weights.startswith("gguf"):
        from ._common import unsupported
        raise unsupported(plan, f"infer.weights '{plan.s.infer.weights}'",
                          "GGUF files are served by llama.cpp; vLLM's GGUF loader is experimental.", ("llama.cpp",))
    argv, notes = serve_argv(plan)
    body = ["set -euo pipefail", f'MODEL="${{MODEL:-{plan.model_ref}}}"']
    if canonical_weights(plan) in BNB_WEIGHTS:
        body.append(BNB_GUARD)
    if plan.multi_node:
        body += ["# multi-node (Ray): on the head node   ray start --head --port 6379",
                 f"#                  on the other {plan.nodes - 1} node(s)  ray start --address HEAD_IP:6379",
                 "# then run this script on the head node only (all nodes need the model at the same path)"]
    body.append(shell_command(argv))
    return {"serve.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(body) + "\n"}

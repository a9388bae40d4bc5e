"""SGLang: a `python -m sglang.launch_server` script."""
from __future__ import annotations

from ._common import Plan, check_serve_precision, hash_header, max_model_len, require_serving, shell_command, unsupported
from ._serve import SGLANG_KV, SGLANG_QUANT, kv_name, model_dtype, prequantized_note, quant_name

ALTERNATIVES = ("vllm", "trtllm", "llama.cpp")


def serve_argv(plan: Plan) -> tuple[list[str], list[str]]:
    i, p, s = plan.s.infer, plan.s.parallel, plan.s
    notes = prequantized_note(plan)
    notes.append("--mem-fraction-static counts weights + KV pool only; activations and CUDA graphs use the rest "
                 "(lower it if the server runs out of memory at start-up)")
    argv = ["python", "-m", "sglang.launch_server", "--model-path", '"$MODEL"', "--host", "0.0.0.0",
            "--port", '"${PORT:-30000}"', "--tp", str(p.tp)]
    if s.dp > 1:
        argv += ["--dp", str(s.dp)]
    if p.pp > 1:
        argv += ["--pp-size", str(p.pp)]
    if p.ep > 1:
        argv += ["--ep-size", str(p.ep)]
    argv += ["--mem-fraction-static", f"{i.gpu_memory_utilization:g}", "--context-length", str(max_model_len(plan)),
             "--max-running-requests", str(i.concurrency), "--dtype", model_dtype(plan),
             "--kv-cache-dtype", kv_name(plan, SGLANG_KV, ("llama.cpp",))]
    q = quant_name(plan, SGLANG_QUANT, ALTERNATIVES)
    if q:
        argv += ["--quantization", q]
    if not i.cuda_graphs:
        argv.append("--disable-cuda-graph")
    if plan.multi_node:
        argv += ["--nnodes", str(plan.nodes), "--node-rank", '"${NODE_RANK:?set NODE_RANK (0 on the head node)}"',
                 "--dist-init-addr", '"${MASTER_ADDR:?set MASTER_ADDR to the head node}:${MASTER_PORT:-5000}"']
    return argv, notes


def files(plan: Plan) -> dict[str, str]:
    require_serving(plan)
    check_serve_precision(plan)
    if plan.s.infer.weights.startswith("gguf"):
        raise unsupported(plan, f"infer.weights '{plan.s.infer.weights}'", "GGUF files are served by llama.cpp.",
                          ("llama.cpp",))
    argv, notes = serve_argv(plan)
    body = ["set -euo pipefail", f'MODEL="${{MODEL:-{plan.model_ref}}}"']
    if plan.multi_node:
        body.append("# multi-node: run this on every node with NODE_RANK and MASTER_ADDR set")
    body.append(shell_command(argv))
    return {"serve.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(body) + "\n"}

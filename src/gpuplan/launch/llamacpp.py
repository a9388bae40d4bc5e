"""llama.cpp: a `llama-server` script for a GGUF file."""
from __future__ import annotations

from ._common import Plan, hash_header, max_model_len, require_serving, shell_command, unsupported
from ._serve import LLAMACPP_KV, canonical_weights

ALTERNATIVES = ("vllm", "sglang", "trtllm")
# our weight format -> the GGUF file type name llama.cpp's quantize tool writes
_GGUF_TYPE = {"bf16": "BF16", "fp16": "F16", "fp32": "F32", "gguf-f16": "F16"}


def files(plan: Plan) -> dict[str, str]:
    require_serving(plan)
    i, p = plan.s.infer, plan.s.parallel
    if plan.multi_node:
        raise unsupported(plan, f"{plan.nodes} nodes", "llama-server runs on one machine (its RPC backend is not planned here).",
                          ALTERNATIVES)
    w = canonical_weights(plan)
    if w.startswith("gguf-"):
        ftype = _GGUF_TYPE.get(w, w.removeprefix("gguf-").upper())
    elif w in _GGUF_TYPE:
        ftype = _GGUF_TYPE[w]
    else:
        raise unsupported(plan, f"infer.weights '{w}'", "llama.cpp loads GGUF files (or 16/32-bit GGUF conversions).",
                          ALTERNATIVES, "use a gguf-* weight format, or")
    kv = i.kv_cache.strip().lower()
    if kv not in LLAMACPP_KV:
        raise unsupported(plan, f"infer.kv_cache '{kv}'", "llama.cpp's KV cache takes f32, f16, q8_0 or q4_0.",
                          ("vllm", "sglang", "trtllm"), "use q8_0 for an 8-bit cache, or")
    notes = []
    if kv == "bf16":
        notes.append("KV cache bf16 -> f16 (same size; llama.cpp's CUDA kernels favour f16)")
    if p.tp > 1 or p.pp > 1 or plan.s.dp > 1:
        notes.append(f"{plan.count} GPUs: llama.cpp splits layers across all visible GPUs (--split-mode layer); "
                     "tp/pp/dp of the plan do not map one-to-one")
    ctx = max_model_len(plan) * i.concurrency
    notes.append(f"-c is the total context of all {i.concurrency} slots ({max_model_len(plan)} tokens each)")
    ngl = i.gpu_layers if i.gpu_layers is not None else 999
    name = plan.spec.name
    argv = ["llama-server", "-m", '"$MODEL_GGUF"', "--host", "0.0.0.0", "--port", '"${PORT:-8080}"',
            "-ngl", str(ngl), "-c", str(ctx), "-np", str(i.concurrency),
            "--cache-type-k", LLAMACPP_KV[kv], "--cache-type-v", LLAMACPP_KV[kv], "-fa", "on"]
    if plan.count > 1:
        argv += ["--split-mode", "layer"]
    body = ["set -euo pipefail",
            f"# -ngl {ngl}: " + ("all layers on the GPU" if i.gpu_layers is None else f"{ngl} layers on the GPU, the rest on the CPU"),
            "# -fa on: flash attention (needed for a quantized V cache); builds before 2025-08 take a bare -fa",
            f'MODEL_GGUF="${{MODEL_GGUF:-{name}-{ftype}.gguf}}"',
            shell_command(argv)]
    return {"serve.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(body) + "\n"}

"""SGLang: a `python -m sglang.launch_server` script."""
from __future__ import annotations

from ._common import Plan, check_serve_precision, hash_header, max_model_len, require_serving, shell_command, unsupported
from ._serve import SGLANG_KV, SGLANG_QUANT, kv_name, model_dtype, prequantized_note, quant_name

# Flag names from SGLang's own definitions (python/sglang/srt/arg_groups/fields/parallel.py, exec_.py;
# launch/data/engine_flags.csv): --tp-size/--dp-size/--pp-size/--ep-size are the option names (--tp and
# --dp only worked as argparse prefixes). --dp-size means that many engine replicas; --attn-dp-size N
# splits the attention of ONE engine of --tp-size ranks into N groups (attn_tp = tp_size / N) while
# the MoE layers use ep_size of those ranks (0.5.23 fields/parallel.py: the older spelling
# `--dp-size N --enable-dp-attention` is deprecated, "remove after 2026-12-31"). --disable-cuda-graph
# is a deprecated alias of --cuda-graph-backend-decode/-prefill disabled.


def parallel_args(plan: Plan) -> tuple[list[str], list[str]]:
    """SGLang's parallel flags for the plan's tp x dp x pp (x ep) layout."""
    p, dp = plan.s.parallel, plan.s.dp
    notes: list[str] = []
    if p.ep > 1 and dp > 1:
        width = p.tp * dp                      # one engine spans tp x dp ranks: attention-DP + EP
        if width % p.ep:
            raise unsupported(plan, f"ep={p.ep} with tp={p.tp} x dp={dp}",
                              "SGLang's expert parallelism splits the tp_size ranks of one engine; ep must divide "
                              "tp x dp.", ("vllm", "trtllm"), "choose an ep that divides tp x dp, or")
        args = ["--tp-size", str(width), "--attn-dp-size", str(dp), "--ep-size", str(p.ep)]
        notes.append(f"attention data-parallel: one engine of {width} ranks, attention {dp} x tp{p.tp}, "
                     f"experts over ep {p.ep}")
    else:
        args = ["--tp-size", str(p.tp)]
        if dp > 1:
            args += ["--dp-size", str(dp)]     # replicas, each of tp_size ranks
        if p.ep > 1:
            args += ["--ep-size", str(p.ep)]
    if p.pp > 1:
        args += ["--pp-size", str(p.pp)]
    return args, notes

ALTERNATIVES = ("vllm", "trtllm", "llama.cpp")


def _mem_fraction(plan: Plan) -> float:
    """The fraction the memory estimate sized the KV pool with: the scenario's gpu_memory_utilization, else
    SGLang's own default on the plan's GPU (estimate.memory.sglang_fraction), stated so the engine started is
    the engine estimated whatever the installed SGLang's default."""
    from ..estimate.memory import sglang_fraction
    from ..hardware import get_gpu
    return sglang_fraction(plan.s, float(get_gpu(plan.s.hardware.gpu).usable_memory_bytes))


def serve_argv(plan: Plan) -> tuple[list[str], list[str]]:
    i = plan.s.infer
    notes = prequantized_note(plan)
    notes.append("--mem-fraction-static counts weights + KV pool only; activations and CUDA graphs use the rest "
                 "(lower it if the server runs out of memory at start-up)")
    argv = ["python", "-m", "sglang.launch_server", "--model-path", '"$MODEL"', "--host", "0.0.0.0",
            "--port", '"${PORT:-30000}"']
    par, par_notes = parallel_args(plan)
    argv += par
    notes += par_notes
    argv += ["--mem-fraction-static", f"{_mem_fraction(plan):g}", "--context-length", str(max_model_len(plan)),
             "--max-running-requests", str(i.concurrency), "--dtype", model_dtype(plan),
             "--kv-cache-dtype", kv_name(plan, SGLANG_KV, ("llama.cpp",))]
    if i.schedule_conservativeness is not None:
        argv += ["--schedule-conservativeness", f"{i.schedule_conservativeness:g}"]
    q = quant_name(plan, SGLANG_QUANT, ALTERNATIVES)
    if q:
        argv += ["--quantization", q]
    if not i.cuda_graphs:
        argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
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

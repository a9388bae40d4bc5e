"""Engine flags entered by hand from the engine's own files, where no extraction script ran here.

vLLM and SGLang snapshots are larger than this project's tools can fetch whole, so their rows come
from reading the cited files (method "read"); TensorRT-LLM and llama.cpp rows come from their
documented CLIs (method "docs"). Only the options gpuplan writes (and their choices) are listed;
every row names the file and commit or page it was read from. Re-run after editing a row.

Usage: python scripts/engine_facts_read.py [--fallback]
  (TensorRT-LLM; vLLM, SGLang and llama.cpp only with the flag: their extraction scripts replace them)
"""
from __future__ import annotations

from engine_facts_common import write_rows

RETRIEVED = "2026-12-03"

VLLM_GH = "https://github.com/vllm-project/vllm/blob/"
VLLM_ARGS = VLLM_GH + "001999d2f360c2c5da23a916510c273b1a73d06c/vllm/engine/arg_utils.py"
VLLM_QUANT = VLLM_GH + "05d909563e1d1ada39a13b67e7b9a4cbca1d6a8e/vllm/model_executor/layers/quantization/__init__.py"
VLLM_BNB = "https://github.com/vllm-project/vllm/issues/52802"
VLLM_FRONT = "https://docs.vllm.ai/en/v0.8.5/serving/engine_args.html"
VLLM_VERSION = ">=0.28"
# QuantizationMethods at 05d90956, without bitsandbytes (out of tree since 0.28: the plugin row below)
VLLM_QUANT_CHOICES = ["awq", "fp8", "ptpc_fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "bitblas", "gguf",
                      "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq", "compressed-tensors",
                      "experts_int8", "ipex", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "mxfp8",
                      "petit_nvfp4", "cpu_awq"]

SGL = "https://github.com/sgl-project/sglang/blob/"
SGL_PAR = SGL + "00ac7105db02776e90962fc6bb311d20dffe87ae/python/sglang/srt/arg_groups/fields/parallel.py"
SGL_MODEL = SGL + "0116c6066d6ead4b97c0468f65e04cad47ca021e/python/sglang/srt/arg_groups/fields/model.py"
SGL_SERVE = SGL + "07fca69414c7ded82f444d9af9ea9598777fac71/python/sglang/srt/arg_groups/fields/serving.py"
SGL_SCHED = SGL + "144437f109ecd7d12db04f352c66578880897dcf/python/sglang/srt/arg_groups/fields/schedule.py"
SGL_EXEC = SGL + "f489bf94330e821aa6c4861036384bf466709238/python/sglang/srt/arg_groups/fields/exec_.py"
SGL_CHOICES = SGL + "0099dee6aa65cb084e4b97956dd547519f3d8053/python/sglang/srt/arg_groups/choices.py"
SGL_VERSION = ">=0.5.20"
SGL_QUANT_CHOICES = ["awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
                     "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed", "petit_nvfp4", "w8a8_int8",
                     "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round", "auto-round-int8",
                     "compressed-tensors", "modelslim", "mxfp_w4a8", "quark", "quark_int4fp8_moe", "quark_mxfp4",
                     "mlx_q4", "mlx_q8", "unquant", "humming"]
CUDA_GRAPH_BACKENDS = ["full", "breakable", "tc_piecewise", "disabled"]
DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]

TRT_SERVE = "https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html"
TRT_BENCH = "https://nvidia.github.io/TensorRT-LLM/developer-guide/perf-benchmarking.html"
TRT_VERSION = "1.x (docs)"
LCPP = "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md"
LCPP_VERSION = "master (docs; -fa takes on|off|auto since 2025-08)"
KV_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def row(engine, version, flag, kind, url, choices=(), aliases=(), method="read"):
    return {"engine": engine, "version": version, "flag": flag, "kind": kind, "choices": ";".join(choices),
            "aliases": ";".join(aliases), "source_url": url, "retrieved": RETRIEVED, "method": method}


def vllm_rows():
    v = VLLM_VERSION
    return [row("vllm", v, "--host", "str", VLLM_FRONT, method="docs"),
            row("vllm", v, "--port", "int", VLLM_FRONT, method="docs"),
            row("vllm", v, "--tensor-parallel-size", "int", VLLM_ARGS, aliases=["-tp"]),
            row("vllm", v, "--pipeline-parallel-size", "int", VLLM_ARGS, aliases=["-pp"]),
            row("vllm", v, "--data-parallel-size", "int", VLLM_FRONT, aliases=["-dp"], method="docs"),
            row("vllm", v, "--enable-expert-parallel", "bool", VLLM_FRONT, method="docs"),
            row("vllm", v, "--max-model-len", "int", VLLM_ARGS),
            row("vllm", v, "--gpu-memory-utilization", "float", VLLM_ARGS),
            row("vllm", v, "--max-num-seqs", "int", VLLM_ARGS),
            row("vllm", v, "--max-num-batched-tokens", "int", VLLM_ARGS),
            row("vllm", v, "--dtype", "choice", VLLM_ARGS, DTYPES),
            row("vllm", v, "--kv-cache-dtype", "choice", VLLM_ARGS, ["auto", "fp8", "fp8_e5m2", "fp8_e4m3"]),
            row("vllm", v, "--quantization", "choice", VLLM_QUANT, VLLM_QUANT_CHOICES, aliases=["-q"]),
            # a value only a plugin registers: flag "--quantization=VALUE", kind "plugin", choices = the package
            row("vllm", v, "--quantization=bitsandbytes", "plugin", VLLM_BNB, ["vllm-bnb-plugin"]),
            row("vllm", v, "--enforce-eager", "bool", VLLM_ARGS),
            row("vllm", v, "--distributed-executor-backend", "choice", VLLM_ARGS,
                ["ray", "mp", "uni", "external_launcher"])]


def sglang_rows():
    v = SGL_VERSION
    return [row("sglang", v, "--model-path", "str", SGL_MODEL, aliases=["--model"]),
            row("sglang", v, "--host", "str", SGL_SERVE), row("sglang", v, "--port", "int", SGL_SERVE),
            row("sglang", v, "--tp-size", "int", SGL_PAR, aliases=["--tensor-parallel-size"]),
            row("sglang", v, "--dp-size", "int", SGL_PAR, aliases=["--data-parallel-size"]),
            row("sglang", v, "--pp-size", "int", SGL_PAR, aliases=["--pipeline-parallel-size"]),
            row("sglang", v, "--ep-size", "int", SGL_PAR, aliases=["--expert-parallel-size", "--ep"]),
            row("sglang", v, "--enable-dp-attention", "bool", SGL_PAR),
            row("sglang", v, "--nnodes", "int", SGL_PAR), row("sglang", v, "--node-rank", "int", SGL_PAR),
            row("sglang", v, "--dist-init-addr", "str", SGL_PAR, aliases=["--nccl-init-addr"]),
            row("sglang", v, "--mem-fraction-static", "float", SGL_SCHED),
            row("sglang", v, "--max-running-requests", "int", SGL_SCHED),
            row("sglang", v, "--context-length", "int", SGL_MODEL),
            row("sglang", v, "--dtype", "choice", SGL_MODEL, DTYPES),
            row("sglang", v, "--kv-cache-dtype", "choice", SGL_MODEL,
                ["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"]),
            row("sglang", v, "--quantization", "choice", SGL_CHOICES, SGL_QUANT_CHOICES),
            row("sglang", v, "--cuda-graph-backend-decode", "choice", SGL_EXEC, CUDA_GRAPH_BACKENDS),
            row("sglang", v, "--cuda-graph-backend-prefill", "choice", SGL_EXEC, CUDA_GRAPH_BACKENDS),
            # deprecated alias (DeprecatedStoreTrueAction, sglang PR #38384): generators must not write it
            row("sglang", v, "--disable-cuda-graph", "deprecated", "https://github.com/sgl-project/sglang/pull/38384")]


def trtllm_rows():
    v, s, b = TRT_VERSION, TRT_SERVE, TRT_BENCH
    backends = ["pytorch", "tensorrt", "_autodeploy"]
    serve = [("--backend", "choice", backends), ("--host", "str", ()), ("--port", "int", ()),
             ("--tp_size", "int", ()), ("--pp_size", "int", ()), ("--ep_size", "int", ()),
             ("--max_batch_size", "int", ()), ("--max_num_tokens", "int", ()), ("--max_seq_len", "int", ()),
             ("--kv_cache_free_gpu_memory_fraction", "float", ()), ("--extra_llm_api_options", "str", ())]
    bench = [("--dataset", "str", ()), ("--backend", "choice", backends), ("--tp", "int", ()), ("--pp", "int", ()),
             ("--ep", "int", ()), ("--max_batch_size", "int", ()), ("--max_num_tokens", "int", ()),
             ("--max_seq_len", "int", ()), ("--concurrency", "int", ()), ("--extra_llm_api_options", "str", ())]
    return ([row("trtllm", v, f, k, s, c, method="docs") for f, k, c in serve]
            + [row("trtllm-bench", v, f, k, b, c, method="docs") for f, k, c in bench])


def llamacpp_rows():
    v, u = LCPP_VERSION, LCPP
    return [row("llama.cpp", v, f, k, u, c, method="docs") for f, k, c in (
        ("-m", "str", ()), ("--host", "str", ()), ("--port", "int", ()), ("-ngl", "int", ()), ("-c", "int", ()),
        ("-np", "int", ()), ("--cache-type-k", "choice", KV_TYPES), ("--cache-type-v", "choice", KV_TYPES),
        ("-fa", "choice", ["on", "off", "auto"]), ("--split-mode", "choice", ["none", "layer", "row"]))]


def main() -> None:
    import sys
    tables = [("trtllm", trtllm_rows()[:11]), ("trtllm-bench", trtllm_rows()[11:])]
    # vLLM, SGLang and llama.cpp are extracted (scripts/engine_facts_vllm.py from the 0.33.0 parser,
    # engine_facts_sglang.py from the 0.5.23 sources, engine_facts_llamacpp.py from common/arg.cpp);
    # the hand-read rows below remain only as a fallback for a machine where those cannot run
    if "--fallback" in sys.argv:
        tables = [("vllm", vllm_rows()), ("sglang", sglang_rows()), ("llama.cpp", llamacpp_rows())] + tables
    for engine, rows in tables:
        print(f"{engine}: {write_rows(engine, rows)} rows")


if __name__ == "__main__":
    main()

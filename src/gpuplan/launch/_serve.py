"""Serving-side translation: our weight/KV format names -> each engine's spelling (once, here)."""
from __future__ import annotations

from ..dtypes import weight_format
from ._common import Plan, unsupported

# The serving flags and their choices are checked against launch/data/engine_flags.csv (vLLM >= 0.28:
# vllm/engine/arg_utils.py, quantization/__init__.py, bitsandbytes out of tree since 0.28; SGLang
# >= 0.5.20: python/sglang/srt/arg_groups/fields/*.py and arg_groups/choices.py; commits per row).

# our weight format family/name -> vLLM --quantization (None: no flag). AWQ/GPTQ name the Marlin
# kernels the speed estimate assumes: an explicit "awq"/"gptq" kept vLLM <= 0.27 and SGLang on the
# slow kernels (awq_marlin.py/gptq_marlin.py override_quantization_method only upgrades an unset or
# marlin choice). Marlin needs compute capability >= 8.0: older GPUs get the plain names.
VLLM_QUANT = {"fp8": "fp8", "fp8-block": "fp8", "awq-int4": "awq_marlin", "gptq-int4": "gptq_marlin",
              "gptq-int8": "gptq_marlin", "int8": "bitsandbytes", "nf4": "bitsandbytes", "nf4-dq": "bitsandbytes",
              "mxfp4": "mxfp4", "nvfp4": "modelopt_fp4"}
SGLANG_QUANT = {"fp8": "fp8", "fp8-block": "fp8", "awq-int4": "awq_marlin", "gptq-int4": "gptq_marlin",
                "gptq-int8": "gptq_marlin", "nf4": "bitsandbytes", "nf4-dq": "bitsandbytes", "int8": "bitsandbytes",
                "mxfp4": "mxfp4", "nvfp4": "modelopt_fp4"}
_NO_MARLIN_FAMILIES = {"pascal", "volta", "turing"}
BNB_WEIGHTS = ("int8", "nf4", "nf4-dq")
VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
TRTLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"}
LLAMACPP_KV = {"bf16": "f16", "fp16": "f16", "fp32": "f32", "q8_0": "q8_0", "q4_0": "q4_0"}


def canonical_weights(plan: Plan) -> str:
    return weight_format(plan.s.infer.weights).name


def model_dtype(plan: Plan) -> str:
    w = canonical_weights(plan)
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(w, "auto")


def kv_name(plan: Plan, table: dict[str, str], engines_with: tuple[str, ...]) -> str:
    kv = plan.s.infer.kv_cache.strip().lower()
    if kv not in table:
        raise unsupported(plan, f"infer.kv_cache '{kv}'", f"{plan.engine} has no such KV-cache format "
                          f"(it takes {', '.join(sorted(table))}).", engines_with)
    return table[kv]


# formats only a published checkpoint stores (models/checkpoint.py stored_weight_format): the engine reads the
# method from its config.json, and a --quantization flag that names it differently is refused at start-up
CONFIG_NAMED = ("mxfp4-experts",)


def quant_name(plan: Plan, table: dict[str, str], engines_with: tuple[str, ...]) -> str | None:
    w = canonical_weights(plan)
    if w in ("bf16", "fp16", "fp32") or w in CONFIG_NAMED:
        return None
    if w not in table:
        raise unsupported(plan, f"infer.weights '{w}'", f"{plan.engine} does not load this weight format.",
                          engines_with)
    name = table[w]
    if name.endswith("_marlin") and plan.gpu is not None and plan.gpu.family in _NO_MARLIN_FAMILIES:
        return name[:-len("_marlin")]          # Marlin kernels need sm80+; the plain kernel is all there is
    return name


def prequantized_note(plan: Plan) -> list[str]:
    w = canonical_weights(plan)
    if w in ("awq-int4", "gptq-int4", "gptq-int8", "mxfp4", "nvfp4") or (w == "int8" and plan.engine == "vllm"):
        return [f"weights '{w}' need a pre-quantized checkpoint: set MODEL to one (the base id is only a default)"]
    return []

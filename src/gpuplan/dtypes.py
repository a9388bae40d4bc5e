"""Closed vocabulary of numeric formats, measured in bits per element.

Plain dtypes are exact. Quantized weight formats carry their per-block scales/zeros in the bits
(sources in docs/model.md and ../shared/reference/inference-notes.md §3.1):
GPTQ/AWQ g128 = 4 + 16/128 + 4/128; NF4 = 4 + 32/64 (blocksize 64, fp32 absmax), with double
quantization 4 + 8/64 + 32/(64*256); GGUF block types from ggml-common.h; GGUF *mixes* are the
whole-file averages llama.cpp's quantize README reports for Llama-3.1-8B (they include the 16-bit
-ish embedding/output tensors, so they apply to the whole model, not only the linears).
An unknown name is an error, never a silent fp32.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownNameError, close_matches


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits: float                # bits per element of the quantized tensors, scales included
    scope: str                 # "all": every parameter; "linear": only the quantized linears; "expert": only the
                               # routed experts' matrices; "file": whole-file average
    compute_dtype: str         # dtype the matmuls run in
    family: str                # float | int | gptq | awq | nf4 | gguf | fp8 | fp4


# 16-bit-or-wider formats used for training and activations
DTYPE_BITS: dict[str, float] = {
    "fp64": 64, "fp32": 32, "tf32": 32, "bf16": 16, "fp16": 16,
    "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "int4": 4, "fp4": 4,
}

_W = WeightFormat
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in [
    _W("fp32", 32, "all", "fp32", "float"),
    _W("bf16", 16, "all", "bf16", "float"),
    _W("fp16", 16, "all", "fp16", "float"),
    _W("fp8", 8.0, "linear", "fp8", "fp8"),
    _W("fp8-block", 8 + 32 / 16384, "linear", "fp8", "fp8"),
    _W("int8", 8 + 0.0, "linear", "int8", "int"),           # LLM.int8 / W8A8; +1 fp32 scale per row (negligible)
    _W("gptq-int4", 4 + 16 / 128 + 4 / 128, "linear", "fp16", "gptq"),
    _W("awq-int4", 4 + 16 / 128 + 4 / 128, "linear", "fp16", "awq"),
    _W("gptq-int8", 8 + 16 / 128 + 8 / 128, "linear", "fp16", "gptq"),
    _W("nf4", 4 + 32 / 64, "linear", "bf16", "nf4"),
    _W("nf4-dq", 4 + 8 / 64 + 32 / (64 * 256), "linear", "bf16", "nf4"),
    _W("mxfp4", 4.25, "linear", "bf16", "fp4"),
    # gpt-oss's checkpoint: MXFP4 routed experts only (attention, router, embeddings, lm_head 16-bit)
    _W("mxfp4-experts", 4.25, "expert", "bf16", "fp4"),
    _W("nvfp4", 4.5, "linear", "fp4", "fp4"),
    # GGUF block types (ggml-common.h)
    _W("gguf-q4_0", 4.5, "linear", "fp16", "gguf"),
    _W("gguf-q4_1", 5.0, "linear", "fp16", "gguf"),
    _W("gguf-q5_0", 5.5, "linear", "fp16", "gguf"),
    _W("gguf-q5_1", 6.0, "linear", "fp16", "gguf"),
    _W("gguf-q8_0", 8.5, "all", "fp16", "gguf"),
    _W("gguf-q2_k", 3.16, "file", "fp16", "gguf"),
    _W("gguf-q3_k_s", 3.64, "file", "fp16", "gguf"),
    _W("gguf-q3_k_l", 4.30, "file", "fp16", "gguf"),
    _W("gguf-q4_k_s", 4.67, "file", "fp16", "gguf"),
    _W("gguf-q4_k_m", 4.89, "file", "fp16", "gguf"),
    _W("gguf-q5_k_s", 5.57, "file", "fp16", "gguf"),
    _W("gguf-q5_k_m", 5.70, "file", "fp16", "gguf"),
    _W("gguf-q6_k", 6.5625, "all", "fp16", "gguf"),
    _W("gguf-iq2_xxs", 2.38, "file", "fp16", "gguf"),
    _W("gguf-iq2_xs", 2.59, "file", "fp16", "gguf"),
    _W("gguf-iq3_xxs", 3.25, "file", "fp16", "gguf"),
    _W("gguf-iq3_m", 3.76, "file", "fp16", "gguf"),
    _W("gguf-iq4_xs", 4.46, "file", "fp16", "gguf"),
    _W("gguf-iq4_nl", 4.68, "file", "fp16", "gguf"),
    _W("gguf-f16", 16.0, "all", "fp16", "gguf"),
]}

_ALIASES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
    "float8": "fp8", "e4m3": "fp8", "awq": "awq-int4", "gptq": "gptq-int4", "int4": "awq-int4",
    "q4_k_m": "gguf-q4_k_m", "q5_k_m": "gguf-q5_k_m", "q8_0": "gguf-q8_0", "q4_0": "gguf-q4_0",
    "q6_k": "gguf-q6_k", "bnb-nf4": "nf4-dq", "bnb-int8": "int8", "llm.int8": "int8",
}

# KV-cache element formats (llama.cpp q8_0/q4_0 caches carry their block scales)
KV_FORMAT_BITS: dict[str, float] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp8_e4m3": 8,
                                    "fp8_e5m2": 8, "q8_0": 8.5, "q4_0": 4.5}


def _canon(name: str) -> str:
    key = str(name).strip().lower().replace(" ", "")
    return _ALIASES.get(key, key)


def _lookup(table: dict, name: str, what: str, extra_names=()):
    # a table's own name wins over an alias meant for another table ("q4_0" is a KV format as itself
    # and a weight format as gguf-q4_0; "int4" is a dtype as itself and a weight format as awq-int4)
    raw = str(name).strip().lower().replace(" ", "")
    key = raw if raw in table else _canon(name)
    if key not in table:
        raise UnknownNameError(f"{what} '{name}'", f"is not a known {what}.", f"use one of {', '.join(table)}.",
                               close_matches(name, list(table) + list(extra_names)))
    return table[key]


def dtype_bytes(name: str) -> float:
    """Bytes per element of a plain dtype (bf16 -> 2.0)."""
    return _lookup(DTYPE_BITS, name, "dtype") / 8


def weight_format(name: str) -> WeightFormat:
    return _lookup(WEIGHT_FORMATS, name, "weight format", _ALIASES)


def kv_bytes(name: str) -> float:
    return _lookup(KV_FORMAT_BITS, name, "KV-cache format") / 8

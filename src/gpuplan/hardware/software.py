"""Which software runs on which accelerator: vendor stack, numeric formats, attention kernels and
engines (data in data/software.csv, one row per GPU id; see docs/software-matrix.md).

`check()` turns the table into problems a planner can show: errors for combinations that cannot
run (TensorRT-LLM on an AMD GPU), warnings for paths that run without the expected speed-up
(FP8 weights on an A100 run as weight-only W8A16 at 16-bit math).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from ..errors import InputError, UnknownNameError, close_matches
from ._csv import data_path, read_rows, split_list, split_notes
from .gpus import GpuSpec, get_gpu

ENGINES = ("pytorch", "fsdp", "deepspeed", "megatron", "vllm", "sglang", "trtllm", "llamacpp", "hf")
ENGINE_NAMES = {"pytorch": "PyTorch", "fsdp": "FSDP", "deepspeed": "DeepSpeed", "megatron": "Megatron-LM",
                "vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "llamacpp": "llama.cpp",
                "hf": "HF Transformers"}
SERVING = ("vllm", "sglang", "llamacpp", "trtllm", "hf")
TRAINING = ("fsdp", "pytorch", "hf", "deepspeed", "megatron")
FORMATS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8", "int4")
ATTENTION = ("flash_attn2", "flash_attn3", "ck_flash_attn")
LEVELS = ("yes", "limited", "no")

_ENGINE_ALIASES = {"torch": "pytorch", "fsdp2": "fsdp", "torchrun": "pytorch", "megatron-lm": "megatron",
                   "megatron_lm": "megatron", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm",
                   "llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "llama_cpp": "llamacpp", "transformers": "hf",
                   "accelerate": "hf", "huggingface": "hf"}
_FORMAT_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                   "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "float8": "fp8", "fp8-block": "fp8",
                   "w8a8": "int8", "mxfp4": "fp4", "nvfp4": "fp4", "awq": "int4", "gptq": "int4",
                   "awq-int4": "int4", "gptq-int4": "int4", "gptq-int8": "int8", "nf4": "int4", "nf4-dq": "int4",
                   "w4a16": "int4", "bnb-nf4": "int4", "bnb-int8": "int8", "llm.int8": "int8"}
_ATTN_ALIASES = {"fa2": "flash_attn2", "flash": "flash_attn2", "flash-attn": "flash_attn2",
                 "flash_attention_2": "flash_attn2", "flash-attn2": "flash_attn2", "flashattention2": "flash_attn2",
                 "flash-attention-2": "flash_attn2", "fa3": "flash_attn3", "flash-attn3": "flash_attn3",
                 "flash_attention_3": "flash_attn3", "flashattention3": "flash_attn3",
                 "flash-attention-3": "flash_attn3", "ck": "ck_flash_attn"}
_ALWAYS_OK_ATTN = ("sdpa", "eager", "xformers", "flex")
_FORMAT_ALTERNATIVES = {
    "bf16": "use fp16 (with loss scaling for training)",
    "fp16": "use bf16",
    "fp32": "use bf16 with fp32 accumulation",
    "tf32": "use bf16, or fp32 without TF32",
    "fp8": "keep bf16/fp16 math (FP8 weights still halve weight memory), or use an FP8-capable accelerator "
           "(NVIDIA Ada/Hopper/Blackwell, AMD MI300+, Intel Gaudi 2+)",
    "fp4": "use fp8 or bf16, or an FP4-capable accelerator (NVIDIA Blackwell, AMD MI355X)",
    "int8": "use fp8 or bf16",
    "int4": "use a weight-only 4-bit format supported by the engine, or 8/16-bit weights",
}

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    severity: Severity
    message: str
    alternative: str
    topic: str = ""          # what the problem is about: "engine" | "format" | "attention"
    subject: str = ""        # the canonical name checked (engine key, numeric format, attention kernel)
    level: str = ""          # the support level found: "no" | "limited" | "emulated"

    @property
    def limited(self) -> bool:
        """Runs, with limited support (a port, a fork, missing kernels): ranks lower in the search."""
        return self.level == "limited"

    def to_dict(self) -> dict:
        return {"severity": self.severity, "message": self.message, "alternative": self.alternative}


@dataclass(frozen=True, kw_only=True)
class SoftwareSupport:
    gpu_id: str
    stack: str                                 # cuda | rocm | xla | synapse | metal
    cuda_cc: str | None
    rocm_min: str | None
    xla: bool
    synapse: str | None
    metal: str | None
    native_formats: tuple[str, ...]
    emulated_formats: tuple[str, ...]
    attention: Mapping[str, str]               # flash_attn2 / flash_attn3 / ck_flash_attn -> yes|limited|no
    engines: Mapping[str, str]                 # engine -> yes|limited|no
    format_notes: Mapping[str, str]
    engine_notes: Mapping[str, str]
    source_url: str
    retrieved: str

    def format_status(self, dtype: str) -> Literal["native", "emulated", "no"]:
        key = normalize_format(dtype)
        if key in self.native_formats:
            return "native"
        if key in self.emulated_formats:
            return "emulated"
        return "no"

    def engine_status(self, engine: str) -> str:
        return self.engines[normalize_engine(engine)]

    def to_dict(self) -> dict:
        return {"gpu_id": self.gpu_id, "stack": self.stack, "cuda_cc": self.cuda_cc, "rocm_min": self.rocm_min,
                "xla": self.xla, "synapse": self.synapse, "metal": self.metal,
                "native_formats": list(self.native_formats), "emulated_formats": list(self.emulated_formats),
                "attention": dict(self.attention), "engines": dict(self.engines),
                "format_notes": dict(self.format_notes), "engine_notes": dict(self.engine_notes),
                "source_url": self.source_url, "retrieved": self.retrieved}


def normalize_engine(engine: str) -> str:
    key = str(engine).strip().lower()
    key = _ENGINE_ALIASES.get(key, key)
    if key not in ENGINES:
        raise UnknownNameError(f"engine '{engine}'", "is not a known engine.", f"use one of {', '.join(ENGINES)}.",
                               close_matches(str(engine), list(ENGINES) + list(_ENGINE_ALIASES)))
    return key


def normalize_format(dtype: str) -> str:
    key = str(dtype).strip().lower()
    key = _FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise UnknownNameError(f"numeric format '{dtype}'", "is not a format the software table covers.",
                               f"use one of {', '.join(FORMATS)} (or awq/gptq/nf4/mxfp4/nvfp4).",
                               close_matches(str(dtype), list(FORMATS) + list(_FORMAT_ALIASES)))
    return key


def normalize_attention(attention: str) -> str:
    key = str(attention).strip().lower()
    key = _ATTN_ALIASES.get(key, key)
    if key not in ATTENTION and key not in _ALWAYS_OK_ATTN:
        raise UnknownNameError(f"attention kernel '{attention}'", "is not known.",
                               f"use one of {', '.join(ATTENTION + _ALWAYS_OK_ATTN)}.",
                               close_matches(str(attention), list(ATTENTION) + list(_ATTN_ALIASES)))
    return key


@functools.cache
def _table() -> dict[str, SoftwareSupport]:
    out = {}
    required = ("gpu_id", "stack", "native_formats", *ENGINES, "flash_attn2", "flash_attn3", "source_url", "retrieved")
    for row in read_rows(data_path("software.csv"), required, label="gpuplan/hardware/data/software.csv"):
        url, date = row.provenance()
        for col in (*ENGINES, *ATTENTION):
            row.choice(col, LEVELS, required=col != "ck_flash_attn")
        native = split_list(row.text("native_formats"))
        emulated = split_list(row.text("emulated_formats", required=False))
        for col, fmts in (("native_formats", native), ("emulated_formats", emulated)):
            bad = [f for f in fmts if f not in FORMATS]
            if bad:
                raise row.fail(col, f"unknown format(s) {bad}.", f"use {', '.join(FORMATS)}.")
        gid = row.text("gpu_id")
        out[gid] = SoftwareSupport(
            gpu_id=gid, stack=row.choice("stack", ("cuda", "rocm", "xla", "synapse", "metal")),
            cuda_cc=row.text("cuda_cc", required=False) or None, rocm_min=row.text("rocm_min", required=False) or None,
            xla=row.text("xla", required=False) == "yes", synapse=row.text("synapse", required=False) or None,
            metal=row.text("metal", required=False) or None, native_formats=native, emulated_formats=emulated,
            attention=MappingProxyType({c: row.text(c, required=False) or "no" for c in ATTENTION}),
            engines=MappingProxyType({e: row.text(e) for e in ENGINES}),
            format_notes=MappingProxyType(split_notes(row.text("format_notes", required=False))),
            engine_notes=MappingProxyType(split_notes(row.text("engine_notes", required=False))),
            source_url=url, retrieved=date)
    return out


def support_for(gpu: GpuSpec | str) -> SoftwareSupport:
    spec = get_gpu(gpu)
    table = _table()
    if spec.id in table:
        return table[spec.id]
    # a user-added GPU: borrow the row of a built-in GPU of the same family, if there is one
    for other_id, row in table.items():
        try:
            if get_gpu(other_id).family == spec.family:
                return row
        except InputError:
            continue
    raise UnknownNameError(f"software support for GPU '{spec.id}'", "has no row in software.csv.",
                           "add a row for it to gpuplan/hardware/data/software.csv.")


def _alternative_from_note(note: str) -> str:
    for part in note.split(";"):
        part = part.strip()
        if part.lower().startswith("use "):
            return part
    return ""


def _engine_alternative(sup: SoftwareSupport, engine: str) -> str:
    note_alt = _alternative_from_note(sup.engine_notes.get(engine, ""))
    if note_alt:
        return note_alt
    pool = SERVING if engine in SERVING and engine not in ("hf",) else TRAINING
    good = [ENGINE_NAMES[e] for e in pool if e != engine and sup.engines.get(e) == "yes"]
    if not good:
        good = [ENGINE_NAMES[e] for e in pool if e != engine and sup.engines.get(e) == "limited"]
    return f"use {' or '.join(good[:2])}" if good else "no engine in the table supports this accelerator well"


def check(gpu: GpuSpec | str, *, engine: str | None = None, dtype: str | None = None,
          attention: str | None = None) -> list[Problem]:
    """Problems with running `engine` / `dtype` / `attention` on `gpu` (empty list: fine)."""
    spec = get_gpu(gpu)
    sup = support_for(spec)
    problems: list[Problem] = []
    if engine is not None:
        key = normalize_engine(engine)
        level = sup.engines[key]
        note = sup.engine_notes.get(key, "")
        if level == "no":
            problems.append(Problem("error", f"{ENGINE_NAMES[key]} does not run on {spec.name} ({spec.id})"
                                    + (f": {note}." if note else "."), _engine_alternative(sup, key), "engine", key, "no"))
        elif level == "limited":
            problems.append(Problem("warning", f"{ENGINE_NAMES[key]} on {spec.name} is limited"
                                    + (f": {note}." if note else "."), _engine_alternative(sup, key), "engine", key, "limited"))
    if dtype is not None:
        key = normalize_format(dtype)
        status = sup.format_status(key)
        note = sup.format_notes.get(key, "")
        alt = _FORMAT_ALTERNATIVES[key]
        if status == "emulated":
            problems.append(Problem("warning", f"{key} on {spec.name} ({spec.id}) runs without native hardware "
                                    "support" + (f": {note}." if note else "."), alt, "format", key, "emulated"))
        elif status == "no":
            problems.append(Problem("error", f"{spec.name} ({spec.id}) does not support {key}"
                                    + (f": {note}." if note else "."),
                                    f"{alt}; native formats here: {', '.join(sup.native_formats)}", "format", key, "no"))
    if attention is not None:
        key = normalize_attention(attention)
        if key in ATTENTION:
            level = sup.attention[key]
            note = sup.engine_notes.get(key, "")
            if key == "flash_attn2" and level == "no" and sup.attention.get("ck_flash_attn") == "yes":
                level = "yes"
            if level == "no":
                alt = ("use flash_attn2" if sup.attention.get("flash_attn2") == "yes" else "use sdpa (PyTorch "
                       "scaled_dot_product_attention) or the engine's own attention backend")
                problems.append(Problem("error", f"{key} does not run on {spec.name} ({spec.id})"
                                        + (f": {note}." if note else "."), alt, "attention", key, "no"))
            elif level == "limited":
                problems.append(Problem("warning", f"{key} on {spec.name} is limited" + (f": {note}." if note else "."),
                                        "use sdpa or the engine's default attention backend", "attention", key, "limited"))
    return problems

"""Checkpoints as they are stored: safetensors headers and config.json's quantization_config.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (tensor name ->
{"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__"), then the raw
data (format spec: github.com/huggingface/safetensors README "Format"). Reading only the header gives
the exact bytes and element count of every tensor in its stored dtype, without loading weights, so a
mixed checkpoint (FP8 linears with bf16 embeddings, norms and scales; AWQ/GPTQ int32-packed weights
with fp16 scales) is sized as it will be loaded.

`quantization_config` (transformers' quantizers) is summarised, not applied: the stored bytes already
include its effect.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError

# bytes per element of the safetensors dtype names (safetensors/src/tensor.rs Dtype)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_MAX_HEADER = 100 * 2**20     # the reference implementation refuses headers above 100 MB


@dataclass(frozen=True)
class CheckpointInfo:
    """What the safetensors headers of a checkpoint say, summed over its files."""
    files: tuple[str, ...]
    file_bytes: int                         # sizes of the .safetensors files on disk
    tensor_bytes: int                       # sum of the tensors' data (file_bytes minus headers)
    bytes_by_dtype: Mapping[str, int] = field(default_factory=dict)
    elements_by_dtype: Mapping[str, int] = field(default_factory=dict)
    tensors: int = 0
    quantization: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": "safetensors headers", "files": len(self.files), "file_bytes": self.file_bytes,
                "tensor_bytes": self.tensor_bytes, "tensors": self.tensors,
                "bytes_by_dtype": dict(self.bytes_by_dtype), "elements_by_dtype": dict(self.elements_by_dtype),
                "quantization": dict(self.quantization) if self.quantization else None}


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (tensor data is not read)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ValueError("shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER:
                raise ValueError(f"header length {n:,} bytes is beyond the format's 100 MB limit")
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise InputError(f"checkpoint file '{path}'", f"is not a readable safetensors file ({err}).",
                         "point at a folder of .safetensors files written by safetensors / transformers.") from None
    if not isinstance(header, dict):
        raise InputError(f"checkpoint file '{path}'", "has a safetensors header that is not a JSON object.",
                         "re-download the file.")
    return header


def _tensor_entry(path: Path, name: str, t: Any) -> tuple[str, int, int]:
    """(dtype, elements, bytes) of one header entry, checked against its data offsets."""
    try:
        dtype, shape, (begin, end) = t["dtype"], t["shape"], t["data_offsets"]
        numel = 1
        for s in shape:
            numel *= int(s)
        nbytes = int(end) - int(begin)
    except (KeyError, TypeError, ValueError):
        raise InputError(f"checkpoint file '{path}'", f"tensor '{name}' has a malformed header entry.",
                         "re-download the file.") from None
    if dtype in DTYPE_BYTES and nbytes != numel * DTYPE_BYTES[dtype]:
        raise InputError(f"checkpoint file '{path}'", f"tensor '{name}' stores {nbytes:,} bytes for {numel:,} "
                         f"{dtype} elements ({numel * DTYPE_BYTES[dtype]:,} expected).", "re-download the file.")
    return dtype, numel, nbytes


def quantization_summary(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """quant_method, bits, group size and the modules left unquantized, from config.json's quantization_config."""
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    method = str(q.get("quant_method") or q.get("quant_type") or "unknown").lower()
    bits = q.get("bits") or q.get("w_bit") or q.get("weight_bits")
    if method == "bitsandbytes":
        bits = 4 if q.get("load_in_4bit") else 8 if q.get("load_in_8bit") else bits
    if method == "fp8":
        bits = 8
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first = next(iter(groups.values()), {}) if isinstance(groups, Mapping) else {}
        w = first.get("weights") if isinstance(first, Mapping) else None
        if isinstance(w, Mapping):
            bits = w.get("num_bits", bits)
            q = {**q, "group_size": w.get("group_size"), "weight_type": w.get("type")}
    keep = q.get("modules_to_not_convert") or q.get("ignore") or q.get("llm_int8_skip_modules") or []
    return {"method": method, "bits": bits, "group_size": q.get("group_size") or q.get("q_group_size"),
            "weight_type": q.get("weight_type") or q.get("fmt"),
            "not_quantized": list(keep) if isinstance(keep, (list, tuple)) else [str(keep)]}


def stored_weight_format(config: Mapping[str, Any]) -> str | None:
    """The gpuplan weight format (dtypes.WEIGHT_FORMATS) a published checkpoint stores its weights in, from its
    config.json quantization_config; None for 16-bit checkpoints and for schemes no format describes exactly.
    - `quant_method: mxfp4` with the attention left unconverted (gpt-oss: `modules_to_not_convert` names
      `model.layers.*.self_attn`, the router, the embeddings and lm_head): "mxfp4-experts", routed experts in MXFP4
      (4-bit E2M1 values, one E8M0 scale per 32), everything else 16-bit.
    - `quant_method: fp8` with `weight_block_size` (DeepSeek-V3/R1, Kimi-K2): "fp8-block", one fp32 scale per
      128 x 128 block; without it "fp8"."""
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    method = str(q.get("quant_method") or "").lower()
    keep = [str(m) for m in (q.get("modules_to_not_convert") or [])]
    if method == "mxfp4" and any("self_attn" in m for m in keep):
        return "mxfp4-experts"
    if method == "fp8":
        return "fp8-block" if q.get("weight_block_size") else "fp8"
    return None


def read_checkpoint(folder: Path, config: Mapping[str, Any] | None = None) -> CheckpointInfo | None:
    """Sum the safetensors headers of `folder` (None when it holds no .safetensors file)."""
    files = sorted(p for p in Path(folder).glob("*.safetensors") if p.is_file())
    if not files:
        return None
    by_bytes: dict[str, int] = {}
    by_elems: dict[str, int] = {}
    tensors = 0
    for p in files:
        for name, t in read_header(p).items():
            if name == "__metadata__":
                continue
            dtype, numel, nbytes = _tensor_entry(p, name, t)
            by_bytes[dtype] = by_bytes.get(dtype, 0) + nbytes
            by_elems[dtype] = by_elems.get(dtype, 0) + numel
            tensors += 1
    return CheckpointInfo(files=tuple(p.name for p in files), file_bytes=sum(p.stat().st_size for p in files),
                          tensor_bytes=sum(by_bytes.values()), bytes_by_dtype=by_bytes, elements_by_dtype=by_elems,
                          tensors=tensors, quantization=quantization_summary(config or {}))

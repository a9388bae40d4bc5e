"""GGUF files as they are stored: the header only (no tensor data is read).

Layout (GGUF v2/v3, ggml-org/ggml docs/gguf.md): the magic "GGUF", a uint32 version, uint64 tensor and
metadata counts, the metadata key/value pairs (a key string, a uint32 value type, the value; arrays carry an
element type and a uint64 length), then per tensor its name, uint32 dimension count, uint64 dimensions, uint32
ggml type and uint64 data offset. A tensor's bytes follow from its ggml type: whole blocks of `block` elements of
`size` bytes each (ggml/src/ggml.c type_traits), so a k-quant file is sized exactly as llama.cpp will load it.
All integers are little-endian. Reading stops at the end of the tensor infos; counts and lengths are bounded, so
a corrupt or hostile header fails fast with the file named.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Mapping

from ..errors import InputError

# ggml type id -> (name, elements per block, bytes per block)  (ggml/src/ggml.c type_traits)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 39: ("MXFP4", 32, 17),
}
# metadata value types: id -> struct format (8 string, 9 array handled apart)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_COUNT = 10_000_000          # tensors, metadata pairs, array elements
_MAX_STRING = 64 * 2**20
_MAX_DIMS = 8


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file's header says."""
    path: str
    version: int
    file_bytes: int
    tensors: int
    tensor_bytes: int
    bytes_by_type: Mapping[str, int] = field(default_factory=dict)
    elements_by_type: Mapping[str, int] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)     # scalar and string values; arrays as lengths

    @property
    def parameters(self) -> int:
        return sum(self.elements_by_type.values())

    def to_dict(self) -> dict[str, Any]:
        return {"source": "GGUF header", "path": self.path, "version": self.version, "file_bytes": self.file_bytes,
                "tensors": self.tensors, "parameters": self.parameters, "tensor_bytes": self.tensor_bytes,
                "bytes_by_type": dict(self.bytes_by_type), "elements_by_type": dict(self.elements_by_type),
                "architecture": self.metadata.get("general.architecture"), "name": self.metadata.get("general.name"),
                "file_type": self.metadata.get("general.file_type")}


class _Reader:
    def __init__(self, f: BinaryIO):
        self.f = f

    def take(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        raw = self.f.read(n)
        if len(raw) < n:
            raise ValueError("the header ends early")
        return struct.unpack(fmt, raw)[0]

    def count(self, what: str) -> int:
        n = self.take("<Q")
        if n > _MAX_COUNT:
            raise ValueError(f"{what} {n:,} is beyond any real model")
        return n

    def string(self) -> str:
        n = self.take("<Q")
        if n > _MAX_STRING:
            raise ValueError(f"a string of {n:,} bytes")
        raw = self.f.read(n)
        if len(raw) < n:
            raise ValueError("the header ends early")
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.count("array length")
            for _ in range(n):      # skipped, not kept: tokenizer vocabularies run to 100k+ strings
                self.value(etype)
            return f"[{n} items]"
        raise ValueError(f"unknown metadata value type {vtype}")


def read_gguf(path: Path | str) -> GGUFInfo:
    """Parse the header of one .gguf file; the tensor data is never read."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            r = _Reader(f)
            if f.read(4) != b"GGUF":
                raise ValueError("it does not start with the GGUF magic")
            version = r.take("<I")
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} (gpuplan reads versions 2 and 3)")
            n_tensors, n_kv = r.count("tensor count"), r.count("metadata count")
            meta: dict[str, Any] = {}
            for _ in range(n_kv):
                key = r.string()
                meta[key] = r.value(r.take("<I"))
            by_bytes: dict[str, int] = {}
            by_elems: dict[str, int] = {}
            for _ in range(n_tensors):
                name = r.string()
                n_dims = r.take("<I")
                if n_dims > _MAX_DIMS:
                    raise ValueError(f"tensor '{name}' has {n_dims} dimensions")
                numel = 1
                for _ in range(n_dims):
                    numel *= r.take("<Q")
                gtype = r.take("<I")
                r.take("<Q")                                   # data offset
                if gtype not in GGML_TYPES:
                    raise ValueError(f"tensor '{name}' has ggml type {gtype}, which gpuplan does not know")
                tname, block, nbytes = GGML_TYPES[gtype]
                if numel % block:
                    raise ValueError(f"tensor '{name}': {numel} elements are not whole {tname} blocks of {block}")
                by_bytes[tname] = by_bytes.get(tname, 0) + numel // block * nbytes
                by_elems[tname] = by_elems.get(tname, 0) + numel
    except (OSError, ValueError, struct.error) as err:
        raise InputError(f"GGUF file '{path}'", f"is not a readable GGUF file: {err}.",
                         "point at a .gguf file written by llama.cpp's convert scripts or gguf-py.") from None
    return GGUFInfo(path=str(p), version=version, file_bytes=size, tensors=n_tensors,
                    tensor_bytes=sum(by_bytes.values()), bytes_by_type=by_bytes, elements_by_type=by_elems,
                    metadata=meta)

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
    tensor_names: tuple[str, ...] = ()
    # llama.cpp stores RoPE frequency factors as tensors (rope_freqs, rope_factors_long/short): not model weights
    rope_tensor_elements: int = 0

    @property
    def weight_parameters(self) -> int:
        """Elements of the model's weights: every tensor but the RoPE factor tables."""
        return self.parameters - self.rope_tensor_elements

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
            names: list[str] = []
            rope = 0
            for _ in range(n_tensors):
                name = r.string()
                names.append(name)
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
                rope += numel if name.startswith(("rope_freqs", "rope_factors")) else 0
    except (OSError, ValueError, struct.error) as err:
        raise InputError(f"GGUF file '{path}'", f"is not a readable GGUF file: {err}.",
                         "point at a .gguf file written by llama.cpp's convert scripts or gguf-py.") from None
    return GGUFInfo(path=str(p), version=version, file_bytes=size, tensors=n_tensors,
                    tensor_bytes=sum(by_bytes.values()), bytes_by_type=by_bytes, elements_by_type=by_elems,
                    metadata=meta, tensor_names=tuple(names), rope_tensor_elements=rope)


# ---- the architecture, from llama.cpp's metadata keys -----------------------------------------------------------
# general.architecture -> HF model_type (llama.cpp src/llama-arch.cpp LLM_ARCH_NAMES; a "llama" file with experts
# is Mixtral). Only families gpuplan builds by hand, so no torch/transformers is needed.
GGUF_ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
              "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text", "phi3": "phi3", "granite": "granite"}
# HF config key <- "{arch}." + llama.cpp key (gguf-py/gguf/constants.py Keys.LLM / Keys.Attention / Keys.Rope)
_GGUF_KEYS = {"hidden_size": "embedding_length", "num_hidden_layers": "block_count",
              "intermediate_size": "feed_forward_length", "num_attention_heads": "attention.head_count",
              "num_key_value_heads": "attention.head_count_kv", "max_position_embeddings": "context_length",
              "rope_theta": "rope.freq_base", "rms_norm_eps": "attention.layer_norm_rms_epsilon",
              "head_dim": "attention.key_length", "sliding_window": "attention.sliding_window",
              "num_local_experts": "expert_count", "num_experts_per_tok": "expert_used_count",
              "moe_intermediate_size": "expert_feed_forward_length",
              "shared_expert_intermediate_size": "expert_shared_feed_forward_length", "vocab_size": "vocab_size"}
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads")


def config_from_gguf(info: GGUFInfo) -> dict[str, Any]:
    """An HF-style config.json mapping from a GGUF header's metadata. The vocabulary comes from `{arch}.vocab_size`
    or the tokenizer's token list; the lm_head is tied when the file stores no `output.weight` (llama.cpp then
    reads token_embd for both)."""
    from ..errors import UnsupportedError
    meta, where = info.metadata, f"GGUF file '{info.path}'"
    arch = str(meta.get("general.architecture") or "")
    if arch not in GGUF_ARCHS:
        raise UnsupportedError(where, f"has architecture '{arch or '?'}', which gpuplan does not read from GGUF "
                               "metadata (it reads " + ", ".join(GGUF_ARCHS) + ").",
                               "pass the model's config.json or Hub id for the architecture; the file's stored "
                               "bytes per type are still reported.")
    cfg: dict[str, Any] = {}
    for hf_key, key in _GGUF_KEYS.items():
        v = meta.get(f"{arch}.{key}")
        if isinstance(v, str) and v.startswith("["):
            raise UnsupportedError(where, f"gives '{arch}.{key}' per layer ({v}), which one config value cannot "
                                   "hold.", "pass the model's config.json instead.")
        if v is not None:
            cfg[hf_key] = v
    missing = [f"{arch}.{_GGUF_KEYS[k]}" for k in _REQUIRED if k not in cfg]
    if missing:
        raise InputError(where, f"has no {', '.join(missing)} in its metadata.", "use a GGUF written by llama.cpp's "
                         "convert_hf_to_gguf.py (it always writes them), or pass the config.json.")
    if "vocab_size" not in cfg:
        tokens = str(meta.get("tokenizer.ggml.tokens") or "")
        if not tokens.startswith("["):
            raise InputError(where, f"names no vocabulary size ({arch}.vocab_size or tokenizer.ggml.tokens).",
                             "pass the model's config.json instead.")
        cfg["vocab_size"] = int(tokens.strip("[]").split()[0])
    model_type = GGUF_ARCHS[arch]
    if model_type == "llama" and cfg.get("num_local_experts"):
        model_type = "mixtral"
    if model_type in ("qwen2_moe", "qwen3_moe"):
        cfg["num_experts"] = cfg.pop("num_local_experts", None)
    if model_type == "qwen2_moe":
        # llama.cpp keeps Qwen2-MoE's shared-expert gate as its own tensor (ffn_gate_inp_shexp)
        cfg.setdefault("shared_expert_intermediate_size", cfg.get("intermediate_size"))
    names = set(info.tensor_names)
    cfg["tie_word_embeddings"] = "output.weight" not in names
    if model_type in ("qwen2", "qwen2_moe"):
        cfg["use_sliding_window"] = False
    cfg["model_type"] = model_type
    return cfg


def spec_from_gguf(info: GGUFInfo):
    """The ModelSpec of the architecture a GGUF header describes (see config_from_gguf)."""
    from .spec import spec_from_config
    name = str(info.metadata.get("general.name") or Path(info.path).stem)
    return spec_from_config(config_from_gguf(info), name=name, where=f"GGUF file '{info.path}'")

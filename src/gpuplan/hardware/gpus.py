"""GPU/accelerator specs: the GpuSpec record, the catalog loader and name lookup.

Lookup is exact: an id or alias after normalisation (case, spaces, dashes, underscores and a
leading vendor word are ignored). A name that is only the start of several entries ("H100") is
ambiguous and raises with the candidates; "H200" never matches "H20" (DESIGN.md §7.1).
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ..errors import (AmbiguousNameError, CatalogHint, InputError, UnknownNameError, UnsupportedError,
                      close_matches)
from ..units import GB, GiB, MiB, TFLOPS
from ._csv import Row, data_path, read_rows, split_list

ENV_VAR = "GPUPLAN_GPUS_CSV"

FAMILIES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4",
            "gaudi", "tpu", "apple")
SEGMENTS = ("geforce", "workstation", "datacenter", "tpu", "apple", "edge")
SCALE_UP = ("nvswitch", "nvlink-bridge", "nvlink-mesh", "none", "infinity-fabric", "ici", "gaudi-roce",
            "apple-unified")
# column -> peak_flops_per_s key
RATE_COLUMNS = {"fp32_tflops": "fp32", "tf32_tflops": "tf32", "fp16_tflops": "fp16", "bf16_tflops": "bf16",
                "fp16_fp32acc_tflops": "fp16_fp32acc", "fp8_tflops": "fp8", "int8_tops": "int8",
                "fp4_tflops": "fp4"}
PEAK_KEYS = tuple(RATE_COLUMNS.values())
# nominal unidirectional PCIe rate per lane, bytes/s (gen4 x16 = 32e9)
_PCIE_LANE_BYTES = {"3.0": 1e9, "4.0": 2e9, "5.0": 4e9, "6.0": 8e9}
_DTYPE_KEYS = {"fp32": "fp32", "float32": "fp32", "float": "fp32", "tf32": "tf32", "fp16": "fp16", "float16": "fp16",
               "half": "fp16", "bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
               "e4m3": "fp8", "float8": "fp8", "int8": "int8", "fp4": "fp4", "mxfp4": "fp4", "nvfp4": "fp4"}
_VENDOR_WORDS = ("nvidia", "amd", "intel", "google", "apple", "tesla", "habana")

REQUIRED_COLUMNS = ("id", "name", "vendor", "family", "segment", "memory_gb", "mem_bandwidth_gbps",
                    "source_url", "retrieved")


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator. Plain SI inside: bytes, bytes/s, FLOP/s, W, USD."""

    id: str
    name: str
    vendor: str
    family: str
    segment: str
    aliases: tuple[str, ...] = ()
    memory_bytes: int                      # nominal: memory_gb * 1e9 (vendors' "GB" is usually GiB; see usable)
    usable_memory_bytes: int               # what NVML/the runtime reports as total: MiB * 2**20
    mem_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]  # dense; keys among PEAK_KEYS; missing key = unsupported/unpublished
    scale_up: str
    scale_up_bandwidth_bytes_per_s: float  # per GPU, unidirectional (= bidirectional / 2)
    scale_up_max_gpus: int
    p2p: bool
    pcie_bandwidth_bytes_per_s: float      # host link, unidirectional
    tdp_w: float | None
    launch_price_usd: float | None
    source_url: str
    retrieved: str
    notes: str = ""
    usable_memory_basis: str = ""
    launch_price_basis: str = ""
    verification: str = ""
    memory_type: str = ""
    release_year: int | None = None
    pcie_gen: str = ""
    pcie_lanes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        problems = []
        if self.family not in FAMILIES:
            problems.append(f"family '{self.family}' not in {FAMILIES}")
        if self.segment not in SEGMENTS:
            problems.append(f"segment '{self.segment}' not in {SEGMENTS}")
        if self.scale_up not in SCALE_UP:
            problems.append(f"scale_up '{self.scale_up}' not in {SCALE_UP}")
        if self.memory_bytes <= 0 or self.usable_memory_bytes <= 0 or self.mem_bandwidth_bytes_per_s <= 0:
            problems.append("memory, usable memory and bandwidth must be > 0")
        bad = [k for k, v in self.peak_flops_per_s.items() if k not in PEAK_KEYS or not v > 0]
        if bad:
            problems.append(f"peak_flops_per_s keys/values invalid: {bad}")
        if not self.peak_flops_per_s:
            problems.append("no peak rate at all")
        if self.scale_up_max_gpus < 1:
            problems.append("scale_up_max_gpus must be >= 1")
        if problems:
            raise InputError(f"GPU spec '{self.id}'", "; ".join(problems) + ".", "fix the catalog row.")

    def __hash__(self) -> int:
        return hash(self.id)

    def matmul_flops_per_s(self, dtype: str, *, allow_tf32: bool = True) -> float:
        """Peak dense rate that training/inference matmuls in `dtype` get.

        bf16 -> bf16 (always FP32 accumulate); fp16 -> the FP32-accumulate rate (half the headline
        on GeForce); fp32 -> tf32 tensor rate when present and allowed, else CUDA-core fp32;
        fp8/int8/fp4 -> their own columns. Unsupported -> UnsupportedError with alternatives.
        """
        key = _DTYPE_KEYS.get(str(dtype).strip().lower())
        if key is None:
            raise UnknownNameError(f"dtype '{dtype}'", "is not a matmul format.",
                                   f"use one of {', '.join(sorted(set(_DTYPE_KEYS.values())))}.",
                                   close_matches(str(dtype), _DTYPE_KEYS))
        rates = self.peak_flops_per_s
        if key == "fp16" and "fp16_fp32acc" in rates:
            return rates["fp16_fp32acc"]
        if key == "fp32":
            if allow_tf32 and "tf32" in rates:
                return rates["tf32"]
            if "fp32" in rates:
                return rates["fp32"]
        elif key in rates:
            return rates[key]
        supported = [k for k in ("bf16", "fp16", "fp32", "tf32", "fp8", "int8", "fp4") if k in rates]
        raise UnsupportedError(
            f"{dtype} matmuls on {self.name} ({self.id})",
            f"the catalog has no {key} rate for it (the hardware lacks that format or the vendor "
            "publishes no figure).",
            f"use one of its supported formats: {', '.join(supported)}.")

    @property
    def usable_memory_gib(self) -> float:
        return self.usable_memory_bytes / GiB

    def to_dict(self) -> dict:
        """JSON-ready: bytes as ints, rates as floats, plus human-friendly fields."""
        return {
            "id": self.id, "name": self.name, "vendor": self.vendor, "family": self.family,
            "segment": self.segment, "aliases": list(self.aliases),
            "memory_bytes": int(self.memory_bytes), "usable_memory_bytes": int(self.usable_memory_bytes),
            "memory_gb": self.memory_bytes / GB, "usable_memory_gib": round(self.usable_memory_bytes / GiB, 3),
            "usable_memory_basis": self.usable_memory_basis, "memory_type": self.memory_type,
            "mem_bandwidth_bytes_per_s": float(self.mem_bandwidth_bytes_per_s),
            "peak_flops_per_s": {k: float(v) for k, v in self.peak_flops_per_s.items()},
            "peak_tflops": {k: v / TFLOPS for k, v in self.peak_flops_per_s.items()},
            "scale_up": self.scale_up, "scale_up_bandwidth_bytes_per_s": float(self.scale_up_bandwidth_bytes_per_s),
            "scale_up_max_gpus": self.scale_up_max_gpus, "p2p": self.p2p,
            "pcie_gen": self.pcie_gen or None, "pcie_lanes": self.pcie_lanes,
            "pcie_bandwidth_bytes_per_s": float(self.pcie_bandwidth_bytes_per_s),
            "tdp_w": self.tdp_w, "launch_price_usd": self.launch_price_usd,
            "launch_price_basis": self.launch_price_basis, "release_year": self.release_year,
            "verification": self.verification, "source_url": self.source_url, "retrieved": self.retrieved,
            "notes": self.notes,
        }


# ----------------------------------------------------------------------------- parsing

def _spec_from_row(row: Row) -> GpuSpec:
    gid = row.text("id")
    if gid != gid.lower() or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", gid):
        raise row.fail("id", f"'{gid}' is not lowercase kebab-case.", "use ids like 'h100-sxm' or 'rtx-4090'.")
    url, date = row.provenance()
    rates = {}
    for column, key in RATE_COLUMNS.items():
        value = row.number(column, required=False)
        if value is not None:
            rates[key] = value * TFLOPS
    if not rates:
        raise row.fail("bf16_tflops", "no peak rate column is filled in.",
                       f"fill in at least one of {', '.join(RATE_COLUMNS)}.")
    memory_gb = row.number("memory_gb")
    usable_mib = row.number("usable_memory_mib", required=False)
    basis = row.text("usable_memory_basis", required=False)
    if usable_mib is None:   # user rows may omit it: assume the marketed number is GiB, as for HBM/GDDR parts
        usable_mib = memory_gb * 1024
        basis = basis or "estimate: memory_gb read as GiB (usable_memory_mib not given)"
    scale_up = row.choice("scale_up", SCALE_UP, required=False) or "none"
    pcie_gen = row.text("pcie_gen", required=False)
    if pcie_gen and pcie_gen not in _PCIE_LANE_BYTES:
        raise row.fail("pcie_gen", f"'{pcie_gen}' is not a PCIe generation.",
                       f"use one of {', '.join(_PCIE_LANE_BYTES)} or leave blank.")
    lanes = row.integer("pcie_lanes", required=False)
    host = row.number("host_link_gbps_unidir", required=False)
    if host is not None:
        pcie_bw = host * GB
    elif pcie_gen:
        pcie_bw = _PCIE_LANE_BYTES[pcie_gen] * (lanes or 16)
    else:
        raise row.fail("pcie_gen", "neither pcie_gen nor host_link_gbps_unidir is given.",
                       "give the host interface, e.g. pcie_gen=4.0 and pcie_lanes=16.")
    bidir = row.number("scale_up_gbps_bidir", required=False)
    if bidir is None:
        scale_up_bw = pcie_bw if scale_up == "none" else 0.0
    else:
        scale_up_bw = bidir * GB / 2
    segment = row.choice("segment", SEGMENTS)
    default_p2p = segment != "geforce" and scale_up != "apple-unified"
    year = row.integer("release_year", required=False)
    return GpuSpec(
        id=gid, name=row.text("name"), vendor=row.text("vendor"),
        family=row.choice("family", FAMILIES), segment=segment,
        aliases=split_list(row.text("aliases", required=False)),
        memory_bytes=int(round(memory_gb * GB)), usable_memory_bytes=int(round(usable_mib * MiB)),
        mem_bandwidth_bytes_per_s=row.number("mem_bandwidth_gbps") * GB,
        peak_flops_per_s=rates, scale_up=scale_up, scale_up_bandwidth_bytes_per_s=scale_up_bw,
        scale_up_max_gpus=row.integer("scale_up_max_gpus", required=False) or 1,
        p2p=row.boolean("p2p", default=default_p2p), pcie_bandwidth_bytes_per_s=pcie_bw,
        tdp_w=row.number("tdp_w", required=False), launch_price_usd=row.number("launch_price_usd", required=False),
        source_url=url, retrieved=date, notes=row.text("notes", required=False),
        usable_memory_basis=basis, launch_price_basis=row.text("launch_price_basis", required=False),
        verification=row.text("verification", required=False), memory_type=row.text("memory_type", required=False),
        release_year=year, pcie_gen=pcie_gen, pcie_lanes=lanes,
    )


def normalize(name: str) -> str:
    """'NVIDIA H100-SXM5 80GB' -> 'h100sxm580gb' (case, separators and a leading vendor word ignored)."""
    return "".join(_tokens(name))


def _tokens(name: str) -> list[str]:
    parts = [p for p in re.split(r"[\s_\-/()]+", str(name).strip().lower()) if p]
    while parts and parts[0] in _VENDOR_WORDS and len(parts) > 1:
        parts = parts[1:]
    return parts


@dataclass(frozen=True)
class _Catalog:
    gpus: dict[str, GpuSpec]
    keys: dict[str, str]                         # normalised id/alias -> id
    token_names: tuple[tuple[tuple[str, ...], str], ...] = field(default=())  # (tokens of id/alias, id)


def _index(specs: list[GpuSpec], origin: dict[str, str]) -> _Catalog:
    keys: dict[str, str] = {}
    tokens = []
    for spec in specs:
        for name in (spec.id, spec.name, *spec.aliases):
            key = normalize(name)
            other = keys.get(key)
            if other is not None and other != spec.id:
                raise InputError(f"{origin.get(spec.id, 'catalog')}, GPU '{spec.id}'",
                                 f"its name or alias '{name}' collides with GPU '{other}'.",
                                 "remove or rename the alias so every name points to one GPU.")
            keys[key] = spec.id
            tokens.append((tuple(_tokens(name)), spec.id))
    return _Catalog({s.id: s for s in specs}, keys, tuple(tokens))


@functools.cache
def _builtin_specs() -> tuple[GpuSpec, ...]:
    path = data_path("gpus.csv")
    return tuple(_spec_from_row(r) for r in read_rows(path, REQUIRED_COLUMNS, label="gpuplan/hardware/data/gpus.csv"))


@functools.cache
def _catalog_for(user_csv: str | None) -> _Catalog:
    specs = {s.id: s for s in _builtin_specs()}
    origin = {s.id: "gpuplan/hardware/data/gpus.csv" for s in specs.values()}
    if user_csv:
        seen: set[str] = set()
        for row in read_rows(Path(user_csv), REQUIRED_COLUMNS):
            spec = _spec_from_row(row)
            if spec.id in seen:
                raise row.fail("id", f"'{spec.id}' appears twice in this file.", "keep one row per id.")
            seen.add(spec.id)
            specs[spec.id] = spec              # same id overrides the built-in row
            origin[spec.id] = f"{user_csv}, row {row.line}"
    return _index(list(specs.values()), origin)


_user_catalog: str | None = None


def use_user_catalog(csv_path: str | os.PathLike | None) -> None:
    """Add or override GPU rows from a CSV with the gpus.csv columns (None: back to built-in only).

    Validated now, so a bad file fails here with the file, row, column and fix.
    Takes precedence over the GPUPLAN_GPUS_CSV environment variable.
    """
    global _user_catalog
    path = None if csv_path is None else str(Path(csv_path).expanduser())
    _catalog_for(path)   # validate eagerly
    _user_catalog = path


def _catalog() -> _Catalog:
    return _catalog_for(_user_catalog or os.environ.get(ENV_VAR) or None)


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """Look up a GPU by id or alias (exact after normalisation). Never guesses."""
    if isinstance(name, GpuSpec):
        return name
    cat = _catalog()
    key = normalize(name)
    if key in cat.keys:
        return cat.gpus[cat.keys[key]]
    query = _tokens(name)
    candidates = sorted({gid for toks, gid in cat.token_names if query and toks[:len(query)] == tuple(query)})
    if len(candidates) > 1:
        raise AmbiguousNameError(f"GPU '{name}'", f"is ambiguous: it names {len(candidates)} catalog entries.",
                                 f"use one of the ids {', '.join(candidates)} (form factor and memory size "
                                 "change speed and capacity).", candidates)
    matches = candidates or close_matches(name, list(cat.gpus) + [a for s in cat.gpus.values() for a in s.aliases])
    raise UnknownNameError(f"GPU '{name}'", "is not in the catalog.", "",
                           list(dict.fromkeys(cat.keys.get(normalize(m), m) for m in matches))[:5],
                           see=CatalogHint("gpus", "the ids"),
                           local_fix="or add a row with use_user_catalog()/GPUPLAN_GPUS_CSV")


def list_gpus(filter: str | None = None) -> list[GpuSpec]:  # noqa: A002 - public name from the brief
    """All GPUs in catalog order; `filter` keeps those whose id, name, vendor, family or segment
    contains it (case-insensitive). CatalogHint may use substrings; lookup never does."""
    specs = list(_catalog().gpus.values())
    if not filter:
        return specs
    needle = filter.strip().lower()
    return [s for s in specs if any(needle in f.lower() for f in (s.id, s.name, s.vendor, s.family, s.segment))]

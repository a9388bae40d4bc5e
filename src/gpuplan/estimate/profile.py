"""Use a measured hardware profile (`gpuplan calibrate`) instead of datasheet x default efficiency.

The speed engine's efficiency factors are fractions of the datasheet peak, per GPU family. A profile
measured on the user's own GPU replaces them for that GPU: the best measured GEMM rate per dtype
becomes the large-GEMM efficiency (measured / datasheet peak, with the power-limit clock factor folded
in), the measured copy bandwidth the memory efficiency, and the measured NCCL bus bandwidth the
scale-up link efficiency. Matrix-size effects keep the calibrated shape (docs/speed.md).
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError

SCHEMA = "gpuplan.hardware-profile/1"
MAX_PROFILE_BYTES = 16 * 2**20


@dataclass(frozen=True)
class GemmPoint:
    dtype: str
    m: int
    n: int
    k: int
    time_s: float
    flops_per_s: float


@dataclass(frozen=True)
class CommPoint:
    op: str                  # all_reduce | all_gather
    bytes: int               # message size (all_gather: gathered output)
    time_s: float
    alg_bandwidth_bytes_per_s: float
    bus_bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class HardwareProfile:
    gpu_name: str
    gpu_id: str | None                       # gpuplan catalog id, None if the GPU is not in the catalog
    gpu_count: int                           # GPUs on this node that took part
    created: str                             # ISO 8601 UTC
    torch_version: str
    cuda_version: str | None
    matmul_flops_per_s: dict[str, float]     # best measured dense GEMM rate per dtype
    matmul: tuple[GemmPoint, ...] = ()
    memory_bandwidth_bytes_per_s: float | None = None
    comm_bus_bandwidth_bytes_per_s: dict[str, float] = field(default_factory=dict)   # best per op
    comm: tuple[CommPoint, ...] = ()
    world_size: int = 1
    nodes: int = 1
    driver_version: str | None = None
    memory_total_bytes: int | None = None
    quick: bool = False
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    def matmul_rate(self, dtype: str, size: int | None = None) -> float | None:
        """Measured FLOP/s for a dtype: the best, or the point whose smallest dimension is nearest `size`."""
        pts = [p for p in self.matmul if p.dtype == dtype]
        if size is None or not pts:
            return self.matmul_flops_per_s.get(dtype)
        return min(pts, key=lambda p: abs(min(p.m, p.n, p.k) - size)).flops_per_s

    def matmul_efficiency(self, dtype: str, datasheet_flops_per_s: float) -> float | None:
        """Best measured / datasheet peak: the factor an estimator multiplies the datasheet rate by."""
        r = self.matmul_flops_per_s.get(dtype)
        return r / datasheet_flops_per_s if r and datasheet_flops_per_s else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["matmul"] = [asdict(p) for p in self.matmul]
        d["comm"] = [asdict(p) for p in self.comm]
        d["notes"] = list(self.notes)
        return {"schema": d.pop("schema"), **d}


def save_profile(profile: HardwareProfile, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    return p


def profile_from_dict(data: dict[str, Any], source: str = "(dict)") -> HardwareProfile:
    what = f"hardware profile {source}"
    if not isinstance(data, dict):
        raise InputError(what, "is not a JSON object.", "pass a file written by `gpuplan calibrate`.")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise InputError(what, f"has schema {schema!r}; this gpuplan reads {SCHEMA!r}.",
                         "re-run `gpuplan calibrate` with this version of gpuplan.")
    missing = [k for k in ("gpu_name", "gpu_count", "created", "torch_version", "matmul_flops_per_s") if k not in data]
    if missing:
        raise InputError(what, f"lacks the field(s) {', '.join(missing)}.", "re-run `gpuplan calibrate`.")
    rates = data["matmul_flops_per_s"]
    if not isinstance(rates, dict) or any(not isinstance(v, (int, float)) or v <= 0 for v in rates.values()):
        raise InputError(what, "'matmul_flops_per_s' must map dtype names to positive FLOP/s.", "re-run `gpuplan calibrate`.")
    known = {f for f in HardwareProfile.__dataclass_fields__}
    extra = sorted(set(data) - known)
    kw = {k: v for k, v in data.items() if k in known}
    try:
        kw["matmul"] = tuple(GemmPoint(**p) for p in data.get("matmul", ()))
        kw["comm"] = tuple(CommPoint(**p) for p in data.get("comm", ()))
    except TypeError as err:
        raise InputError(what, f"has a malformed measurement point ({err}).", "re-run `gpuplan calibrate`.") from None
    kw["notes"] = tuple(data.get("notes", ())) + ((f"ignored unknown fields: {', '.join(extra)}",) if extra else ())
    kw["matmul_flops_per_s"] = {k: float(v) for k, v in rates.items()}
    kw["comm_bus_bandwidth_bytes_per_s"] = {k: float(v) for k, v in (data.get("comm_bus_bandwidth_bytes_per_s") or {}).items()}
    return HardwareProfile(**kw)


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile written by `gpuplan calibrate` (validated; errors name the field and the fix)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"hardware profile '{path}'", "does not exist.", "check the path, or run `gpuplan calibrate --out FILE`.")
    if not p.is_file():   # a directory, FIFO or device (/dev/zero) would hang or eat memory
        raise InputError(f"hardware profile '{path}'", "is not a regular file.",
                         "pass the JSON file written by `gpuplan calibrate --out FILE`.")
    if p.stat().st_size > MAX_PROFILE_BYTES:
        raise InputError(f"hardware profile '{path}'", f"is larger than {MAX_PROFILE_BYTES // 2**20} MiB; "
                         "a calibration profile is a few KiB.", "pass the JSON file written by `gpuplan calibrate`.")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"hardware profile '{path}'", f"cannot be read ({type(err).__name__}: "
                         f"{str(err)[:120]}).", "check the file's permissions and that it is the JSON "
                         "file `gpuplan calibrate` wrote.") from None
    except json.JSONDecodeError as err:
        raise InputError(f"hardware profile '{path}'", f"is not valid JSON ({err.msg}, line {err.lineno}).",
                         "re-run `gpuplan calibrate`.") from None
    return profile_from_dict(data, f"'{path}'")


_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")


def params_with_profile(params: Mapping[str, Any], profile: Any, gpu: Any) -> dict[str, Any]:
    """A copy of the speed parameters with `gpu`'s family factors taken from `profile`."""
    if profile.gpu_id and profile.gpu_id != gpu.id:
        raise InputError(f"hardware profile for '{profile.gpu_id}'", f"was measured on another GPU than {gpu.id}.",
                         f"use a profile measured on {gpu.id}, or drop hardware.profile.")
    P = copy.deepcopy(dict(params))
    fam = str(getattr(gpu, "family", "default") or "default").lower()
    peaks = getattr(gpu, "peak_flops_per_s", {}) or {}
    mm = dict(P["matmul"].get(fam) or P["matmul"].get("default") or {})
    for dt in _DTYPES:
        measured = profile.matmul_flops_per_s.get(dt)
        peak = peaks.get("fp16_fp32acc" if dt in ("bf16", "fp16") and "fp16_fp32acc" in peaks else dt)
        if measured and peak:
            mm[dt] = measured / peak
    P["matmul"][fam] = mm
    # a measured rate already includes the clock the card sustains under its power limit
    (P.get("power_flops_per_watt") or {}).pop(fam, None)
    bw = getattr(gpu, "mem_bandwidth_bytes_per_s", None)
    if profile.memory_bandwidth_bytes_per_s and bw:
        P.setdefault("memory", {})[fam] = profile.memory_bandwidth_bytes_per_s / bw
    busbw = profile.comm_bus_bandwidth_bytes_per_s.get("all_reduce")
    link = getattr(gpu, "scale_up_bandwidth_bytes_per_s", None)
    if busbw and link and profile.gpu_count > 1:
        P.setdefault("comm", {})["scale_up"] = min(1.0, busbw / link)
    P.setdefault("provenance", {})["profile"] = {"gpu_id": gpu.id, "created": profile.created}
    return P

"""Use a measured hardware profile (`gpuplan calibrate`) instead of datasheet x default efficiency.

The speed engine's efficiency factors are fractions of the datasheet peak, per GPU family. A profile
measured on the user's own GPU replaces them for that GPU: the best measured GEMM rate per dtype
becomes the large-GEMM efficiency (measured / datasheet peak, with the power-limit clock factor folded
in), the measured copy bandwidth the memory efficiency, and the measured NCCL bus bandwidth the
scale-up link efficiency. Matrix-size effects keep the calibrated shape (docs/speed.md).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from ..errors import InputError

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

"""The library's front door: resolve a scenario and estimate memory, speed and cost.

CLI and web are thin shells over these functions.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .estimate.results import CostEstimate, MemoryEstimate, PerformanceEstimate
from .models import ModelSpec, get_model
from .scenario import Scenario, load_scenario, scenario_from_dict
from .validate import check_scenario_against_model


@dataclass(frozen=True)
class Resolved:
    scenario: Scenario
    model: ModelSpec
    gpu: Any      # gpuplan.hardware.GpuSpec


@dataclass(frozen=True)
class Estimate:
    scenario: Scenario
    model: ModelSpec
    gpu: Any
    memory: MemoryEstimate
    performance: PerformanceEstimate
    cost: CostEstimate
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "memory": self.memory.to_json(),
            "performance": self.performance.to_json(),
            "cost": self.cost.to_json(),
            "scenario": self.scenario.model_dump(mode="json"),
            "model": self.model.to_dict(self.scenario.train.seq_len if self.scenario.train else 2048),
            "gpu": {"id": self.gpu.id, "name": self.gpu.name,
                    "usable_memory_bytes": int(self.gpu.usable_memory_bytes)},
            "warnings": list(self.warnings),
        }


def as_scenario(scenario: Scenario | Mapping[str, Any] | str | Path) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, Mapping):
        return scenario_from_dict(dict(scenario))
    return load_scenario(scenario)


def resolve(scenario: Scenario | Mapping[str, Any] | str | Path, *, allow_hub: bool = True) -> Resolved:
    from .hardware import get_gpu
    scn = as_scenario(scenario)
    r = Resolved(scn, get_model(scn.model, allow_hub=allow_hub), get_gpu(scn.hardware.gpu))
    check_scenario_against_model(r.scenario, r.model)
    return r


def estimate_memory_for(r: Resolved) -> MemoryEstimate:
    from .estimate.memory import estimate_memory
    return estimate_memory(r.scenario, r.model, r.gpu.usable_memory_bytes)


def software_warnings(r: Resolved) -> tuple[str, ...]:
    """Problems of the software stack for this GPU (errors raise, warnings are returned)."""
    from .errors import UnsupportedError
    from .hardware import software
    scn = r.scenario
    if scn.train:
        dtype = scn.train.precision
        # the default attention ("flash") falls back to SDPA silently where FlashAttention does not run
        attention = scn.train.attention if "attention" in scn.train.model_fields_set else None
        engine = {"megatron": "megatron", "deepspeed": "deepspeed"}.get(scn.framework, "pytorch")
    else:
        assert scn.infer is not None
        dtype = _weights_math_dtype(scn.infer.weights)
        engine, attention = scn.infer.engine.replace(".", ""), None
    problems = software.check(r.gpu, engine=engine, dtype=dtype, attention=attention)
    if scn.train and scn.train.precision == "fp8":
        # serving can emulate fp8 (weight-only), training cannot: FP8 training needs FP8 tensor cores
        problems = [dataclasses.replace(p, severity="error") if "fp8" in p.message.lower() else p for p in problems]
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise UnsupportedError(f"{r.gpu.id} with this scenario", " ".join(p.message for p in errors),
                               " ".join(p.alternative for p in errors if p.alternative))
    return tuple(p.message + (f" ({p.alternative})" if p.alternative else "") for p in problems)


def _weights_math_dtype(weights: str) -> str:
    """The tensor-core format a weight format asks of the GPU (fp8 weights want fp8 math)."""
    from .dtypes import weight_format
    fmt = weight_format(weights)
    return {"fp8": "fp8", "fp4": "fp4"}.get(fmt.family, fmt.compute_dtype if fmt.compute_dtype in ("bf16", "fp32") else "fp16")


def _speed_params(r: Resolved) -> dict[str, Any]:
    """Speed-model parameters: the packaged calibration, or a measured hardware profile when the
    scenario (hardware.profile) or GPUPLAN_PROFILE names one."""
    import os
    path = r.scenario.hardware.profile or os.environ.get("GPUPLAN_PROFILE")
    if not path:
        return {}
    from .estimate.profile import params_with_profile
    from .estimate.speed import load_efficiency
    from .local.calibrate import load_profile
    return {"params": params_with_profile(load_efficiency(), load_profile(path), r.gpu)}


def estimate(scenario: Scenario | Mapping[str, Any] | str | Path, *, allow_hub: bool = True) -> Estimate:
    """Memory, performance and cost of one scenario (DESIGN §3.2)."""
    from .estimate.cost import estimate_cost
    from .estimate.speed import estimate_performance
    r = resolve(scenario, allow_hub=allow_hub)
    warnings = software_warnings(r)
    mem = estimate_memory_for(r)
    perf = estimate_performance(r.scenario, r.model, r.gpu, **_speed_params(r))
    cost = estimate_cost(r.scenario, r.gpu, perf)
    return Estimate(r.scenario, r.model, r.gpu, mem, perf, cost, warnings)

"""gpuplan: plan LLM hardware before you buy or rent it.

The public API (imported lazily so `import gpuplan` and the CLI start fast):

    estimate(scenario)        memory, speed and cost of one scenario (DESIGN §3.2)
    recommend(partial, ...)   ranked plans, Pareto front and reasons for rejections
    compare(scenario, gpus)   several GPUs side by side
    whatif(scenario)          what each memory-saving technique saves and costs
    launch_files(scn, engine) runnable configuration text per engine
    trace(scenario)           measured memory on fake tensors (extra: trace)
    get_model / list_models   ModelSpec from a registry name, HF id, config path or dict
    get_gpu / list_gpus       the accelerator catalog
    load_scenario / scenario_from_dict
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import GpuplanError

__version__ = "0.1.0"

_EXPORTS = {
    "estimate": "gpuplan.api", "resolve": "gpuplan.api",
    "recommend": "gpuplan.search", "compare": "gpuplan.search", "whatif": "gpuplan.search",
    "launch_files": "gpuplan.launch", "write_launch": "gpuplan.launch",
    "trace": "gpuplan.trace",
    "get_model": "gpuplan.models", "list_models": "gpuplan.models", "ModelSpec": "gpuplan.models",
    "get_gpu": "gpuplan.hardware", "list_gpus": "gpuplan.hardware", "GpuSpec": "gpuplan.hardware",
    "Scenario": "gpuplan.scenario", "load_scenario": "gpuplan.scenario", "scenario_from_dict": "gpuplan.scenario",
}

__all__ = ["GpuplanError", "__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gpuplan' has no attribute '{name}'")

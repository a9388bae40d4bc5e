"""`gpuplan trace`: measured per-GPU memory of a scenario, without a GPU.

Runs the scenario's real PyTorch/transformers code on fake tensors (shapes and dtypes only) and
counts every allocation, byte for byte (DESIGN §6). torch, transformers and peft are an optional
extra (`pip install 'gpuplan[trace]'`) and are imported only when a trace runs.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import GpuplanError, MissingExtraError, UnsupportedError
from .result import TraceResult

__all__ = ["TraceResult", "trace"]


def _require_extra() -> None:
    for pkg in ("torch", "transformers"):
        try:
            __import__(pkg)
        except ImportError:
            raise MissingExtraError("gpuplan trace", "trace", pkg) from None


def trace(scenario, *, iterations: int = 2, decode_steps: int = 4,
          progress: Callable[[str], Any] | None = None) -> TraceResult:
    """Trace `scenario` (a Scenario, a dict, or a path) and return its measured peak per rank.

    Training: `iterations` full steps, the last one's peak (optimizer states exist from step 1).
    Inference: prefill of `infer.concurrency` x `infer.prompt_len` tokens, then `decode_steps` steps.
    `progress(message)` is called with status lines once the trace has taken more than a second.
    """
    from ..scenario import Scenario, load_scenario, scenario_from_dict
    if isinstance(scenario, dict):
        scenario = scenario_from_dict(scenario)
    elif not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if iterations < 1 or decode_steps < 0:
        from ..errors import InputError
        raise InputError("trace options", "iterations must be >= 1 and decode_steps >= 0.",
                         "use the defaults (2 iterations, 4 decode steps).")
    _require_extra()
    from ..models import get_model
    from ._build import check_model_input
    spec = get_model(scenario.model)
    check_model_input(spec)
    _check_supported(scenario)
    if spec.is_encoder_decoder and (scenario.parallel.dp or 1) * scenario.parallel.tp > 1:
        raise UnsupportedError(
            "gpuplan trace", f"traces {spec.name} (encoder-decoder) on one GPU only: FSDP2/TP wrapping of the T5 "
            "stacks is not set up.", "trace with hardware.count 1 (the per-GPU activations are the same at "
            "micro_batch) and read sharded states from `gpuplan estimate`.")
    from ._run import run_trace
    if scenario.data is not None and scenario.data.images_per_sample > 0:
        # vision-language: data-dependent shapes (image grids) need real CPU tensors (trace/_vlm.py); one rank
        from . import _vlm
        if scenario.is_training:
            return _vlm.train_step(scenario, spec, iterations)
        return _vlm.prefill(scenario, spec)
    try:
        return run_trace(scenario, spec, iterations=iterations, decode_steps=decode_steps, progress=progress)
    except GpuplanError:
        raise
    except Exception as err:  # noqa: BLE001 - turn any fake-mode failure into one clear paragraph
        import os
        if os.environ.get("GPUPLAN_TRACE_DEBUG"):
            raise
        kind = type(err).__name__
        text = " ".join(str(err).split())[:400]
        raise UnsupportedError(
            f"tracing '{spec.name}' ({scenario.task})",
            f"the fake-tensor run failed inside PyTorch/transformers with {kind}: {text}",
            "try attention 'sdpa' or 'eager', recompute 'none', a single GPU, or a newer torch/transformers; "
            "report the scenario if it persists.") from None


def _check_supported(scenario) -> None:
    p = scenario.parallel
    unsupported = [f"{k}={getattr(p, k)}" for k in ("pp", "cp", "ep") if getattr(p, k) > 1]
    if unsupported:
        raise UnsupportedError(
            "gpuplan trace", f"traces data parallel (FSDP2/ZeRO) and tensor parallel only; got {', '.join(unsupported)}.",
            "set pp, cp and ep to 1 for the trace, or use `gpuplan estimate` for those layouts.")
    if (p.dp or 1) > 1 and p.zero == 1:
        raise UnsupportedError(
            "gpuplan trace", "ZeRO stage 1 has no FSDP2 equivalent to trace.",
            "trace zero 2 (FSDP2 without resharding after forward) or zero 3 (full shard), or use `gpuplan estimate`.")
    if p.offload != "none":
        raise UnsupportedError("gpuplan trace", f"offload '{p.offload}' is not traced.",
                               "trace with offload none and subtract the offloaded states.")
    t = scenario.train
    traced = ("adamw", "adamw-8bit", "sgd", "adafactor", "lion", "muon")
    if t is not None and t.optimizer not in traced:
        raise UnsupportedError("gpuplan trace", f"optimizer '{t.optimizer}' has no CPU implementation the trace "
                               "can run (GaLore and SOAP are separate packages; paged optimizers need CUDA).",
                               f"trace with one of {', '.join(traced)}, or use `gpuplan estimate`.")

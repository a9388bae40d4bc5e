"""Guidance by use case: presets that set constraints, objective and search preferences for common
situations (issue 10). A preset only fills what the user left unset: every explicit argument,
flag or scenario field wins, and the output says which preset shaped the plan and why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import UnknownNameError, close_matches


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    why: tuple[str, ...]                                  # shown with the plans
    objective: str | Mapping[str, float]
    constraints: Mapping[str, Any] = field(default_factory=dict)
    segments: tuple[str, ...] | None = None               # allowed GPU segments (None: all)
    scale_up: tuple[str, ...] | None = None               # allowed scale-up fabrics (None: all)
    min_scale_up_gpus: int = 1
    engine_levels: tuple[str, ...] = ("yes", "limited")   # software-table levels accepted
    open_train: Mapping[str, tuple] = field(default_factory=dict)   # fields opened when the user left them default
    open_infer: Mapping[str, tuple] = field(default_factory=dict)
    prefer: Mapping[str, tuple] = field(default_factory=dict)       # value order: earlier is preferred
    show_breakeven: bool = False
    cost_basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "why": list(self.why),
                "objective": self.objective if isinstance(self.objective, str) else dict(self.objective),
                "constraints": dict(self.constraints), "segments": list(self.segments) if self.segments else None,
                "scale_up": list(self.scale_up) if self.scale_up else None,
                "prefer": {k: list(v) for k, v in self.prefer.items()}}


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(
        name="research-budget",
        summary="research on a budget: consumer cards and spot instances allowed, QLoRA preferred",
        why=("cheapest plan first: a research run is paid out of a small grant",
             "GeForce and workstation cards are in the search; spot prices are used where listed "
             "(expect pre-emptions: checkpoint often)",
             "QLoRA is preferred, then LoRA, then full fine-tuning (a 15 % handicap per step down), and the "
             "8-bit optimizer may be used: memory is the scarce resource",
             "at most 8 GPUs"),
        objective="cheapest",
        constraints={"max_gpus": 8, "spot": True},
        open_train={"method": ("qlora", "lora", "full"), "optimizer": ("adamw", "adamw-8bit")},
        open_infer={"weights": ("awq-int4", "fp8", "bf16"), "kv_cache": ("bf16", "fp8")},
        prefer={"method": ("qlora", "lora", "full")},
    ),
    Preset(
        name="startup",
        summary="a start-up shipping a product: rent first, on-demand, break-even against buying shown",
        why=("rent first: no capex, and capacity follows demand; each plan shows the months of continuous "
             "use after which buying the same GPUs would have been cheaper",
             "on-demand prices (no spot): a product cannot wait for pre-empted instances",
             "objective: $ per million tokens, the unit economics a product is priced on"),
        objective="cost_per_token",
        constraints={"spot": False},
        segments=("datacenter", "workstation"),
        show_breakeven=True,
        cost_basis="rent",
    ),
    Preset(
        name="enterprise-serving",
        summary="enterprise serving: latency SLOs first, datacenter cards, fully supported engines",
        why=("every plan meets the latency targets (defaults TTFT <= 2 s and TPOT <= 50 ms unless you set them)",
             "datacenter accelerators only: ECC memory, vendor support, data-center licensing",
             "only engines the software table rates as fully supported on the accelerator",
             "among plans that meet the SLOs: lowest $ per million output tokens"),
        objective="cost_per_token",
        constraints={"ttft_s": 2.0, "tpot_s": 0.05, "spot": False},
        segments=("datacenter",),
        engine_levels=("yes",),
    ),
    Preset(
        name="large-pretraining",
        summary="large pre-training: interconnect and scale first (NVSwitch/Infinity Fabric nodes, InfiniBand, whole nodes)",
        why=("only accelerators with an all-to-all scale-up fabric of at least 8 GPUs (NVSwitch, Infinity Fabric, "
             "TPU ICI, Gaudi RoCE): tensor parallelism and data-parallel traffic need it",
             "GPU counts are whole nodes and scale to 4,096",
             "objective balances time and cost equally (weighted cost=0.5, time=0.5): a pre-training run is "
             "bounded by both the calendar and the budget"),
        objective={"cost": 0.5, "time": 0.5},
        constraints={"max_gpus": 4096, "spot": False},
        segments=("datacenter", "tpu"),
        scale_up=("nvswitch", "infinity-fabric", "ici", "gaudi-roce"),
        min_scale_up_gpus=8,
    ),
)}


def get_preset(name: str | None) -> Preset | None:
    if name is None:
        return None
    key = str(name).strip().lower().replace("_", "-")
    if key not in PRESETS:
        raise UnknownNameError(f"preset '{name}'", "is not known.", f"use one of {', '.join(PRESETS)}.",
                               close_matches(key, PRESETS))
    return PRESETS[key]


def gpu_allowed(preset: Preset | None, gpu: Any) -> str | None:
    """Why the preset leaves this GPU out, or None."""
    if preset is None:
        return None
    if preset.segments and gpu.segment not in preset.segments:
        return f"preset {preset.name} uses {'/'.join(preset.segments)} accelerators only ({gpu.id} is {gpu.segment})"
    if preset.scale_up and (gpu.scale_up not in preset.scale_up or gpu.scale_up_max_gpus < preset.min_scale_up_gpus):
        return (f"preset {preset.name} needs an all-to-all fabric of >= {preset.min_scale_up_gpus} GPUs "
                f"({gpu.id} has {gpu.scale_up}, {gpu.scale_up_max_gpus} GPU(s))")
    return None

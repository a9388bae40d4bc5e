"""Result records of the estimators. JSON shape is the DESIGN §3.2 contract: bytes are ints,
times seconds, rates per second; a key that does not apply to the task is None (null)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MEMORY_COMPONENTS = ("weights", "gradients", "optimizer_states", "activations", "logits", "kv_cache",
                     "temporary", "runtime_overhead")


@dataclass(frozen=True)
class MemoryEstimate:
    peak_bytes_per_gpu: int
    capacity_bytes_per_gpu: int
    components: dict[str, int]            # the peak's own breakdown; sums to peak_bytes_per_gpu
    phase: str                            # where the peak happens: forward | backward | optimizer_step | prefill | decode | load
    phases: dict[str, int] = field(default_factory=dict)   # peak bytes of each phase considered
    cpu_bytes: int = 0                    # host memory needed (offload, llama.cpp CPU layers)
    limits: dict[str, int | None] = field(default_factory=dict)  # max_micro_batch, max_seq_len, max_concurrency, kv_tokens
    notes: tuple[str, ...] = ()
    uncertainty: Any = None               # estimate.uncertainty.Uncertainty: the error bar (set by the pipeline)

    @property
    def fits(self) -> bool:
        return self.peak_bytes_per_gpu <= self.capacity_bytes_per_gpu

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes_per_gpu - self.peak_bytes_per_gpu

    def to_json(self) -> dict[str, Any]:
        return {"peak_bytes_per_gpu": int(self.peak_bytes_per_gpu),
                "capacity_bytes_per_gpu": int(self.capacity_bytes_per_gpu),
                "fits": self.fits,
                "components": {k: int(self.components.get(k, 0)) for k in MEMORY_COMPONENTS},
                "phase": self.phase,
                "phases": {k: int(v) for k, v in self.phases.items()},
                "cpu_bytes": int(self.cpu_bytes),
                "limits": dict(self.limits),
                "notes": list(self.notes),
                "uncertainty": _uncertainty_json(self.uncertainty)}


@dataclass(frozen=True)
class PerformanceEstimate:
    # training (None for inference)
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    time_to_train_s: float | None = None
    # inference (None for training)
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)   # where the time goes, seconds
    notes: tuple[str, ...] = ()                                  # for people
    # non-time values for programs: microbatches, tokens_per_step, batch, limited_by, kv_capacity_tokens,
    # kv_capacity_source, replicas, gpus_per_replica, expert_parallel, decode_bound (memory|compute|host),
    # clock_factor, fp8_recipe (FP8 training: the recipe timed); eager engines: host_cpu, host_speed_vs_reference
    details: dict[str, Any] = field(default_factory=dict)
    uncertainty: Any = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["uncertainty"] = _uncertainty_json(self.uncertainty)
        return d


@dataclass(frozen=True)
class CostEstimate:
    usd_per_hour: float | None = None
    usd_total: float | None = None
    usd_per_million_tokens: float | None = None
    basis: str = ""                      # e.g. "on-demand, lambda, 8x h100-sxm instance"
    details: dict[str, Any] = field(default_factory=dict)
    uncertainty: Any = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["uncertainty"] = _uncertainty_json(self.uncertainty)
        return d


def _uncertainty_json(u: Any) -> dict[str, Any] | None:
    """The error bar's JSON (estimate/uncertainty.py), or None where no pipeline attached one."""
    return u.to_json() if u is not None else None

"""TraceResult: what a trace measured, in the component names of `gpuplan estimate` (DESIGN §3.2)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..estimate.results import MEMORY_COMPONENTS


@dataclass
class TraceResult:
    peak_bytes: int                         # steady-state peak per rank (max_memory_allocated equivalent)
    components: dict[str, int]              # the peak's breakdown; sums to peak_bytes
    phase: str                              # forward | backward | optimizer_step | prefill | decode
    phases: dict[str, int] = field(default_factory=dict)       # peak bytes seen in each phase
    details: dict[str, int] = field(default_factory=dict)      # finer breakdown "component:what"
    per_rank: list[dict[str, Any]] = field(default_factory=list)  # rank, peak_bytes (multi-GPU)
    world_size: int = 1
    kv_cache_bytes: int | None = None       # inference: KV bytes held at the end of decode
    method_notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    model: str = ""
    task: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "task": self.task,
            "peak_bytes": int(self.peak_bytes),
            "components": {k: int(self.components.get(k, 0)) for k in MEMORY_COMPONENTS},
            "phase": self.phase,
            "phases": {k: int(v) for k, v in self.phases.items()},
            "details": {k: int(v) for k, v in sorted(self.details.items())},
            "world_size": self.world_size,
            "per_rank": self.per_rank,
            "kv_cache_bytes": None if self.kv_cache_bytes is None else int(self.kv_cache_bytes),
            "method_notes": list(self.method_notes),
            "seconds": round(float(self.seconds), 3),
        }

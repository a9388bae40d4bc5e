"""The search's state: what it was asked (a frozen record), what it found so far (the tally, the one
accumulator) and what it computed once (caches), plus the per-GPU look-ups every stage needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import pipeline
from ..errors import TimeLimitError
from ..scenario import Scenario
from . import space as S
from .constraints import Constraints
from .plan import Rejection
from .presets import Preset

PREFERENCE_STEP = 0.15
# A plan whose engine the software table rates "limited" on that accelerator (PyTorch/XLA on TPU,
# DeepSpeed on Gaudi's fork, MPS training) ranks as if it cost 25 % more: porting and debugging time
# the estimate cannot see. Explained in each such plan's warnings; docs/recommend.md.
LIMITED_SUPPORT_PENALTY = 1.25
NARROW_HINT = ("narrow the search: name fewer GPUs (--gpus or hardware.gpu), fix the GPU count (hardware.count) "
               "or lower max_gpus, and fix the layout (parallel.tp/pp) or the techniques you listed")


@dataclass
class Tally:
    """Everything the search has found so far (the only mutable part of a search)."""
    feasible: list = field(default_factory=list)
    misses: dict = field(default_factory=dict)          # gpu id -> [(priority, closeness, Rejection)]
    rejected: list = field(default_factory=list)
    seen_named: set = field(default_factory=set)
    front: list = field(default_factory=list)           # (cost, time) of the Pareto front found so far
    group_best: dict = field(default_factory=dict)      # plan group -> best first ranking component
    group_top: dict = field(default_factory=dict)       # plan group -> its `top` best first components, sorted
    memory_evaluations: int = 0
    speed_evaluations: int = 0
    layouts: int = 0
    space_points: int = 0       # points of the search space (grid.py), every one decided below
    bound_points: int = 0       # of them, decided by a proven bound or a software rule, not evaluated
    sizing_abandoned: int = 0   # serving layouts whose load-simulator sizing stopped on a bound (serve_search._abandon)
    gpus_done: int = 0
    gpus_total: int = 0

    def miss(self, gpu_id: str, priority: int, closeness: float, rej: Rejection) -> None:
        self.misses.setdefault(gpu_id, []).append((priority, closeness, rej))

    def named_reject(self, rej: Rejection) -> None:
        key = (rej.option, rej.reason)
        if key not in self.seen_named:
            self.seen_named.add(key)
            self.rejected.append(rej)

    def add_to_front(self, cost: float, t: float) -> None:
        if not any(fc <= cost and ft <= t for fc, ft in self.front):
            self.front = [f for f in self.front if not (cost <= f[0] and t <= f[1])] + [(cost, t)]


@dataclass
class Caches:
    memory: dict = field(default_factory=dict)      # training layout key -> MemoryEstimate (GPU-independent)
    price: dict = field(default_factory=dict)       # (gpu id, count) -> $/h or None
    flops: dict = field(default_factory=dict)       # (method, seq_len) -> FLOPs per token for the bounds
    network: dict = field(default_factory=dict)     # gpu id -> network
    params: dict = field(default_factory=dict)      # gpu id -> (speed params, profile path applied)
    eta: dict = field(default_factory=dict)         # gpu id -> (max matmul eff., max attention eff.)
    templates: dict = field(default_factory=dict)   # gpu id -> validated candidate scenario
    limited: dict = field(default_factory=dict)     # gpu id -> software-support warnings (training)
    engine_error: dict = field(default_factory=dict)  # (gpu id, engine) -> the software error, or None


@dataclass(frozen=True)
class Search:
    """What one recommend call searches, and for whom; `tally` and `cache` are its working memory."""
    model: Any
    space: S.Space
    cons: Constraints
    preset: Preset | None
    objective: str
    weights: Mapping[str, float]
    max_gpus: int
    top: int
    base_params: Mapping[str, Any]
    profile: Any = None                 # HardwareProfile from hardware.profile / GPUPLAN_PROFILE, or None
    profile_path: str | None = None
    network_name: str | None = None
    default_deadline: bool = False
    deadline: float | None = None       # time.monotonic() limit
    tally: Tally = field(default_factory=Tally)
    cache: Caches = field(default_factory=Caches)

    # ---- per-GPU look-ups ----

    def params_for(self, gpu: Any) -> tuple[Mapping[str, Any], str | None]:
        """Speed parameters for `gpu`: the packaged ones, with the measured profile's factors when the
        profile was measured on this GPU (or names none), exactly as pipeline.resolve applies them."""
        hit = self.cache.params.get(gpu.id)
        if hit is None:
            hit = (self.base_params, None)
            if self.profile is not None and (not self.profile.gpu_id or self.profile.gpu_id == gpu.id):
                from ..estimate.profile import params_with_profile
                hit = (params_with_profile(self.base_params, self.profile, gpu), self.profile_path)
            self.cache.params[gpu.id] = hit
        return hit

    def network_for(self, gpu: Any) -> Any:
        if gpu.id not in self.cache.network:
            self.cache.network[gpu.id] = pipeline.resolve_network(self.network_name, gpu)
        return self.cache.network[gpu.id]

    def node_size(self, gpu: Any) -> int:
        if self.space.gpus_per_node:
            return int(self.space.gpus_per_node)
        from ..hardware import default_node_for
        return max(1, int(default_node_for(gpu).gpus_per_node))

    def resolved(self, scn: Scenario, gpu: Any, *, warnings: bool = False) -> pipeline.Resolved:
        """The pipeline's Resolved for a candidate, from the search's look-ups (no repeated look-up)."""
        params, profile = self.params_for(gpu)
        r = pipeline.Resolved(scn, self.model, gpu, self.network_for(gpu), params, profile)
        if warnings:
            from dataclasses import replace
            r = replace(r, warnings=pipeline.software_warnings(r))
        return r

    # ---- ranking helpers ----

    def pref(self, **values: Any) -> float:
        if not self.preset or not self.preset.prefer:
            return 1.0
        mult = 1.0
        for k, order in self.preset.prefer.items():
            if k in values and values[k] in order:
                mult *= 1.0 + PREFERENCE_STEP * order.index(values[k])
        return mult

    def check_time(self, where: str) -> None:
        """Stop a search that ran past its deadline, saying how far it got and how to narrow it."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            t = self.tally
            raise TimeLimitError(
                "recommend", f"ran out of time {where}: searched {t.gpus_done} of {t.gpus_total} GPUs, "
                f"{t.layouts:,} layouts, {t.memory_evaluations + t.speed_evaluations:,} evaluations, "
                f"{len(t.feasible):,} feasible plans so far.", NARROW_HINT + ".")


# ---- software fit --------------------------------------------------------------------------------

def software_problems(gpu: Any, **kw: Any) -> list:
    from ..hardware import software
    return software.check(gpu, **kw)


def first_error(problems: list) -> Any:
    return next((p for p in problems if p.severity == "error"), None)


def format_known(weights: str) -> bool:
    from ..errors import GpuplanError
    from ..hardware import software
    try:
        software.normalize_format(weights)
        return True
    except GpuplanError:
        return False


def stack_of(gpu: Any) -> str:
    from ..hardware import software
    return getattr(software.support_for(gpu), "stack", "cuda")

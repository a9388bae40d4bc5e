"""The search's records (Rejection, Plan, Recommendation, the internal candidate) and the final
step: ranking the feasible candidates and building the plans that are shown, each evaluated through
the one pipeline with the memory estimate the search already made."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .. import pipeline
from ..estimate.results import CostEstimate, MemoryEstimate, PerformanceEstimate
from ..scenario import Scenario, scenario_from_dict
from ..units import GiB
from .constraints import Constraints
from .presets import Preset
from .rank import pareto_front, score_fn

if TYPE_CHECKING:
    from .state import Search

PARETO_SHOWN = 40


@dataclass(frozen=True)
class Rejection:
    option: str
    reason: str
    kind: str                        # software | memory | layout | price | constraint | preset | input
    gpu: str | None = None
    count: int | None = None
    alternative: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"option": self.option, "reason": self.reason, "kind": self.kind, "gpu": self.gpu,
                "count": self.count, "alternative": self.alternative or None}


@dataclass(frozen=True)
class Plan:
    rank: int
    gpu: str
    count: int
    summary: str
    scenario: Scenario
    estimate: dict[str, Any]         # DESIGN §3.2: memory, performance, cost
    cost_value: float | None
    time_value: float | None
    why: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    rank_factor: float = 1.0         # the ranking multiplied the objective by this (limited support, preset)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "gpu": self.gpu, "count": self.count, "summary": self.summary,
                "scenario": self.scenario.model_dump(mode="json", exclude_none=True),
                "estimate": self.estimate, "cost_value": self.cost_value, "time_value": self.time_value,
                "why": list(self.why), "warnings": list(self.warnings), "rank_factor": self.rank_factor}


@dataclass(frozen=True)
class Recommendation:
    plans: tuple[Plan, ...]
    pareto: tuple[Plan, ...]
    rejected: tuple[Rejection, ...]
    objective: str
    objective_weights: Mapping[str, float]
    constraints: Constraints
    preset: Preset | None
    task: str
    cost_metric: str                 # what cost_value means
    time_metric: str                 # what time_value means
    assumptions: tuple[str, ...]
    stats: Mapping[str, Any]
    # when nothing is feasible within the default limits (not limits the user set): the best plans
    # beyond them, each with the limit it exceeds in its warnings, and the limits that were relaxed
    beyond_default_limits: tuple[Plan, ...] = ()
    relaxed_limits: tuple[str, ...] = ()

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def to_json(self) -> dict[str, Any]:
        return {"plans": [p.to_json() for p in self.plans],
                "pareto": [p.to_json() for p in self.pareto],
                "rejected": [r.to_json() for r in self.rejected],
                "objective": {"name": self.objective, "weights": dict(self.objective_weights) or None,
                              "cost_metric": self.cost_metric, "time_metric": self.time_metric},
                "constraints": self.constraints.to_json(),
                "preset": self.preset.to_json() if self.preset else None,
                "task": self.task, "assumptions": list(self.assumptions), "stats": dict(self.stats),
                "beyond_default_limits": [p.to_json() for p in self.beyond_default_limits],
                "relaxed_limits": list(self.relaxed_limits)}


@dataclass(frozen=True)
class Cand:
    """A timed candidate plan: its scenario, the one memory estimate made for it, speed and cost."""
    gpu: Any
    count: int
    scn: Scenario
    mem: MemoryEstimate
    perf: PerformanceEstimate
    cost: CostEstimate
    cost_value: float | None
    time_value: float | None
    usd_per_m: float | None
    group: tuple
    summary: str
    pref: float = 1.0
    warnings: tuple[str, ...] = ()


# ---- ranking and the plans shown ---------------------------------------------------------------------

def ranked(s: Search) -> tuple[list[Cand], list[Cand]]:
    """The top N in objective order: the best candidate of each plan group (GPU type and method;
    serving: engine and formats) so that N plans show alternatives, then, while fewer than N groups
    have plans, the next best candidates of any group (other layouts of the same GPU); and the
    cost/time front."""
    feas = s.tally.feasible
    key = score_fn(s.objective, s.weights, feas)

    def k(c: Cand) -> tuple:
        base = key(c)
        return (base[0] * c.pref if isinstance(base[0], float) else base[0],) + tuple(base[1:])
    feas.sort(key=k)
    best_per_group: dict = {}
    for c in feas:
        best_per_group.setdefault(c.group, c)
    top = list(best_per_group.values())[:max(0, s.top)]
    if len(top) < s.top:
        chosen = {id(c) for c in top}
        top += [c for c in feas if id(c) not in chosen][:s.top - len(top)]
        top.sort(key=k)
    front = pareto_front(feas, lambda c: None if c.cost_value is None or c.time_value is None
                         else (c.cost_value, c.time_value))
    if len(front) > PARETO_SHOWN:
        step = len(front) / PARETO_SHOWN
        front = [front[int(i * step)] for i in range(PARETO_SHOWN)]
    return top, front


def build_plans(s: Search, top: list[Cand], front: list[Cand]) -> tuple[tuple[Plan, ...], tuple[Plan, ...]]:
    """Plans for the top N and the front; a candidate in both is evaluated once."""
    built: dict[int, Plan] = {}
    n_feasible = len(s.tally.feasible)

    def plan(c: Cand, rank: int) -> Plan:
        if id(c) not in built:
            built[id(c)] = build_plan(s, c, rank, n_feasible)
        p = built[id(c)]
        return p if p.rank == rank else dataclasses.replace(p, rank=rank)
    return tuple(plan(c, i + 1) for i, c in enumerate(top)), tuple(plan(c, 0) for c in front)


def build_plan(s: Search, c: Cand, rank: int, n_feasible: int) -> Plan:
    """Re-validate the scenario shown and evaluate it through the pipeline with the candidate's
    memory estimate (no second memory computation)."""
    from .candidate import for_gpu
    # the given fields only: an engine default chosen because a field was left unset (SGLang's memory fraction)
    # stays the candidate's
    scn = scenario_from_dict(c.scn.model_dump(exclude_unset=True), "(recommended plan)")
    mem = c.mem if s.space.task == "infer" else for_gpu(c.mem, c.gpu)   # training memory is cached GPU-free
    est = pipeline.evaluate(s.resolved(scn, c.gpu, warnings=True), memory_estimate=mem)
    estimate = {"memory": est.memory.to_json(), "performance": est.performance.to_json(),
                "cost": est.cost.to_json()}
    warnings = tuple(c.warnings) + tuple(est.performance.notes or ())
    why = _why(s, c, est, rank, n_feasible)
    load = (c.perf.details or {}).get("load") if s.space.task == "infer" else None
    if load is not None:
        # replicas sized by the load simulator (serve_search._replicas_for_slo)
        n = c.perf.details["replicas"]
        goodput = load.get("goodput_requests_per_s")
        estimate["load"] = {**load, "replicas": n, "rate_per_s": s.cons.requests_per_s,
                            # the simulated replica carried the whole rate over `replicas_simulated` replicas
                            # (goodput <= rate)
                            "goodput_requests_per_s": None if goodput is None else
                            min(goodput * load.get("replicas_simulated", n), s.cons.requests_per_s),
                            "usd_per_million_tokens": c.cost.usd_per_million_tokens}
        # the plan is priced at the rate it was sized for, not at the scenario's concurrency
        estimate["cost"]["usd_per_million_tokens"] = c.cost.usd_per_million_tokens
        pct = f"p{load['slo']['percentile']:g}" if load.get("slo") else "p99"
        why = why[:1] + (f"sized by simulation: {n} replica(s) at {load['rate_per_replica_s']:.3g} requests/s each; "
                         f"{pct} TTFT {load['ttft_at_percentile_s'] * 1e3:,.0f} ms, TPOT "
                         f"{(load['tpot_at_percentile_s'] or 0) * 1e3:,.1f} ms; "
                         f"${c.cost.usd_per_million_tokens or 0:,.2f}/M output tokens at "
                         f"{s.cons.requests_per_s:g} requests/s",) + why[1:]
    if c.pref != 1.0:
        why = why + (f"ranked as if its {s.objective} figure were x{c.pref:.2f}: the search prefers fully supported "
                     f"software{' and the preset' + chr(39) + 's choices' if s.preset else ''} (see warnings)",)
    return Plan(rank=rank, gpu=c.gpu.id, count=c.count, summary=c.summary, scenario=scn, estimate=estimate,
                cost_value=c.cost_value, time_value=c.time_value, why=why, warnings=warnings, rank_factor=c.pref)


def _bar(what: str, u: Any) -> str:
    """'memory ±4 % (category)', or 'memory: no error bar (category)' outside every validated category."""
    if u.typical is None:
        return f"{what}: no error bar ({u.category or 'outside every validated category'})"
    return f"{what} ±{100 * u.typical:.0f} % ({u.category})"


def _why(s: Search, c: Cand, est: Any, rank: int, n_feasible: int) -> tuple[str, ...]:
    mem, cost = est.memory, est.cost
    why = [f"fits: {mem.peak_bytes_per_gpu / GiB:.1f} of {mem.capacity_bytes_per_gpu / GiB:.1f} GiB per GPU "
           f"(peak in {mem.phase})"]
    if cost.usd_per_hour is not None:
        why.append(f"{cost.basis}: ${cost.usd_per_hour:,.2f}/h")
    be = cost.details.get("breakeven_months")
    preset = s.preset
    if be is not None and (preset is None or preset.show_breakeven or rank == 1):
        why.append(f"buying these {c.count} GPUs pays off after {be:,.1f} months of continuous use")
    elif be is None and preset is not None and preset.show_breakeven:
        why.append(f"rent-vs-buy break-even unknown: no purchase price for {c.gpu.id} in the catalog "
                   "(set cost.capex_usd_per_gpu)" if cost.details.get("own") is None else
                   "buying never pays off: renting costs less than the electricity of owning")
    ub_mem, ub_speed = mem.uncertainty, est.performance.uncertainty   # attached by the pipeline
    if ub_mem is not None and ub_speed is not None:
        why.append(f"error bars: {_bar('memory', ub_mem)}, {_bar('time and cost', ub_speed)}; "
                   "typical, P90 in the JSON")
    if rank == 1:
        why.append(f"best of {n_feasible} feasible plans by {s.objective}")
    if preset:
        why.append(f"preset {preset.name}: {preset.why[0]}")
    return tuple(why)


def rejections(s: Search, named_ids: set[str]) -> tuple[Rejection, ...]:
    """Named options ruled out, plus the most telling miss of each GPU without a feasible plan."""
    t = s.tally
    rejected = list(t.rejected)
    feasible_gpus = {c.gpu.id for c in t.feasible}
    for gid, misses in t.misses.items():
        if gid in feasible_gpus:
            continue
        misses.sort(key=lambda m: (-m[0], -m[1]))
        rejected.append(misses[0][2])
    for gid in named_ids - feasible_gpus - set(t.misses) - {r.gpu for r in rejected}:
        rejected.append(Rejection(gid, "no GPU count within the limits gives a valid layout", "layout", gid))
    seen, unique = set(), []
    for r in rejected:
        if (r.option, r.reason) not in seen:
            seen.add((r.option, r.reason))
            unique.append(r)
    return tuple(unique)

"""RL placement search (issue 20): how to split a GRPO/PPO/RLOO job's GPUs between rollout and training.

For one GPU type and count the search tries every placement the RL step model (estimate/rl.py) can express:
colocated with each rollout tensor-parallel size that divides the GPUs, and split with every rollout group size
(1 .. count-1), each rollout TP that divides it, synchronous and (optionally) one step off-policy. Every
candidate goes through the pipeline (memory, per-phase time, cost); the ones that do not fit or cannot be laid
out come back as rejections with the reason. Plans are ranked by the cost of the requested number of RL steps
(then by step time). `rl_whatif` prices the workload knobs: group size, response length, the reference model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import CommandHint, GpuplanError, InputError
from ..pipeline import as_scenario, evaluate, resolve
from ..scenario import RL_OBJECTIVES, Scenario

# rollout GPUs in a split placement hold nothing but the engine: vLLM's own default share
SPLIT_GPU_MEMORY_UTILIZATION = 0.9
ROLLOUT_TPS = (1, 2, 4, 8)
DEFAULT_STEPS = 1000        # RL steps priced when none are named (rl-plan --steps)


@dataclass(frozen=True)
class RLPlan:
    placement: str                 # colocated | split
    rollout_gpus: int
    training_gpus: int
    rollout_tp: int
    async_steps: int
    step_time_s: float
    bound_by: str
    peak_bytes_per_gpu: int
    capacity_bytes_per_gpu: int
    usd_per_hour: float | None
    usd_total: float | None        # for `steps` RL steps
    steps: int
    phases_s: dict[str, float]
    scenario: Scenario = field(repr=False)

    @property
    def label(self) -> str:
        if self.placement == "colocated":
            return f"colocated on {self.rollout_gpus} GPUs (rollout tp={self.rollout_tp})"
        lag = f", {self.async_steps} step off-policy" if self.async_steps else ", synchronous"
        return (f"split {self.rollout_gpus} rollout (tp={self.rollout_tp}) + {self.training_gpus} training{lag}")


@dataclass(frozen=True)
class RLRejection:
    what: str
    why: str


@dataclass(frozen=True)
class RLRecommendation:
    plans: tuple[RLPlan, ...]
    rejections: tuple[RLRejection, ...]
    steps: int

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps,
                "plans": [{"plan": p.label, "placement": p.placement, "rollout_gpus": p.rollout_gpus,
                           "training_gpus": p.training_gpus, "rollout_tp": p.rollout_tp, "async_steps": p.async_steps,
                           "step_time_s": p.step_time_s, "bound_by": p.bound_by,
                           "peak_bytes_per_gpu": p.peak_bytes_per_gpu, "usd_per_hour": p.usd_per_hour,
                           "usd_total": p.usd_total, "phases_s": p.phases_s} for p in self.plans],
                "rejections": [{"plan": r.what, "why": r.why} for r in self.rejections]}


def _candidates(scn: Scenario, allow_async: bool) -> list[dict[str, Any]]:
    """RL-settings updates for every placement of the scenario's GPU count. Colocated engines keep the
    scenario's memory share when it is colocated, else the RL default (verl's 0.5)."""
    from ..scenario import RL
    n = scn.hardware.count
    gpn = scn.hardware.gpus_per_node or n
    rl = scn.train.rl
    share = rl.gpu_memory_utilization if rl.placement == "colocated" else RL.model_fields["gpu_memory_utilization"].default
    out: list[dict[str, Any]] = []
    for tp in ROLLOUT_TPS:
        if tp <= min(n, gpn) and n % tp == 0:
            out.append({"placement": "colocated", "rollout_gpus": None, "rollout_tp": tp, "async_steps": 0,
                        "gpu_memory_utilization": share})
    for r in range(1, n):
        for tp in ROLLOUT_TPS:
            if tp > min(r, gpn) or r % tp:
                continue
            for k in ((0, 1) if allow_async else (0,)):
                out.append({"placement": "split", "rollout_gpus": r, "rollout_tp": tp, "async_steps": k,
                            "gpu_memory_utilization": SPLIT_GPU_MEMORY_UTILIZATION})
    return out


def _label(c: Mapping[str, Any], n: int) -> str:
    if c["placement"] == "colocated":
        return f"colocated on {n} GPUs (rollout tp={c['rollout_tp']})"
    lag = ", 1 step off-policy" if c["async_steps"] else ", synchronous"
    return f"split {c['rollout_gpus']} rollout (tp={c['rollout_tp']}) + {n - c['rollout_gpus']} training{lag}"


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def rl_plan(scenario: Scenario | Mapping[str, Any] | str, *, steps: int = DEFAULT_STEPS, allow_async: bool = True,
            top: int | None = None, max_placements: int | None = None) -> tuple[RLRecommendation, list[dict[str, Any]]]:
    """The placement search and the workload what-if of an RL scenario: the one answer `gpuplan rl-plan`,
    `gpuplan recommend` on an RL scenario and the web's POST /api/recommend give."""
    scn = as_scenario(scenario)
    return (recommend_rl(scn, steps=steps, allow_async=allow_async, top=top, max_placements=max_placements),
            rl_whatif(scn))


def _check_steps(steps: int) -> None:
    if not 1 <= steps <= 10_000_000:
        raise InputError("steps", f"must be between 1 and 10,000,000 RL steps, got {steps}.", "pass --steps N.")


def recommend_rl(scenario: Scenario | Mapping[str, Any] | str, *, steps: int = DEFAULT_STEPS, allow_async: bool = True,
                 top: int | None = None, max_placements: int | None = None) -> RLRecommendation:
    """Placements of an RL scenario's GPUs, cheapest for `steps` RL steps first, with the rejected ones.

    The scenario fixes the model, GPU type and count, the RL workload (prompts, group, lengths, reference,
    critic, reward model) and the training layout (`parallel`, applied to the training group).
    `max_placements`: refuse (before evaluating any) a GPU count with more placements than this."""
    scn = as_scenario(scenario)
    if scn.train is None or scn.train.objective not in RL_OBJECTIVES:
        raise InputError("train.objective", "must be an RL objective (grpo, ppo, rloo) for an RL placement search.",
                         "set train.objective: grpo and train.rl", see=CommandHint("recommend", "plans for other training"))
    _check_steps(steps)
    n = scn.hardware.count
    candidates = _candidates(scn, allow_async)
    if max_placements is not None and len(candidates) > max_placements:
        raise InputError(f"hardware.count {n}", f"gives {len(candidates):,} rollout/training placements to evaluate, "
                         f"more than the {max_placements:,} allowed here.",
                         "use fewer GPUs", local_fix="`gpuplan rl-plan SCENARIO` on your own machine searches any count")
    base = resolve(scn)
    plans: list[RLPlan] = []
    rejections: list[RLRejection] = []
    for c in candidates:
        what = _label(c, n)
        rl = {**scn.train.rl.model_dump(), **c}
        try:
            cand = scn.replace(train={"rl": rl}, parallel={"dp": None})
            r = resolve(cand, model=base.model, gpu=base.gpu, network=base.network, speed_params=base.speed_params)
            est = evaluate(r)
        except GpuplanError as err:
            rejections.append(RLRejection(what, f"{err.what}: {err.why}"))
            continue
        mem, perf = est.memory, est.performance
        if not mem.fits:
            side = {"rollout": "a rollout GPU"}.get(mem.phase, "a training GPU" if c["placement"] == "split"
                                                    else "every GPU")
            rejections.append(RLRejection(what, f"does not fit: {_gib(mem.peak_bytes_per_gpu)} on {side} in phase "
                                                f"{mem.phase} > {_gib(mem.capacity_bytes_per_gpu)}"))
            continue
        step = perf.step_time_s
        if step is None:          # fits in memory, but the rollout engine cannot run one response
            rejections.append(RLRejection(what, next((n for n in perf.notes if "rollout engine" in n),
                                                     "the rollout cannot run")))
            continue
        rate = est.cost.usd_per_hour if est.cost is not None else None
        plans.append(RLPlan(placement=c["placement"], rollout_gpus=c["rollout_gpus"] or n,
                            training_gpus=n - (c["rollout_gpus"] or 0) if c["placement"] == "split" else n,
                            rollout_tp=c["rollout_tp"], async_steps=c["async_steps"], step_time_s=step,
                            bound_by=str(perf.details.get("bound_by")),
                            peak_bytes_per_gpu=mem.peak_bytes_per_gpu, capacity_bytes_per_gpu=mem.capacity_bytes_per_gpu,
                            usd_per_hour=rate, usd_total=None if rate is None else rate * step * steps / 3600.0,
                            steps=steps, phases_s=dict(perf.details.get("phases_s", {})), scenario=cand))
    plans.sort(key=lambda p: (p.usd_total if p.usd_total is not None else float("inf"), p.step_time_s))
    if top is not None:
        plans = plans[:top]
    return RLRecommendation(tuple(plans), tuple(rejections), steps)


def _knobs(scn: Scenario) -> list[tuple[str, dict[str, Any]]]:
    rl = scn.train.rl
    mean = rl.mean_response_len or rl.max_new_tokens
    out = [(f"group_size={rl.group_size * 2}", {"group_size": rl.group_size * 2})]
    if rl.group_size // 2 >= 2:
        out.append((f"group_size={rl.group_size // 2}", {"group_size": rl.group_size // 2}))
    # x2 scales the whole length distribution, its cap too (as /2 halves both)
    out.append((f"response length x2 (mean {mean * 2}, max {rl.max_new_tokens * 2})",
                {"mean_response_len": mean * 2, "max_new_tokens": rl.max_new_tokens * 2}))
    if mean // 2 >= 1:
        out.append((f"response length /2 (mean {mean // 2}, max {max(1, rl.max_new_tokens // 2)})",
                    {"mean_response_len": min(mean // 2, max(1, rl.max_new_tokens // 2)),
                     "max_new_tokens": max(1, rl.max_new_tokens // 2)}))
    out.append((f"reference={'off' if rl.reference else 'on'}", {"reference": not rl.reference}))
    return out


def rl_whatif(scenario: Scenario | Mapping[str, Any] | str) -> list[dict[str, Any]]:
    """What each RL workload knob costs: step time and peak memory per GPU against the scenario's own.
    Rows: change, step_time_s, step_time_change (relative), peak_bytes_per_gpu, peak_change_bytes, fits, bound_by."""
    scn = as_scenario(scenario)
    if scn.train is None or scn.train.objective not in RL_OBJECTIVES:
        raise InputError("train.objective", "must be grpo, ppo or rloo for an RL what-if.",
                         "set train.objective and train.rl.")
    r0 = resolve(scn)
    try:        # a scenario whose rollout engine cannot start: the knobs are still priced (one may fix it)
        e0 = evaluate(r0)
    except GpuplanError as err:
        e0 = None
        rows = [{"change": "(as given)", "error": f"{err.what}: {err.why}"}]
    else:
        rows = [{"change": "(as given)", "step_time_s": e0.performance.step_time_s,
                 "step_time_change": 0.0 if e0.performance.step_time_s is not None else None,
                 "peak_bytes_per_gpu": e0.memory.peak_bytes_per_gpu, "peak_change_bytes": 0, "fits": e0.memory.fits,
                 "bound_by": e0.performance.details.get("bound_by")}]
    for name, upd in _knobs(scn):
        try:
            cand = scn.replace(train={"rl": {**scn.train.rl.model_dump(), **upd}})
            e = evaluate(resolve(cand, model=r0.model, gpu=r0.gpu, network=r0.network, speed_params=r0.speed_params))
        except GpuplanError as err:
            rows.append({"change": name, "error": f"{err.what}: {err.why}"})
            continue
        s0, s1 = (e0.performance.step_time_s if e0 else None), e.performance.step_time_s
        rows.append({"change": name, "step_time_s": s1,
                     "step_time_change": s1 / s0 - 1.0 if s0 and s1 is not None else None,
                     "peak_bytes_per_gpu": e.memory.peak_bytes_per_gpu,
                     "peak_change_bytes": e.memory.peak_bytes_per_gpu - e0.memory.peak_bytes_per_gpu if e0 else None,
                     "fits": e.memory.fits, "bound_by": e.performance.details.get("bound_by")})
    return rows


def refuse_unapplied(what: str, unapplied: Sequence[str], data: Mapping[str, Any], needs_gpu: bool = True) -> None:
    """Refuse what a search over an RL scenario would silently drop (issue 20: `recommend grpo.yaml --gpus a,b
    --budget 500` answered for the file's GPU alone, and a file without a GPU was told to let recommend choose one).
    `unapplied`: the settings given, as the caller's surface names them (a flag, a request field); the scenario's own
    constraints and ranking objective are added here. `needs_gpu`: the scenario must name its GPU type (recommend; a
    compare lists its own)."""
    names = list(unapplied) + [f"constraints.{k}" for k, v in (data.get("constraints") or {}).items() if v is not None]
    if data.get("objective") not in (None, "cheapest"):
        names.append("objective")
    compare = CommandHint("compare", "each GPU type's cheapest placement and its total for a number of steps, to weigh "
                                     "budget and deadline against")
    if names:
        raise InputError(f"{what} ({', '.join(names)})",
                         "an RL plan is a placement of the rollout engine and the trainer on the scenario's GPU type "
                         "and count, ranked cheapest for a number of steps; these settings would not be applied.",
                         "drop them", see=compare)
    if needs_gpu and not (data.get("hardware") or {}).get("gpu"):
        raise InputError(what, "names no GPU: an RL plan places rollout and training on one GPU type and count, which "
                               "this search does not choose.", "set hardware.gpu and hardware.count", see=compare)


def compare_rl(data: Mapping[str, Any], gpus: Sequence[str], *, steps: int = DEFAULT_STEPS, allow_async: bool = True,
               max_placements: int | None = None) -> list[dict[str, Any]]:
    """Each GPU type's cheapest placement of an RL scenario at its GPU count (recommend_rl), or why none fits: the
    rows `search.compare` gives for an RL scenario, on every surface."""
    import copy

    from ..hardware import get_gpu
    if not gpus:
        raise InputError("gpus", "names no GPU.", "list GPU ids, e.g. h100-sxm,a100-sxm-80gb")
    _check_steps(steps)      # once here, not once per GPU type as each row's refusal
    rows = []
    for gpu in [get_gpu(g).id for g in gpus]:      # a misspelt or ambiguous id fails as in every other compare
        one = copy.deepcopy(dict(data))
        one.setdefault("hardware", {})["gpu"] = gpu
        row: dict[str, Any] = {"gpu": gpu, "fits": False, "plan": None, "step_time_s": None, "usd_per_hour": None,
                               "usd_total": None, "steps": steps, "peak_bytes_per_gpu": None,
                               "capacity_bytes_per_gpu": None, "tokens_per_s": None, "reason": None}
        try:
            rec = recommend_rl(one, steps=steps, allow_async=allow_async, max_placements=max_placements)
        except GpuplanError as err:
            row["reason"] = f"{err.what}: {err.why}"
            rows.append(row)
            continue
        if rec.plans:
            p = rec.plans[0]
            row.update(fits=True, plan=p.label, step_time_s=p.step_time_s, usd_per_hour=p.usd_per_hour,
                       usd_total=p.usd_total, peak_bytes_per_gpu=p.peak_bytes_per_gpu,
                       capacity_bytes_per_gpu=p.capacity_bytes_per_gpu)
        else:
            row["reason"] = "no placement fits" + (f" (e.g. {rec.rejections[0].what}: {rec.rejections[0].why})"
                                                    if rec.rejections else "")
        rows.append(row)
    return rows


def to_fit(rec: RLRecommendation, scenario: Scenario | Mapping[str, Any] | str) -> tuple[Any, list | None]:
    """When no placement fits: the scenario as given, estimated, and what makes it fit (whatif.fit_alternatives, the
    list `gpuplan memory` gives), so a refusal says what to change (issue 20). (None, None) when a placement fits or
    the scenario as given cannot be estimated at all (an engine that cannot start: its reason is in the rejections)."""
    if rec.plans:
        return None, None
    from .whatif import fit_alternatives
    try:
        est = evaluate(as_scenario(scenario))
    except GpuplanError:
        return None, None
    return est, ([] if est.memory.fits else fit_alternatives(est))


def plan_record(rec: RLRecommendation, whatif_rows: list[dict[str, Any]], alternatives: list | None) -> dict[str, Any]:
    """The RL placement answer as JSON, the same record for `gpuplan rl-plan --json`, `gpuplan recommend --json` on
    an RL scenario and POST /api/recommend: the plans and rejections, the workload what-if and, when no placement
    fits, `to_fit` (to_fit's list)."""
    return {**rec.to_json(), "whatif": whatif_rows, **({"to_fit": alternatives} if alternatives is not None else {})}

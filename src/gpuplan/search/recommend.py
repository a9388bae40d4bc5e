"""The recommendation search: GPUs x counts x layouts x techniques, memory first, then speed and
cost for what fits (docs/recommend.md §2). This module is the entry point; the work is split by
concern:

* space.py: which fields are open and the values they may take (validated, deduplicated);
* guard.py: the call's arguments and the candidate budget, checked before the search runs;
* train_search.py / serve_search.py: the search on one GPU type;
* candidate.py: a candidate's scenario, its evaluation through the one pipeline (memory once per
  candidate, handed to the speed engine) and the limit checks;
* pricing.py, bounds.py: prices, lower bounds and pruning;
* plan.py, rank.py: ranking, the Pareto front and the plans shown (built with pipeline.evaluate).

How it stays fast (a 70B pre-training search over the catalog up to 4,096 GPUs in well under a
second on two cores): training memory does not depend on the GPU type, so each distinct layout is
estimated once and compared with every GPU's capacity; techniques are tried cheapest-first and
dominated ones skipped; lower bounds skip GPU counts that cannot matter.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any, Mapping, Sequence

from .. import pipeline
from ..errors import CatalogHint, InputError, UnknownNameError
from ..models import get_model
from ..scenario import RL_OBJECTIVES, Scenario
from ..term import Progress
from . import guard
from . import space as S
from .constraints import Constraints
from .partial import _partial, _validate_fixed, json_copy, load_partial
from .plan import Plan, Recommendation, Rejection, build_plans, ranked, rejections
from .presets import Preset, get_preset, gpu_allowed
from .rank import parse_objective
from .serve_search import infer_gpu
from .state import Search
from .train_search import train_gpu

DEFAULT_DEADLINE_DAYS = 90.0
# When the default limits (the 90-day deadline, the 4,096-GPU cap) leave no feasible plan, the search
# runs again beyond them so "how many GPUs for X" always has an answer: first with the GPU cap raised
# to this (whole nodes doubling up to 65,536 GPUs; the largest published training clusters are ~100k),
# then, if still nothing, without the default deadline too.
RELAXED_MAX_GPUS = 65_536
CONSTRAINT_ARGS = ("budget_usd", "budget_usd_per_hour", "deadline_days", "max_gpus", "owned", "providers", "spot",
                   "ttft_s", "tpot_s", "requests_per_s", "tokens_per_s", "min_headroom")

__all__ = ["Plan", "Recommendation", "Rejection", "load_partial", "json_copy", "recommend", "DEFAULT_DEADLINE_DAYS"]


def recommend(scenario_or_partial: Scenario | Mapping[str, Any] | str, *,
              objective: str | Mapping[str, float] | None = None, top: int = 10,
              gpus: Sequence[str] | None = None, preset: str | None = None,
              budget_usd: float | None = None, budget_usd_per_hour: float | None = None,
              deadline_days: float | None = None, max_gpus: int | None = None,
              owned: Mapping[str, int] | None = None, providers: Sequence[str] | None = None,
              spot: bool | None = None, ttft_s: float | None = None, tpot_s: float | None = None,
              requests_per_s: float | None = None, tokens_per_s: float | None = None,
              min_headroom: float | None = None, progress: bool | None = None,
              deadline_s: float | None = None) -> Recommendation:
    """Ranked, explained, feasible plans for a scenario whose hardware and/or layout are left open.

    Precedence for every setting: keyword argument > scenario's `constraints:`/`objective:` block >
    preset > default. `deadline_s` is an absolute time.monotonic() limit: the search stops there
    with a TimeLimitError saying how far it got. See docs/recommend.md.
    """
    t0 = time.perf_counter()
    guard.check_call(top=top, deadline_s=deadline_s, gpus=gpus, progress=progress)
    given = dict(budget_usd=budget_usd, budget_usd_per_hour=budget_usd_per_hour, deadline_days=deadline_days,
                 max_gpus=max_gpus, owned=owned, providers=providers, spot=spot, ttft_s=ttft_s, tpot_s=tpot_s,
                 requests_per_s=requests_per_s, tokens_per_s=tokens_per_s, min_headroom=min_headroom)
    guard.check_constraints(given, "recommend argument")
    data = _partial(scenario_or_partial)
    _refuse_rl(data)
    preset_name = preset or data.get("preset")
    if preset_name is not None and not isinstance(preset_name, str):
        raise UnknownNameError("preset", f"must be a preset name, got {preset_name!r}."[:200],
                               see=CatalogHint("presets", "the preset names"))
    preset_obj = get_preset(preset_name)
    data = json_copy(data)
    _validate_fixed(data)
    cons, default_deadline = _constraints(data, preset_obj, given)
    obj_name, obj_weights = parse_objective(objective if objective is not None else
                                            data.get("objective") or (preset_obj.objective if preset_obj else None))
    sp = _space(data, preset_obj, gpus)
    s = _search(data, sp, cons, preset_obj, obj_name, obj_weights, top, default_deadline, deadline_s)
    candidates, named_ids = _candidate_gpus(sp, cons)
    guard.check_budget(s, candidates)
    _run(s, candidates, named_ids, progress, t0)
    beyond = _beyond_default_limits(s, data, candidates, named_ids, progress, t0)
    return _finish(s, named_ids, time.perf_counter() - t0, beyond)


def is_rl(data: Mapping[str, Any]) -> bool:
    """An RL objective (grpo, ppo, rloo): its plans are placements of rollout and training GPUs."""
    train = data.get("train")
    return isinstance(train, Mapping) and train.get("objective") in RL_OBJECTIVES


def _refuse_rl(data: Mapping[str, Any]) -> None:
    # the GPU/count/layout search evaluates one training layout per candidate; an RL step also places a
    # rollout engine (colocated or on rollout_gpus of its own), which the placement search enumerates
    if is_rl(data):
        raise InputError(f"train.objective {data['train']['objective']}",
                         "is an RL objective: its plans are placements of the rollout engine and the trainer on "
                         "the scenario's GPUs, which the layout search does not enumerate.",
                         "use gpuplan.search.rl_search.rl_plan (CLI: `gpuplan rl-plan SCENARIO` — `gpuplan recommend` "
                         "and the web's POST /api/recommend run it for an RL scenario), with hardware.gpu and "
                         "hardware.count set.")


def _default_cap(s: Search) -> bool:
    return s.cons.max_gpus is None and not s.space.counts and not s.cons.owned


def _beyond_default_limits(s: Search, data: dict[str, Any], candidates: list, named_ids: set[str],
                           progress: bool | None, t0: float) -> tuple[tuple[Plan, ...], tuple[str, ...]]:
    """When nothing is feasible and a default limit (not one the user set) may be why, the best plans
    beyond the default limits, each labelled with the limit it exceeds; and the limits relaxed."""
    if s.tally.feasible or not (_default_cap(s) or s.default_deadline):
        return (), ()
    cap_name = (f"max_gpus {S.DEFAULT_MAX_GPUS:,} (default)",) if _default_cap(s) else ()
    cap = RELAXED_MAX_GPUS if _default_cap(s) else s.max_gpus
    steps = [(s.cons, s.objective, cap_name)] if cap_name else []
    if s.default_deadline:
        # the smallest relaxation first: twice, four and eight times the default deadline with the
        # user's objective; then no deadline, ranked by time (the plan that comes closest to it)
        dl_name = (f"deadline {DEFAULT_DEADLINE_DAYS:g} days (default)",)
        steps += [(dataclasses.replace(s.cons, deadline_days=DEFAULT_DEADLINE_DAYS * k), s.objective, cap_name + dl_name)
                  for k in (2, 4, 8)]
        steps.append((dataclasses.replace(s.cons, deadline_days=None), "fastest", cap_name + dl_name))
    for cons, objective, names in steps:
        s2 = dataclasses.replace(s, cons=cons, max_gpus=cap, objective=objective, default_deadline=False,
                                 tally=type(s.tally)(), cache=s.cache)
        try:
            guard.check_budget(s2, candidates)
        except InputError:
            return (), ()
        _run(s2, candidates, named_ids, progress, t0)
        if s2.tally.feasible:
            top, _ = ranked(s2)
            plans, _ = build_plans(s2, top, [])
            return tuple(_labelled(p, s) for p in plans), names
    return (), ()


def _labelled(p: Plan, s: Search) -> Plan:
    """A plan found beyond the default limits, with the limits it exceeds in its warnings."""
    out = []
    if p.count > S.DEFAULT_MAX_GPUS and _default_cap(s):
        out.append(f"outside the default limit: needs {p.count:,} GPUs, more than the default max_gpus of "
                   f"{S.DEFAULT_MAX_GPUS:,} (set --max-gpus / constraints.max_gpus to search this far)")
    t = p.estimate["performance"].get("time_to_train_s")
    if s.default_deadline and t and t > DEFAULT_DEADLINE_DAYS * 86400:
        out.append(f"outside the default limit: takes {t / 86400:,.1f} days, more than the default "
                   f"{DEFAULT_DEADLINE_DAYS:g}-day deadline (set --deadline DAYS / constraints.deadline_days)")
    return dataclasses.replace(p, warnings=tuple(out) + p.warnings)


def _constraints(data: dict[str, Any], preset_obj: Preset | None,
                 given: Mapping[str, Any]) -> tuple[Constraints, bool]:
    """Constraints by precedence (arguments > file > preset), and whether the default deadline applies."""
    file_cons = dict(data.get("constraints") or {})
    cons = Constraints()
    if preset_obj:
        cons = cons.merged(**preset_obj.constraints)
    cons = cons.merged(**file_cons).merged(**given)
    default_deadline = False
    task = data.get("task", "train")
    if cons.deadline_days is None and task in ("train", "finetune") and (data.get("train") or {}).get("tokens"):
        # without a deadline "cheapest" drifts to plans that run for years (heavy offload on a few
        # cheap cards); a default ceiling keeps answers usable and is stated in the assumptions
        cons = dataclasses.replace(cons, deadline_days=DEFAULT_DEADLINE_DAYS)
        default_deadline = True
    cons = _load_targets(cons, data, given, file_cons)
    scn_cost = data.get("cost") or {}
    if "spot" in scn_cost and given.get("spot") is None and "spot" not in file_cons:
        cons = dataclasses.replace(cons, spot=bool(scn_cost["spot"]))
    return cons, default_deadline


# a serving scenario's own load block states the rate and the SLO it must meet (infer.load): the search
# sizes replicas for them unless an argument or the file's `constraints:` says otherwise
_LOAD_TARGETS = (("requests_per_s", "rate_per_s"), ("ttft_s", "slo_ttft_s"), ("tpot_s", "slo_tpot_s"))


def _load_targets(cons: Constraints, data: Mapping[str, Any], given: Mapping[str, Any],
                  file_cons: Mapping[str, Any]) -> Constraints:
    load = (data.get("infer") or {}).get("load") if data.get("task") == "infer" else None
    if not isinstance(load, Mapping):
        return cons
    fill = {c: load[k] for c, k in _LOAD_TARGETS
            if load.get(k) is not None and given.get(c) is None and c not in file_cons}
    return cons.merged(**fill) if fill else cons


def _space(data: dict[str, Any], preset_obj: Preset | None, gpus: Sequence[str] | None) -> S.Space:
    sp = S.space_from(data)
    if preset_obj:       # open what the preset opens, where the user left the default
        for name, values in preset_obj.open_train.items():
            if sp.task == "train" and name == "method":
                continue
            if sp.train.pop(f"_{name}_defaulted", False):
                sp.train[name] = values
        for name, values in preset_obj.open_infer.items():
            if sp.task == "infer" and name not in sp.named:
                sp.infer[name] = values
    if gpus:
        sp.gpus = tuple(dict.fromkeys(gpus))
        sp.named["gpu"] = sp.gpus
    return sp


def _search(data: dict[str, Any], sp: S.Space, cons: Constraints, preset_obj: Preset | None, obj_name: str,
            obj_weights: Mapping[str, float], top: int, default_deadline: bool, deadline_s: float | None) -> Search:
    from ..estimate.profile import load_profile
    from ..estimate.speed import load_efficiency
    from ..hardware import get_network
    network = sp.base.get("_network")
    if network:
        get_network(network)            # an unknown network is an error with close matches, up front
    profile_path = sp.base.get("_profile") or os.environ.get(pipeline.PROFILE_ENV) or None
    return Search(model=get_model(data["model"]), space=sp, cons=cons, preset=preset_obj, objective=obj_name,
                  weights=obj_weights, max_gpus=cons.max_gpus or S.DEFAULT_MAX_GPUS, top=top,
                  base_params=load_efficiency(), profile=load_profile(profile_path) if profile_path else None,
                  profile_path=profile_path, network_name=network, default_deadline=default_deadline,
                  deadline=deadline_s)


def _candidate_gpus(sp: S.Space, cons: Constraints) -> tuple[list, set[str]]:
    from ..hardware import get_gpu, list_gpus
    if sp.gpus:
        named = list({g.id: g for g in (get_gpu(name) for name in sp.gpus)}.values())
        return named, {g.id for g in named}
    if cons.owned:
        named = [get_gpu(g) for g in cons.owned]
        return named, {g.id for g in named}
    return list(list_gpus()), set()


def _run(s: Search, candidates: list, named_ids: set[str], progress: bool | None, t0: float) -> None:
    from .bounds import promising_first
    candidates = promising_first(s, candidates)
    # progress=None: a bar when stderr is a terminal (the CLI passes its own decision: never under --quiet/--json)
    show = sys.stderr.isatty() if progress is None else progress
    s.tally.gpus_total = len(candidates)
    with Progress("recommend", len(candidates), enabled=show) as bar:
        for gpu in candidates:
            _one_gpu(s, gpu, named_ids)
            bar.update(s.tally.gpus_done, text=f"{s.tally.memory_evaluations + s.tally.speed_evaluations:,} "
                                               "evaluations")


def _one_gpu(s: Search, gpu: Any, named_ids: set[str]) -> None:
    """Search one GPU type's counts, layouts and techniques (or record why it is not searched)."""
    from ..hardware import software
    s.check_time(f"before {gpu.id}")
    why_not = gpu_allowed(s.preset, gpu)
    if why_not:
        if gpu.id in named_ids:
            s.tally.rejected.append(Rejection(gpu.id, why_not, "preset", gpu.id,
                                              alternative="drop the preset or override it with --gpus"))
        return
    try:
        software.support_for(gpu)
    except UnknownNameError as err:     # a user-added GPU the software table does not cover
        s.tally.miss(gpu.id, 1, 0, Rejection(gpu.id, err.why, "software", gpu.id, alternative=err.fix))
        return
    (infer_gpu if s.space.task == "infer" else train_gpu)(s, gpu)
    s.tally.gpus_done += 1


def _finish(s: Search, named_ids: set[str], elapsed: float,
            beyond: tuple[tuple[Plan, ...], tuple[str, ...]] = ((), ())) -> Recommendation:
    top, front = ranked(s)
    plans, pareto = build_plans(s, top, front)
    t = s.tally
    cost_metric, time_metric = _metrics(s)
    n_eval = t.memory_evaluations + t.speed_evaluations
    stats = {"seconds": round(elapsed, 4), "gpus_searched": t.gpus_done, "layouts": t.layouts,
             "memory_evaluations": t.memory_evaluations, "speed_evaluations": t.speed_evaluations,
             "feasible": len(t.feasible), "candidates_per_s": round(n_eval / elapsed) if elapsed > 0 else None,
             "space_points": t.space_points, "points_decided_by_bound": t.bound_points,
             "space_points_per_s": round(t.space_points / elapsed) if elapsed > 0 else None}
    if t.sizing_abandoned:      # serving layouts whose replica sizing stopped on a bound (docs/recommend.md)
        stats["sizing_abandoned"] = t.sizing_abandoned
    return Recommendation(plans=plans, pareto=pareto, rejected=rejections(s, named_ids), objective=s.objective,
                          objective_weights=s.weights, constraints=s.cons, preset=s.preset, task=s.space.task,
                          cost_metric=cost_metric, time_metric=time_metric, assumptions=_assumptions(s), stats=stats,
                          beyond_default_limits=beyond[0], relaxed_limits=beyond[1])


def _metrics(s: Search) -> tuple[str, str]:
    if s.space.task == "infer":
        target = s.cons.requested_output_tokens_per_s(int(s.space.base.get("infer", {}).get("output_len", 256)))
        return ("usd_per_hour" if target else "usd_per_million_tokens"), "request_latency_s"
    tokens = s.space.base.get("train", {}).get("tokens")
    return ("usd_total", "time_to_train_s") if tokens else ("usd_per_million_tokens", "s_per_billion_tokens")


def _assumptions(s: Search) -> tuple[str, ...]:
    out = []
    sp = s.space
    if sp.task != "infer":
        tr = sp.base.get("train", {})
        if not tr.get("global_batch"):
            gb = S.default_global_batch(sp.task, int(tr.get("seq_len", 2048)))
            out.append(f"global batch not given: {gb} sequences per step "
                       + ("(~4M tokens, as Llama 3 pre-training started)" if sp.task == "train" else
                          "(a common fine-tuning batch)") + "; set train.global_batch to change it")
        if not tr.get("tokens"):
            out.append("train.tokens not given: cost is ranked per million tokens and time per billion tokens")
        if s.default_deadline:
            out.append(f"no deadline given: plans longer than {DEFAULT_DEADLINE_DAYS:g} days are rejected; "
                       "set --deadline DAYS (or constraints.deadline_days) to change it")
    else:
        inf = sp.base.get("infer", {})
        c = s.cons
        sized = bool(c.requests_per_s)
        slo = c.ttft_s is not None or c.tpot_s is not None
        out.append(f"serving {inf.get('prompt_len', 1024)}-token prompts, {inf.get('output_len', 256)} output tokens, "
                   + (f"Poisson arrivals at {c.requests_per_s:g} requests/s, replicas sized by the load simulator "
                      + ("to the latency target" if slo else "to a bounded queue (no latency target given)")
                      + " (lengths from infer.load where given; engine hf: at infer.concurrency)" if sized else
                      f"{inf.get('concurrency', 1)} concurrent requests per replica"))
    out.append("rent prices: cheapest matching offering, whole instances billed; spot only when allowed")
    if s.preset:
        out.append(f"preset {s.preset.name}: {s.preset.summary}")
    return tuple(out)

"""One candidate plan: its scenario, its evaluation through the pipeline (memory once, then speed),
and the check of the user's limits that makes it feasible or a miss."""
from __future__ import annotations

import bisect
import dataclasses
from typing import Any, Mapping

from .. import pipeline
from ..estimate.results import MemoryEstimate
from ..scenario import Scenario, scenario_from_dict
from .constraints import check_money, check_serving, check_time
from .plan import Cand, Rejection
from .pricing import cost_block
from .state import Search

# the fields of a training layout that shape its memory (memory does not depend on the GPU type)
TRAIN_MEMORY_KEY = (("tp", "pp", "cp", "ep", "dp", "zero", "offload", "shard_group"),
                    ("method", "precision", "attention", "recompute", "micro_batch", "optimizer"))


# ---- scenarios ----------------------------------------------------------------------------------

def framework_for(s: Search, par: Mapping[str, Any]) -> str | None:
    """The framework the search prefers for a layout when the user named none: HF Trainer/accelerate
    (None: the scenario default) shards data only, so a model-parallel layout runs on Megatron-LM
    first (frameworks.py lists every framework the search tries)."""
    if s.space.task == "infer" or "framework" in s.space.base or s.space.base.get("tool"):
        return None
    if par.get("tp", 1) > 1 or par.get("pp", 1) > 1 or par.get("cp", 1) > 1:
        return "megatron"
    return None


def build(s: Search, gpu: Any, count: int, gpn: int, par: dict, section: dict) -> Scenario:
    """A validated candidate scenario."""
    base = s.space.base
    data = {k: v for k, v in base.items() if not k.startswith("_") and k not in ("train", "infer", "cost")}
    hw = {"gpu": gpu.id, "count": count, "gpus_per_node": gpn}
    if base.get("_network"):
        hw["network"] = base["_network"]
    if base.get("_profile") and s.params_for(gpu)[1]:
        hw["profile"] = base["_profile"]       # the profile applies to the GPU it was measured on only
    data["hardware"] = hw
    data["parallel"] = {**base.get("_parallel_rest", {}), **par}
    data["cost"] = cost_block(s, gpu.id)
    sec = "infer" if s.space.task == "infer" else "train"
    data[sec] = {**base.get(sec, {}), **section}
    return scenario_from_dict(data, "(recommend candidate)")


def fast(s: Search, gpu: Any, count: int, gpn: int, par: dict, section: dict,
         framework: str | None = None) -> Scenario:
    """Like `build` without re-validation: copies a validated template (the search has already checked
    every value it sets). Plans that are shown are re-validated in plan.build_plan. `framework`: the
    framework the search chose (None: the scenario's own)."""
    tmpl = s.cache.templates.get(gpu.id)
    if tmpl is None:
        tmpl = s.cache.templates[gpu.id] = build(s, gpu, 1, gpn, {}, {})
    sec = "infer" if s.space.task == "infer" else "train"
    update = {"hardware": tmpl.hardware.model_copy(update={"count": count, "gpus_per_node": gpn}),
              "parallel": tmpl.parallel.model_copy(update=par),
              sec: getattr(tmpl, sec).model_copy(update=section)}
    if framework:
        update["framework"] = framework
    return tmpl.model_copy(update=update)


def layout_text(par: Mapping[str, Any], extra: Mapping[str, Any] = ()) -> str:
    bits = [f"{k}={par[k]}" for k in ("tp", "pp", "cp", "ep") if par.get(k, 1) != 1]
    if "dp" in par and par["dp"] != 1:
        bits.append(f"dp={par['dp']}")
    if par.get("zero"):
        bits.append(f"zero={par['zero']}")
    if par.get("shard_group") and par.get("dp") not in (None, par["shard_group"]):
        bits.append(f"shard_group={par['shard_group']}")
    if par.get("offload", "none") != "none":
        bits.append(f"offload={par['offload']}")
    bits.extend(f"{k}={v}" for k, v in dict(extra).items())
    return ", ".join(bits)


# ---- evaluation through the pipeline ----------------------------------------------------------

def train_memory(s: Search, gpu: Any, count: int, gpn: int, par: dict, section: dict,
                 framework: str | None = None) -> MemoryEstimate:
    """The memory of a training layout, estimated once per distinct layout and GPU capacity: the allocations
    do not depend on the GPU type, but the caching allocator's stranded reserve is capped at the headroom the
    capacity leaves (estimate/memory.py `_finish`), so a layout estimated on a card it does not fit must not
    stand for a larger card."""
    key = (tuple(par.get(k) for k in TRAIN_MEMORY_KEY[0]) + tuple(section[k] for k in TRAIN_MEMORY_KEY[1])
           + (section.get("global_batch"), count > 1, framework, int(gpu.usable_memory_bytes)))
    mem = s.cache.memory.get(key)
    if mem is None:
        mem = s.cache.memory[key] = memory(s, fast(s, gpu, count, gpn, par, section, framework), gpu)
    return mem


def for_gpu(mem: MemoryEstimate, gpu: Any) -> MemoryEstimate:
    """A training memory estimate with `gpu`'s capacity (the only GPU-dependent field)."""
    if mem.capacity_bytes_per_gpu == int(gpu.usable_memory_bytes):
        return mem
    return dataclasses.replace(mem, capacity_bytes_per_gpu=int(gpu.usable_memory_bytes))


def memory(s: Search, scn: Scenario, gpu: Any) -> MemoryEstimate:
    s.tally.memory_evaluations += 1
    return pipeline.memory(s.resolved(scn, gpu))


def performance(s: Search, scn: Scenario, gpu: Any, mem: MemoryEstimate) -> Any:
    s.tally.speed_evaluations += 1
    return pipeline.performance(s.resolved(scn, gpu), mem)


# ---- feasibility ----------------------------------------------------------------------------------

def values(perf: Any, cost: Any, count: int, task: str, output_len: int, has_target: bool):
    """(cost value, time value, $ per million tokens) that the ranking compares (rank.py)."""
    if task == "infer":
        t = None if perf.ttft_s is None or perf.tpot_s is None else perf.ttft_s + output_len * perf.tpot_s
        cv = cost.usd_per_hour if has_target else cost.usd_per_million_tokens
        return cv, t, cost.usd_per_million_tokens
    tps = (perf.tokens_per_s_per_gpu or 0.0) * count
    t = perf.time_to_train_s if perf.time_to_train_s else (1e9 / tps if tps else None)
    cv = cost.usd_total if cost.usd_total is not None else cost.usd_per_million_tokens
    return cv, t, cost.usd_per_million_tokens


def limit_reason(s: Search, cand: Cand) -> str | None:
    cons = s.cons
    if cand.time_value is None:
        return "the speed model could not time it"
    if s.space.task != "infer":
        reason = check_time(cons, cand.perf.time_to_train_s)
    else:
        reason = check_serving(cons, cand.perf.ttft_s, cand.perf.tpot_s)
    if reason is None and (cons.budget_usd or cons.budget_usd_per_hour) and cand.cost.usd_per_hour is None:
        reason = "has no price in the catalog, so the budget cannot be checked (set cost.usd_per_gpu_hour)"
    return reason or check_money(cons, cand.cost.usd_per_hour, cand.cost.usd_total)


def accept(s: Search, cand: Cand) -> None:
    """Keep a candidate that meets every limit; otherwise record how near it came."""
    t = s.tally
    reason = limit_reason(s, cand)
    if reason is None and cand.cost.usd_per_hour is None and s.objective != "fastest":
        reason = (f"no price for {cand.gpu.id}: no rentable offering matches and no launch price is known "
                  "(set cost.usd_per_gpu_hour or cost.capex_usd_per_gpu)")
        t.miss(cand.gpu.id, 1, 0, Rejection(cand.summary, reason, "price", cand.gpu.id, cand.count))
        return
    if reason is not None:
        t.miss(cand.gpu.id, 3, closeness(s, cand), Rejection(cand.summary, reason, "constraint", cand.gpu.id,
                                                             cand.count))
        return
    t.feasible.append(cand)
    if cand.cost_value is not None and cand.time_value is not None:
        t.add_to_front(cand.cost_value, cand.time_value)
    first = {"cheapest": cand.cost_value, "fastest": cand.time_value, "cost_per_token": cand.usd_per_m}.get(
        s.objective, cand.cost_value)
    if first is not None:
        first *= cand.pref
        if cand.group not in t.group_best or first < t.group_best[cand.group]:
            t.group_best[cand.group] = first
        best = t.group_top.setdefault(cand.group, [])
        bisect.insort(best, first)
        del best[s.top:]


def closeness(s: Search, cand: Cand) -> float:
    """How near a candidate is to meeting the limits it misses (1 = meets them)."""
    c, perf, cost = s.cons, cand.perf, cand.cost
    pairs = ((c.deadline_s, perf.time_to_train_s), (c.budget_usd, cost.usd_total),
             (c.budget_usd_per_hour, cost.usd_per_hour), (c.tpot_s, perf.tpot_s), (c.ttft_s, perf.ttft_s))
    ratios = [limit / got for limit, got in pairs if limit and got]
    return min(ratios) if ratios else 0.0

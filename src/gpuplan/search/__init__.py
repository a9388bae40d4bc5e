"""Search: which GPUs, how many, configured how (issue 6), honouring software fit and use-case
presets (issue 10). `recommend` ranks plans, `compare` sets GPUs side by side, `whatif` prices
each memory-saving technique.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..scenario import Scenario
from .constraints import Constraints
from .presets import PRESETS, Preset, get_preset
from .recommend import Plan, Recommendation, Rejection, is_rl, load_partial, recommend
from .whatif import whatif

__all__ = ["Constraints", "PRESETS", "Plan", "Preset", "Recommendation", "Rejection", "compare", "get_preset",
           "load_partial", "recommend", "whatif"]


def compare_record(row: Mapping[str, Any], task: str) -> dict[str, Any]:
    """One compare row as the CLI's --json and the web's POST /api/compare both give it: serving throughput under
    the name every other answer uses (output_tokens_per_s); training throughput as tokens_per_s, all GPUs of the plan
    together. (The web gave the serving rows as tokens_per_s while the CLI said output_tokens_per_s.)"""
    out = dict(row)
    if task == "infer":
        out["output_tokens_per_s"] = out.pop("tokens_per_s")
        out["output_tokens_per_s_per_watt"] = out.pop("tokens_per_s_per_watt")
    return out


def compare(scenario: Scenario | Mapping[str, Any] | str, gpus: Sequence[str], **kw: Any) -> list[dict[str, Any]]:
    """One row per GPU for the same workload: does it fit (with the best layout the search finds at the
    scenario's GPU count, or at any count when none is given), tokens/s, $/M tokens, tokens/s per watt.

    An RL scenario (grpo, ppo, rloo) gives each GPU type's cheapest rollout/training placement at its GPU count
    instead (rl_search.compare_rl; keywords steps, allow_async, max_placements).

    Rows: gpu, fits, count, plan, peak_bytes_per_gpu, capacity_bytes_per_gpu, tokens_per_s,
    usd_per_hour, usd_per_million_tokens, tokens_per_s_per_watt, reason, uncertainty (the plan's memory and
    speed error bars, as `estimate` gives them; None without a plan).
    """
    from ..errors import InputError
    from ..hardware import get_gpu
    from .guard import check_call
    from .partial import _partial
    for name in ("top", "gpus"):
        if name in kw:
            raise InputError(f"compare argument '{name}'", "is set by compare itself (one plan per listed GPU).",
                             f"leave out {name}; list the GPUs to compare instead.")
    data = _partial(scenario)
    if is_rl(data):      # an RL job: each GPU type's cheapest rollout/training placement (rl_search.compare_rl)
        from .rl_search import compare_rl, refuse_unapplied
        rl_kw = {k: kw.pop(k) for k in ("steps", "allow_async", "max_placements") if k in kw}
        refuse_unapplied("compare on an RL scenario", [k for k, v in kw.items() if v is not None and k != "progress"
                                                       and not (k == "objective" and v == "cheapest")],
                         data, needs_gpu=False)
        return compare_rl(data, gpus, **rl_kw)
    check_call(top=1, deadline_s=kw.get("deadline_s"), gpus=gpus, progress=kw.get("progress"))
    rows = []
    for name in gpus:
        gpu = get_gpu(name)
        rec = recommend(data, gpus=[gpu.id], top=1, **kw)
        row: dict[str, Any] = {"gpu": gpu.id, "fits": bool(rec.plans), "count": None, "plan": None,
                               "peak_bytes_per_gpu": None, "capacity_bytes_per_gpu": int(gpu.usable_memory_bytes),
                               "tokens_per_s": None, "usd_per_hour": None, "usd_per_million_tokens": None,
                               "tokens_per_s_per_watt": None, "reason": None, "uncertainty": None}
        if rec.plans:
            p = rec.plans[0]
            perf, cost, mem = p.estimate["performance"], p.estimate["cost"], p.estimate["memory"]
            tps = perf.get("output_tokens_per_s") if rec.task == "infer" else \
                (perf.get("tokens_per_s_per_gpu") or 0.0) * p.count
            watts = (gpu.tdp_w or 0.0) * p.count
            row.update(count=p.count, plan=p.summary, peak_bytes_per_gpu=mem["peak_bytes_per_gpu"],
                       tokens_per_s=tps, usd_per_hour=cost["usd_per_hour"],
                       usd_per_million_tokens=cost["usd_per_million_tokens"],
                       tokens_per_s_per_watt=(tps / watts) if (tps and watts) else None,
                       uncertainty={"memory": mem.get("uncertainty"), "speed": perf.get("uncertainty")})
        else:
            reasons = [r for r in rec.rejected if r.gpu == gpu.id] or list(rec.rejected)
            row["reason"] = reasons[0].reason if reasons else "no feasible plan"
        rows.append(row)
    return rows

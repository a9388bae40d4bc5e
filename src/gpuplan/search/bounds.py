"""Lower bounds and pruning: what no plan on n x GPU can beat, so whole GPU counts and layouts are
skipped without being evaluated (docs/recommend.md §2)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from .constraints import check_money, check_time
from .plan import Rejection
from .pricing import hourly

if TYPE_CHECKING:
    from .state import Search

def eta_max(params: Mapping[str, Any], table: str = "matmul") -> float:
    """The largest efficiency the speed model can assign (bounds must not exceed it)."""
    vals = []
    for fam in params[table].values():
        vals.extend(float(v) for v in (fam.values() if isinstance(fam, Mapping) else [fam]))
    return min(1.0, max(vals)) if vals else 1.0


def etas(s: Search, gpu: Any) -> tuple[float, float]:
    """(matmul, attention) efficiency ceilings of the speed parameters used for `gpu`."""
    hit = s.cache.eta.get(gpu.id)
    if hit is None:
        params = s.params_for(gpu)[0]
        hit = s.cache.eta[gpu.id] = (eta_max(params), eta_max(params, "attention"))
    return hit


def lower_bounds(s: Search, gpu: Any, count: int, method: str, precision: str, seq_len: int):
    """Lower bounds on (cost value, time value, $/M tokens) of any plan on `count` x `gpu`, and its $/h:
    the matmul FLOPs alone at the best matmul efficiency the speed model can assign (no communication,
    no attention, no bubble). Valid for every layout and technique. None when it has no price."""
    from ..estimate.flops import training_flops_per_token
    from ..estimate.speed import peak_flops
    e_mm, e_attn = etas(s, gpu)
    # packed rows (train.document_len) attend per document at most: the shorter span keeps the bound a bound
    doc = (s.space.base.get("train") or {}).get("document_len")
    span = min(seq_len, int(doc)) if doc else seq_len
    fkey = (method, span, e_mm, e_attn)
    f = s.cache.flops.get(fkey)
    if f is None:
        fl = training_flops_per_token(s.model, span, "none", method)
        f = s.cache.flops[fkey] = (fl.matmul_forward * (3.0 if method == "full" else 2.0)
                                   + 3.0 * fl.attention_forward * e_mm / e_attn)
    price = hourly(s, gpu, count)
    if price is None:
        return None
    try:
        peak = peak_flops(gpu, {"fp32": "fp32", "fp8": "fp8"}.get(precision, precision))
    except ValueError:          # the GPU lists no tensor peak: no bound (the speed model says why)
        return None
    tps_ub = count * peak * e_mm / f
    tokens = s.space.base.get("train", {}).get("tokens")
    t_lb = (tokens or 1e9) / tps_ub
    upm_lb = price / (tps_ub * 3600.0) * 1e6
    cost_lb = price * t_lb / 3600.0 if tokens else upm_lb
    return cost_lb, t_lb, upm_lb, price


def pruned(s: Search, gpu: Any, count: int, method: str, precision: str, seq_len: int) -> bool:
    """True (and the miss recorded) when no plan on `count` x `gpu` can meet the limits or matter."""
    b = lower_bounds(s, gpu, count, method, precision, seq_len)
    if b is None:
        return False
    cost_lb, t_lb, upm_lb, price = b
    c, t = s.cons, s.tally
    tokens = s.space.base.get("train", {}).get("tokens")
    label = f"{count} x {gpu.id}" + (f" [{method}]" if method != "full" else "")
    if c.deadline_s is not None and tokens and t_lb > c.deadline_s:
        reason = check_time(c, t_lb).replace("misses the deadline by", "misses the deadline by at least") \
            .replace("(takes", "(takes at least")
        t.miss(gpu.id, 4, c.deadline_s / t_lb, Rejection(label, reason, "constraint", gpu.id, count))
        return True
    if c.budget_usd_per_hour is not None and price > c.budget_usd_per_hour:
        t.miss(gpu.id, 4, c.budget_usd_per_hour / price, Rejection(label, check_money(c, price, None),
                                                                  "constraint", gpu.id, count))
        return True
    if c.budget_usd is not None and tokens and cost_lb > c.budget_usd:
        t.miss(gpu.id, 4, c.budget_usd / cost_lb, Rejection(label, "at least " + check_money(c, None, cost_lb),
                                                            "constraint", gpu.id, count))
        return True
    return hopeless(s, cost_lb, t_lb, upm_lb, method, (gpu.id, method))


def pipeline_pruned(s: Search, gpu: Any, count: int, method: str, precision: str, seq_len: int, pp: int,
                    microbatches: int, vpp: int) -> bool:
    """True (and the miss recorded) when no plan with a `pp`-stage pipeline running `microbatches`
    micro-batches per step on `count` x `gpu` can meet the deadline or matter: the speed model's step
    is at least (m + (pp - 1) / vpp) micro-batch times (estimate/speed.py train_performance), so the
    count's lower bounds grow by 1 + (pp - 1) / (vpp x m) (the pipeline bubble)."""
    b = lower_bounds(s, gpu, count, method, precision, seq_len)
    if b is None or pp <= 1:
        return False
    f = 1.0 + (pp - 1) / (vpp * max(1, microbatches))
    cost_lb, t_lb, upm_lb = b[0] * f, b[1] * f, b[2] * f
    c = s.cons
    tokens = s.space.base.get("train", {}).get("tokens")
    if c.deadline_s is not None and tokens and t_lb > c.deadline_s:
        label = f"{count} x {gpu.id} (pp={pp}, {microbatches} micro-batches per step)"
        reason = check_time(c, t_lb).replace("misses the deadline by", "misses the deadline by at least") \
            .replace("(takes", "(takes at least")
        s.tally.miss(gpu.id, 4, c.deadline_s / t_lb, Rejection(label, reason, "constraint", gpu.id, count))
        return True
    if c.budget_usd is not None and tokens and cost_lb > c.budget_usd:
        return True
    return hopeless(s, cost_lb, t_lb, upm_lb, method, (gpu.id, method))


def candidate_hopeless(s: Search, gpu: Any, count: int, method: str, precision: str, seq_len: int, pp: int,
                       microbatches: int, vpp: int) -> bool:
    """True when one candidate, a `pp`-stage pipeline running `microbatches` micro-batches per step,
    is bounded below by a plan already found (the pipeline bound of `pipeline_pruned` at this
    candidate's own micro-batch count; records nothing: the candidate is simply not timed)."""
    b = lower_bounds(s, gpu, count, method, precision, seq_len)
    if b is None:
        return False
    f = 1.0 + (pp - 1) / (vpp * max(1, microbatches)) if pp > 1 else 1.0
    return hopeless(s, b[0] * f, b[1] * f, b[2] * f, method, (gpu.id, method))


def hopeless(s: Search, cost_lb: float, t_lb: float, upm_lb: float, method: str, group: tuple) -> bool:
    """True when plans bounded below by these values are dominated on the cost/time front by a plan
    already found and cannot enter the top N (plan.ranked: the best plan of each group, then the
    next best plans of any group up to N). They cannot when N groups already have a better best plan
    (then the top N are those groups' best plans), or when N plans of their own group are better
    (then they are neither their group's best nor among the next best)."""
    if not any(fc <= cost_lb and ft <= t_lb for fc, ft in s.tally.front):
        return False
    if s.objective == "weighted":
        return True
    first = {"cheapest": cost_lb, "fastest": t_lb, "cost_per_token": upm_lb}[s.objective] * s.pref(method=method)
    best = sorted(s.tally.group_best.values())
    mine = s.tally.group_top.get(group, [])
    return (len(best) >= s.top and first >= best[s.top - 1]) or (len(mine) >= s.top and first >= mine[s.top - 1])


def promising_first(s: Search, gpus: list) -> list:
    """Search GPUs with the most matmul FLOP/s per rented dollar first, so the bounds bite early."""
    from ..estimate.speed import peak_flops

    def key(g: Any) -> tuple:
        price = hourly(s, g, 1) or hourly(s, g, 8)
        try:
            peak = peak_flops(g, "bf16") if price else 0.0
        except ValueError:      # no tensor peak listed
            peak = 0.0
        return (0, price / peak) if price and peak else (1, 0.0)
    return sorted(gpus, key=key)


def serving_hopeless(s: Search, usd_per_hour_lb: float, t_lb: float, pref: float, group: tuple) -> bool:
    """`hopeless` for a serving layout sized by the load simulator, with strict inequalities (a plan that could tie
    one already found is kept): True when a plan on the front found so far is cheaper and faster than these lower
    bounds, and the plan cannot enter the top N (N groups, or N plans of its own group, are strictly
    better). Only for cheapest and fastest: a weighted score is normalised by the best values of the plans found at
    the end, and cost_per_token has no $/M bound here, so those searches size every layout."""
    if s.objective not in ("cheapest", "fastest"):
        return False
    if not any(fc < usd_per_hour_lb and ft < t_lb for fc, ft in s.tally.front):
        return False
    first = (usd_per_hour_lb if s.objective == "cheapest" else t_lb) * pref
    best = sorted(s.tally.group_best.values())
    mine = s.tally.group_top.get(group, [])
    return (len(best) >= s.top and first > best[s.top - 1]) or (len(mine) >= s.top and first > mine[s.top - 1])

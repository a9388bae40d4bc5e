"""The recommendation search: GPUs x counts x layouts x techniques, memory first, then speed and
cost for what fits (docs/recommend.md §2).

How it stays fast (a 70B pre-training search over the catalog up to 4,096 GPUs in well under a
second on two cores):
* Training memory does not depend on the GPU type, only on the layout and techniques, so each
  distinct (layout, techniques) is estimated once and compared with every GPU's capacity.
* Techniques that cost time (recompute, higher ZeRO stage, offload, 8-bit optimizer states, smaller
  micro-batches) are tried from the cheapest up; once a combination fits, every combination that is
  at least as slow on every axis is skipped, and only the non-dominated fitting ones are timed.
* For each tensor-parallel size the pipeline depth grows only until a plan fits without recompute.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import GpuplanError, InputError
from ..models import get_model
from ..scenario import Scenario, scenario_from_dict
from ..units import GiB
from . import space as S
from .constraints import Constraints, check_gpus, check_money, check_serving, check_time, memory_reason
from .partial import _partial, _validate_fixed, json_copy, load_partial
from .presets import Preset, get_preset, gpu_allowed
from .rank import pareto_front, parse_objective, score_fn

ENGINE_KEY = {"llama.cpp": "llamacpp"}
TRAIN_ENGINE = {"megatron": "megatron", "deepspeed": "deepspeed", "torchtitan": "fsdp", "hf": "pytorch"}
OPT_RANK = {"adamw": 0, "lion": 0, "sgd": 0, "adafactor": 0, "adamw-8bit": 1}
PREFERENCE_STEP = 0.15


# ---- public records ----------------------------------------------------------------------------------

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

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "gpu": self.gpu, "count": self.count, "summary": self.summary,
                "scenario": self.scenario.model_dump(mode="json", exclude_none=True),
                "estimate": self.estimate, "cost_value": self.cost_value, "time_value": self.time_value,
                "why": list(self.why), "warnings": list(self.warnings)}


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
                "task": self.task, "assumptions": list(self.assumptions), "stats": dict(self.stats)}


# ---- internal candidate --------------------------------------------------------------------------------

@dataclass
class _Cand:
    gpu: Any
    count: int
    scn: Scenario
    peak: int
    perf: Any
    cost: Any
    cost_value: float | None
    time_value: float | None
    usd_per_m: float | None
    group: tuple
    summary: str
    pref: float = 1.0
    warnings: tuple[str, ...] = ()


@dataclass
class _Ctx:
    model: Any
    space: S.Space
    cons: Constraints
    preset: Preset | None
    objective: str
    weights: dict[str, float]
    max_gpus: int
    params: Any = None
    mem_cache: dict = field(default_factory=dict)
    feasible: list = field(default_factory=list)
    misses: dict = field(default_factory=dict)          # gpu id -> [(priority, closeness, Rejection)]
    rejected: list = field(default_factory=list)
    n_mem: int = 0
    n_layouts: int = 0
    n_speed: int = 0
    gpus_done: int = 0
    gpus_total: int = 0
    progress: Callable[[str], None] | None = None
    t0: float = 0.0
    seen_named: set = field(default_factory=set)
    price_cache: dict = field(default_factory=dict)
    flops_cache: dict = field(default_factory=dict)
    front: list = field(default_factory=list)           # (cost, time) of the Pareto front found so far
    group_best: dict = field(default_factory=dict)      # plan group -> best first ranking component
    top: int = 10
    eta_max: float = 1.0
    eta_attn_max: float = 1.0
    network: dict = field(default_factory=dict)
    templates: dict = field(default_factory=dict)
    default_deadline: bool = False
    limited: dict = field(default_factory=dict)          # gpu id -> software-support warnings (training)

    def miss(self, gpu_id: str, priority: int, closeness: float, rej: Rejection) -> None:
        self.misses.setdefault(gpu_id, []).append((priority, closeness, rej))

    def named_reject(self, rej: Rejection) -> None:
        key = (rej.option, rej.reason)
        if key not in self.seen_named:
            self.seen_named.add(key)
            self.rejected.append(rej)


# ---- helpers ---------------------------------------------------------------------------------------------

def _speed(scn: Scenario, model: Any, gpu: Any, params: Any, **kw: Any):
    from ..estimate.speed import estimate_performance
    kw = {k: v for k, v in {**kw, "params": params}.items() if v is not None}
    return estimate_performance(scn, model, gpu, **kw)


def _net(ctx: _Ctx, gpu: Any) -> Any:
    if gpu.id not in ctx.network:
        try:
            from ..hardware import default_network_for, get_network
            net = ctx.space.base.get("_network")
            ctx.network[gpu.id] = get_network(net) if net else default_network_for(gpu)
        except Exception:
            ctx.network[gpu.id] = None
    return ctx.network[gpu.id]


def _efficiency_params():
    try:
        from ..estimate.speed import load_efficiency
        return load_efficiency()
    except Exception:       # an older speed module without the hook
        return None


def _node_size(space: S.Space, gpu: Any) -> int:
    if space.gpus_per_node:
        return int(space.gpus_per_node)
    try:
        from ..hardware import default_node_for
        return max(1, int(default_node_for(gpu).gpus_per_node))
    except Exception:
        return max(1, min(8, int(getattr(gpu, "scale_up_max_gpus", 1) or 1)))


def _software_problems(gpu: Any, **kw) -> list:
    from ..hardware import software
    try:
        return software.check(gpu, **kw)
    except GpuplanError:
        return []


def _first_error(problems: list) -> Any:
    return next((p for p in problems if p.severity == "error"), None)


def _layout_text(par: Mapping[str, Any], extra: Mapping[str, Any] = ()) -> str:
    bits = []
    for k in ("tp", "pp", "cp", "ep"):
        if par.get(k, 1) != 1:
            bits.append(f"{k}={par[k]}")
    if "dp" in par and par["dp"] != 1:
        bits.append(f"dp={par['dp']}")
    if par.get("zero"):
        bits.append(f"zero={par['zero']}")
    if par.get("offload", "none") != "none":
        bits.append(f"offload={par['offload']}")
    for k, v in dict(extra).items():
        bits.append(f"{k}={v}")
    return ", ".join(bits)


def _cost_block(ctx: _Ctx, gpu_id: str) -> dict[str, Any]:
    cost = dict(ctx.space.base.get("cost") or {})
    if ctx.cons.providers:
        cost["providers"] = list(ctx.cons.providers)
    if ctx.cons.spot is not None:
        cost["spot"] = ctx.cons.spot
    if ctx.cons.owned and gpu_id in ctx.cons.owned:
        cost["basis"] = "own"
    elif "basis" not in cost:
        # GPUs you do not own are rented: ranking rent against amortised purchase prices would
        # compare different things (buying shows up as the break-even instead)
        cost["basis"] = ctx.preset.cost_basis if ctx.preset and ctx.preset.cost_basis else "rent"
    return cost


def _fast(ctx: _Ctx, gpu: Any, count: int, gpn: int, par: dict, section: dict) -> Scenario:
    """Like _build but without re-validation: copies a validated template (the search has already
    checked every value it sets). Plans that are shown are re-validated in _plan."""
    tmpl = ctx.templates.get(gpu.id)
    if tmpl is None:
        tmpl = ctx.templates[gpu.id] = _build(ctx, gpu, 1, gpn, {}, {})
    sec_name = "infer" if ctx.space.task == "infer" else "train"
    update = {"hardware": tmpl.hardware.model_copy(update={"count": count, "gpus_per_node": gpn}),
              "parallel": tmpl.parallel.model_copy(update=par),
              sec_name: getattr(tmpl, sec_name).model_copy(update=section)}
    framework = _framework_for(ctx, par)
    if framework:
        update["framework"] = framework
    return tmpl.model_copy(update=update)


def _framework_for(ctx: _Ctx, par: dict) -> str | None:
    """Training plans must be launchable: HF Trainer/accelerate (the default framework) shards data
    (DDP/FSDP/ZeRO) but has no pipeline or context parallelism, so a full-training plan that needs
    model parallelism runs on Megatron-LM unless the user chose a framework."""
    if ctx.space.task == "infer" or "framework" in ctx.space.base:
        return None
    if par.get("tp", 1) > 1 or par.get("pp", 1) > 1 or par.get("cp", 1) > 1:
        return "megatron"
    return None


def _build(ctx: _Ctx, gpu: Any, count: int, gpn: int, par: dict, section: dict) -> Scenario:
    base = ctx.space.base
    data = {k: v for k, v in base.items() if not k.startswith("_") and k not in ("train", "infer", "cost")}
    hw = {"gpu": gpu.id, "count": count, "gpus_per_node": gpn}
    if base.get("_network"):
        hw["network"] = base["_network"]
    data["hardware"] = hw
    data["parallel"] = {**base.get("_parallel_rest", {}), **par}
    data["cost"] = _cost_block(ctx, gpu.id)
    if ctx.space.task == "infer":
        data["infer"] = {**base.get("infer", {}), **section}
    else:
        data["train"] = {**base.get("train", {}), **section}
    return scenario_from_dict(data, "(recommend candidate)")


def _values(perf: Any, cost: Any, count: int, task: str, output_len: int, has_target: bool):
    if task == "infer":
        t = None if perf.ttft_s is None or perf.tpot_s is None else perf.ttft_s + output_len * perf.tpot_s
        cv = cost.usd_per_hour if has_target else cost.usd_per_million_tokens
        return cv, t, cost.usd_per_million_tokens
    tps = (perf.tokens_per_s_per_gpu or 0.0) * count
    t = perf.time_to_train_s if perf.time_to_train_s else (1e9 / tps if tps else None)
    cv = cost.usd_total if cost.usd_total is not None else cost.usd_per_million_tokens
    return cv, t, cost.usd_per_million_tokens


def _pref(ctx: _Ctx, **values: Any) -> float:
    if not ctx.preset or not ctx.preset.prefer:
        return 1.0
    mult = 1.0
    for k, order in ctx.preset.prefer.items():
        if k in values and values[k] in order:
            mult *= 1.0 + PREFERENCE_STEP * order.index(values[k])
    return mult


# ---- training ---------------------------------------------------------------------------------------

def _train_gpu(ctx: _Ctx, gpu: Any) -> None:
    sp, cons = ctx.space, ctx.cons
    tr_base = sp.base.get("train", {})
    seq_len = int(tr_base.get("seq_len", 2048))
    gb = int(tr_base.get("global_batch") or S.default_global_batch(sp.task, seq_len))
    framework = sp.base.get("framework", "hf")

    # software fit: engine, numeric format, attention kernel
    eng_problems = _software_problems(gpu, engine=TRAIN_ENGINE.get(framework, "pytorch"))
    eng_err = _first_error(eng_problems)
    if eng_err:
        ctx.miss(gpu.id, 1, 0, Rejection(gpu.id, eng_err.message, "software", gpu.id, alternative=eng_err.alternative))
        return
    ctx.limited[gpu.id] = tuple(p.message for p in eng_problems)
    precision = attention = None
    reasons = []
    prec_opts = sp.train["precision"] if not sp.train.get("_precision_defaulted") else ("bf16", "fp16")
    for p in prec_opts:
        problems = _software_problems(gpu, dtype=p)
        err = _first_error(problems) or (problems[0] if (p == "fp8" and problems) else None)  # no fp8 training emulation
        if err is None and (not problems or p == prec_opts[-1] or not sp.train.get("_precision_defaulted")):
            precision = p
            break
        if err is not None:
            reasons.append(err)
    if precision is None and not reasons:
        precision = prec_opts[0]
    attn_opts = sp.train["attention"] if not sp.train.get("_attention_defaulted") else ("flash", "sdpa")
    for a in attn_opts:
        err = _first_error(_software_problems(gpu, attention=a))
        if err is None:
            attention = a
            break
        reasons.append(err)
    if precision is None or attention is None:
        err = reasons[0]
        ctx.miss(gpu.id, 1, 0, Rejection(gpu.id, err.message, "software", gpu.id, alternative=err.alternative))
        return
    stack = getattr(_support(gpu), "stack", "cuda")

    gpn = _node_size(sp, gpu)
    cap = int(gpu.usable_memory_bytes * (1 - (cons.min_headroom or 0.0)))
    counts = _counts(ctx, gpu, gpn)
    methods = sp.options("train", "method", ("full",))
    opts = sp.options("train", "optimizer", ("adamw",))
    recs = sp.options("train", "recompute", S.TRAIN_OPTIONS["recompute"])
    user_mbs = sp.train.get("micro_batch")
    has_price = _has_price(ctx, gpu)

    if not has_price and ctx.objective != "fastest":
        ctx.miss(gpu.id, 3, 0, Rejection(gpu.id, _no_price_reason(ctx, gpu), "price", gpu.id,
                                         alternative="set cost.usd_per_gpu_hour, or list it under constraints.owned"))
        return
    for method in methods:
        if method == "qlora" and stack not in ("cuda", "rocm"):
            ctx.miss(gpu.id, 1, 0, Rejection(f"{gpu.id} qlora", f"QLoRA (bitsandbytes) needs CUDA or ROCm; "
                                             f"{gpu.id} runs {stack}", "software", gpu.id,
                                             alternative="use LoRA on a 16-bit base"))
            continue
        for count in counts:
            lim = check_gpus(cons, gpu.id, count)
            if lim:
                continue
            if _pruned(ctx, gpu, count, method, precision, seq_len):
                continue
            splits = sorted(_model_par(ctx, gpu, count, gpn, seq_len), key=lambda x: -x[0])
            if method != "full" and not sp.parallel["tp"]:
                # peft adapters train under HF/accelerate: data parallel (DDP/FSDP/ZeRO) only
                splits = [x for x in splits if x[0] == 1 and x[1] == 1] or splits[-1:]
            # screen with the widest tensor-parallel split (least memory); try the others only when
            # the screened plan, improved by SCREEN_GAIN, could still reach the front or the top N
            n_before = len(ctx.feasible)
            for i, (tp, cp, ep) in enumerate(splits):
                if i == 1 and not sp.parallel["tp"]:
                    new = ctx.feasible[n_before:]
                    if not new and not ctx.misses.get(gpu.id):
                        break
                    if new and _screened_out(ctx, new, method):
                        break
                _train_layouts(ctx, gpu, count, gpn, cap, tp, cp, ep, gb, method, precision, attention, opts, recs,
                               user_mbs, has_price)


SCREEN_GAIN = 1.5


def _screened_out(ctx: _Ctx, cands: list, method: str) -> bool:
    best_c = min((c.cost_value for c in cands if c.cost_value is not None), default=None)
    best_t = min((c.time_value for c in cands if c.time_value is not None), default=None)
    if best_c is None or best_t is None:
        return False
    cost_lb, t_lb = best_c / SCREEN_GAIN, best_t / SCREEN_GAIN
    upm_lb = min((c.usd_per_m for c in cands if c.usd_per_m is not None), default=0.0) / SCREEN_GAIN
    return _hopeless(ctx, cost_lb, t_lb, upm_lb, method)


def _hopeless(ctx: _Ctx, cost_lb: float, t_lb: float, upm_lb: float, method: str) -> bool:
    """True when plans bounded below by these values are dominated on the cost/time front by a plan
    already found and cannot enter the top N."""
    if not any(fc <= cost_lb and ft <= t_lb for fc, ft in ctx.front):
        return False
    if ctx.objective == "weighted":
        return True
    first = {"cheapest": cost_lb, "fastest": t_lb, "cost_per_token": upm_lb}[ctx.objective]
    best = sorted(ctx.group_best.values())
    return len(best) >= ctx.top and first * _pref(ctx, method=method) >= best[ctx.top - 1]


def _train_layouts(ctx: _Ctx, gpu: Any, count: int, gpn: int, cap: int, tp: int, cp: int, ep: int, gb: int,
                   method: str, precision: str, attention: str, opts, recs, user_mbs, has_price: bool) -> None:
    sp, model = ctx.space, ctx.model
    pps = sp.parallel["pp"] or (S.powers_of_two(min(model.num_layers, count // (tp * cp))) if method == "full"
                                else [1])
    for pp in pps:
        if count % (tp * cp * pp):
            continue
        dp = count // (tp * cp * pp)
        if pp_r := S.pp_reason(model, pp):
            if sp.parallel["pp"]:
                ctx.named_reject(Rejection(f"pp={pp}", pp_r, "layout"))
            continue
        if ep > 1 and (dp * cp) % ep:
            continue
        mbs = [m for m in (user_mbs or S.TRAIN_OPTIONS["micro_batch"]) if gb % (dp * m) == 0]
        if not mbs:
            ctx.miss(gpu.id, 0, 0, Rejection(f"{gpu.id} x{count} dp={dp}",
                     f"dp={dp} x micro_batch does not divide the global batch of {gb} sequences",
                     "layout", gpu.id, count))
            continue
        ctx.n_layouts += 1
        par = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp}
        fitting = _fitting_techniques(ctx, gpu, count, gpn, cap, par, dict(
            method=method, precision=precision, attention=attention, global_batch=gb), mbs, opts, recs)
        if not fitting:
            continue
        for tech in fitting:
            _time_train(ctx, gpu, count, gpn, par, tech, precision, attention, method, has_price)
        if any(t["recompute"] == "none" and t["offload"] == "none" for t in fitting):
            break       # deeper pipelines only add bubble and p2p time


def _no_price_reason(ctx: _Ctx, gpu: Any) -> str:
    prov = ctx.cons.providers or (ctx.space.base.get("cost") or {}).get("providers")
    where = f" at {', '.join(prov)}" if prov else ""
    return f"no rental offering of {gpu.id}{where} in the price catalog, so it cannot be priced"


def _hourly(ctx: _Ctx, gpu: Any, count: int) -> float | None:
    """The headline $/h of `count` GPUs as estimate_cost will compute it (cached)."""
    key = (gpu.id, count)
    if key in ctx.price_cache:
        return ctx.price_cache[key]
    from ..estimate.cost import own_quote, rent_quotes
    from ..scenario import Cost
    block = _cost_block(ctx, gpu.id)
    cost = Cost(**block)
    price = None
    if cost.usd_per_gpu_hour is not None and cost.basis != "own":
        price = count * cost.usd_per_gpu_hour
    elif cost.basis == "own":
        own = own_quote(gpu, cost)
        price = count * own.usd_per_gpu_hour if own else None
    else:
        providers = tuple(p.strip().lower() for p in cost.providers) if cost.providers else None
        quotes = rent_quotes(gpu.id, count, providers, bool(cost.spot))
        price = quotes[0].usd_per_hour if quotes else None
        if price is None and cost.basis == "auto":
            own = own_quote(gpu, cost)
            price = count * own.usd_per_gpu_hour if own else None
    ctx.price_cache[key] = price
    return price


def _bounds(ctx: _Ctx, gpu: Any, count: int, method: str, precision: str, seq_len: int):
    """Lower bounds on (cost value, time value, $/M tokens) of any plan on `count` x `gpu`: the
    matmul FLOPs alone at the best matmul efficiency the speed model can assign (no communication,
    no attention, no bubble). Valid for every layout and technique."""
    from ..estimate.flops import training_flops_per_token
    from ..estimate.speed import peak_flops
    fkey = (method, seq_len)
    f = ctx.flops_cache.get(fkey)
    if f is None:
        fl = training_flops_per_token(ctx.model, seq_len, "none", method)
        f = fl.matmul_forward * (3.0 if method == "full" else 2.0) + 3.0 * fl.attention_forward * \
            ctx.eta_max / ctx.eta_attn_max
        ctx.flops_cache[fkey] = f
    dtype = {"fp32": "fp32", "fp8": "fp8"}.get(precision, precision)
    try:
        peak = peak_flops(gpu, dtype)
    except Exception:
        return None
    tps_ub = count * peak * ctx.eta_max / f
    tokens = ctx.space.base.get("train", {}).get("tokens")
    t_lb = (tokens or 1e9) / tps_ub
    price = _hourly(ctx, gpu, count)
    if price is None:
        return None
    upm_lb = price / (tps_ub * 3600.0) * 1e6
    cost_lb = price * t_lb / 3600.0 if tokens else upm_lb
    return cost_lb, t_lb, upm_lb, price


def _pruned(ctx: _Ctx, gpu: Any, count: int, method: str, precision: str, seq_len: int) -> bool:
    b = _bounds(ctx, gpu, count, method, precision, seq_len)
    if b is None:
        return False
    cost_lb, t_lb, upm_lb, price = b
    c = ctx.cons
    label = f"{count} x {gpu.id}" + (f" [{method}]" if method != "full" else "")
    if c.deadline_s is not None and ctx.space.base.get("train", {}).get("tokens") and t_lb > c.deadline_s:
        ctx.miss(gpu.id, 4, c.deadline_s / t_lb, Rejection(label, check_time(c, t_lb).replace(
            "misses the deadline by", "misses the deadline by at least").replace("(takes", "(takes at least"),
            "constraint", gpu.id, count))
        return True
    if c.budget_usd_per_hour is not None and price > c.budget_usd_per_hour:
        ctx.miss(gpu.id, 4, c.budget_usd_per_hour / price, Rejection(label, check_money(c, price, None),
                                                                    "constraint", gpu.id, count))
        return True
    if c.budget_usd is not None and ctx.space.base.get("train", {}).get("tokens") and cost_lb > c.budget_usd:
        ctx.miss(gpu.id, 4, c.budget_usd / cost_lb, Rejection(label, "at least " + check_money(c, None, cost_lb),
                                                              "constraint", gpu.id, count))
        return True
    return _hopeless(ctx, cost_lb, t_lb, upm_lb, method)


def _support(gpu: Any):
    try:
        from ..hardware import software
        return software.support_for(gpu)
    except Exception:
        return None


def _has_price(ctx: _Ctx, gpu: Any) -> bool:
    return _hourly(ctx, gpu, 1) is not None or _hourly(ctx, gpu, _node_size(ctx.space, gpu)) is not None


def _counts(ctx: _Ctx, gpu: Any, gpn: int) -> list[int]:
    sp, cons = ctx.space, ctx.cons
    limit = ctx.max_gpus
    if cons.owned is not None and gpu.id in cons.owned:
        limit = min(limit, cons.owned[gpu.id])
    if sp.counts:
        return [c for c in sp.counts if c <= limit] or []
    counts = S.node_aligned_counts(gpn, limit)
    if cons.owned is not None and gpu.id in cons.owned and limit not in counts:
        counts.append(limit)
    return sorted(counts)


def _model_par(ctx: _Ctx, gpu: Any, count: int, gpn: int, seq_len: int):
    sp, model, task = ctx.space, ctx.model, ctx.space.task
    if sp.parallel["tp"]:
        tps = list(sp.parallel["tp"])
    else:
        tps = [t for t in S.powers_of_two(min(gpn, count))]
    good_tps = []
    for tp in tps:
        r = S.tp_reason(model, tp, task)
        if r:
            if sp.parallel["tp"]:
                ctx.named_reject(Rejection(f"tp={tp}", r, "layout", alternative="use a tp that divides the head counts"))
            continue
        if tp > gpn and not sp.parallel["tp"]:
            continue
        good_tps.append(tp)
    cps = sp.parallel["cp"] or ([1, 2, 4, 8] if seq_len >= 32768 and task != "infer" else [1])
    eps = sp.parallel["ep"] or ([1] + [e for e in S.powers_of_two(min(model.num_experts, 64), 2)
                                      if model.num_experts % e == 0] if model.num_experts else [1])
    for tp in good_tps:
        for cp in cps:
            if r := S.cp_reason(seq_len, cp, task):
                if sp.parallel["cp"]:
                    ctx.named_reject(Rejection(f"cp={cp}", r, "layout"))
                continue
            for ep in eps:
                if r := S.ep_reason(model, ep):
                    if sp.parallel["ep"]:
                        ctx.named_reject(Rejection(f"ep={ep}", r, "layout"))
                    continue
                if count % (tp * cp) == 0:
                    yield tp, cp, ep


def _mem_peak(ctx: _Ctx, gpu: Any, count: int, gpn: int, par: dict, section: dict) -> int:
    from ..estimate.memory import estimate_memory
    key = (par["tp"], par["pp"], par["cp"], par["ep"], par["dp"], par["zero"], par["offload"], section["method"],
           section["precision"], section["attention"], section["recompute"], section["micro_batch"],
           section["optimizer"], count > 1)
    peak = ctx.mem_cache.get(key)
    if peak is None:
        scn = _fast(ctx, gpu, count, gpn, par, section)
        peak = estimate_memory(scn, ctx.model, gpu.usable_memory_bytes).peak_bytes_per_gpu
        ctx.mem_cache[key] = peak
        ctx.n_mem += 1
    return peak


def _fitting_techniques(ctx: _Ctx, gpu: Any, count: int, gpn: int, cap: int, par: dict, fixed: dict,
                        mbs: list[int], opts: Sequence[str], recs: Sequence[str]) -> list[dict]:
    """Non-dominated technique sets that fit `cap`, each with the largest micro-batch that fits."""
    sp = ctx.space
    n_shard = par["dp"] * par["cp"]
    zeros = sp.parallel["zero"] or ((0,) if n_shard == 1 else (1, 2, 3))
    if _framework_for(ctx, par) == "megatron" and not sp.parallel["zero"]:
        zeros = (0,) if n_shard == 1 else (1,)      # Megatron's distributed optimizer is ZeRO-1
    offloads = sp.parallel["offload"] or ("none", "optimizer", "optimizer+params")
    combos = []
    for rec, z, off, opt in itertools.product(recs, zeros, offloads, opts):
        if off == "optimizer+params" and z < 3 and not sp.parallel["offload"]:
            continue
        combos.append((S.RECOMPUTE_RANK[rec], z, S.OFFLOAD_RANK[off], OPT_RANK.get(opt, 0), rec, off, opt))
    combos.sort(key=lambda c: (c[2], sum(c[:4]), c))
    mbs = sorted(mbs)
    # lower bound first: the lightest combination; if even that does not fit, nothing will
    lightest = max(combos, key=lambda c: (c[2], c[1], c[0], c[3]))
    p_l = {**par, "zero": lightest[1], "offload": lightest[5]}
    s_l = dict(fixed, recompute=lightest[4], micro_batch=mbs[0], optimizer=lightest[6])
    peak_l = _mem_peak(ctx, gpu, count, gpn, p_l, s_l)
    if peak_l > cap:
        text = memory_reason(peak_l, gpu.usable_memory_bytes, ctx.cons.min_headroom)
        layout = _layout_text(p_l, {"recompute": lightest[4], "mb": mbs[0]})
        ctx.miss(gpu.id, 2, cap / peak_l, Rejection(f"{gpu.id} x{count} ({layout})", text, "memory", gpu.id, count))
        return []
    found: list[tuple] = []          # (rec_rank, zero, off_rank, opt_rank, mb)
    best_miss = None
    # offload and 8-bit optimizer states are last resorts: tried only when nothing lighter fits
    phases = sorted({(c[2], c[3]) for c in combos})
    for phase in phases:
        if found:
            break
        for combo in (c for c in combos if (c[2], c[3]) == phase):
            best_miss = _try_combo(ctx, gpu, count, gpn, cap, par, fixed, mbs, combo, found, best_miss)
    if not found and best_miss is not None:
        peak, p, section = best_miss
        text = memory_reason(peak, gpu.usable_memory_bytes, ctx.cons.min_headroom)
        layout = _layout_text(p, {"recompute": section["recompute"], "mb": section["micro_batch"]})
        ctx.miss(gpu.id, 2, cap / peak, Rejection(f"{gpu.id} x{count} ({layout})", text, "memory", gpu.id, count))
    minimal = [f for f in found if not any(
        g is not f and g[0] <= f[0] and g[1] <= f[1] and g[2] <= f[2] and g[3] <= f[3] and g[4] >= f[4]
        and g[:5] != f[:5] for g in found)]
    out = []
    seen = set()
    for f in minimal:
        # pipelines run micro-batch 1 (more micro-batches, smaller bubble: Megatron practice);
        # without a pipeline the largest micro-batch that fits (bigger GEMMs, fewer steps)
        mb = mbs[0] if par["pp"] > 1 else f[4]
        key = (f[5], f[1], f[6], f[7], mb)
        if key not in seen:
            seen.add(key)
            out.append({"recompute": f[5], "zero": f[1], "offload": f[6], "optimizer": f[7], "micro_batch": mb})
    return out


def _try_combo(ctx, gpu, count, gpn, cap, par, fixed, mbs, combo, found, best_miss):
    rr, z, orank, oprank, rec, off, opt = combo

    def covered(mb):
        return any(f[0] <= rr and f[1] <= z and f[2] <= orank and f[3] <= oprank and f[4] >= mb for f in found)
    if covered(mbs[-1]):
        return best_miss
    best_mb = None
    for mb in mbs:
        if covered(mb):
            best_mb = mb          # an at-least-as-good fitting set already covers this mb
            continue
        section = dict(fixed, recompute=rec, micro_batch=mb, optimizer=opt)
        p = {**par, "zero": z, "offload": off}
        peak = _mem_peak(ctx, gpu, count, gpn, p, section)
        if peak <= cap:
            best_mb = mb
        else:
            if best_miss is None or peak < best_miss[0]:
                best_miss = (peak, p, section)
            break
    if best_mb is not None:
        found.append((rr, z, orank, oprank, best_mb, rec, off, opt))
    return best_miss


def _time_train(ctx: _Ctx, gpu: Any, count: int, gpn: int, par: dict, tech: dict, precision: str,
                attention: str, method: str, has_price: bool) -> None:
    p = {**par, "zero": tech["zero"], "offload": tech["offload"]}
    section = {"method": method, "precision": precision, "attention": attention, "recompute": tech["recompute"],
               "micro_batch": tech["micro_batch"], "optimizer": tech["optimizer"]}
    tr_base = ctx.space.base.get("train", {})
    if not tr_base.get("global_batch"):
        section["global_batch"] = S.default_global_batch(ctx.space.task, int(tr_base.get("seq_len", 2048)))
    scn = _fast(ctx, gpu, count, gpn, p, section)
    perf = _speed(scn, ctx.model, gpu, ctx.params, network=_net(ctx, gpu))
    ctx.n_speed += 1
    cost = _quick_cost(ctx, gpu, count, perf, "train")
    cv, tv, upm = _values(perf, cost, count, "train", 0, False)
    layout = _layout_text(p, {k: v for k, v in (("recompute", tech["recompute"]), ("mb", tech["micro_batch"]))
                              if not (k == "recompute" and v == "none")})
    if tech["optimizer"] != "adamw":
        layout += f", {tech['optimizer']}"
    summary = f"{count} x {gpu.id}" + (f" [{method}]" if method != "full" else "") + (f" ({layout})" if layout else "")
    limited = ctx.limited.get(gpu.id, ())
    _accept(ctx, _Cand(gpu, count, scn, 0, perf, cost, cv, tv, upm, (gpu.id, method), summary,
                       _pref(ctx, method=method) * (LIMITED_SUPPORT_PENALTY if limited else 1.0), limited), has_price)


def _quick_cost(ctx: _Ctx, gpu: Any, count: int, perf: Any, task: str):
    """The headline numbers of estimate_cost from the cached hourly price (the full CostEstimate with
    its basis and details is built for the plans that are shown)."""
    from ..estimate.results import CostEstimate
    price = _hourly(ctx, gpu, count)
    if task == "infer":
        tps = perf.output_tokens_per_s
    else:
        tps = (perf.tokens_per_s_per_gpu or 0.0) * count
    total = price * perf.time_to_train_s / 3600.0 if (price is not None and perf.time_to_train_s) else None
    upm = price / (tps * 3600.0) * 1e6 if (price is not None and tps) else None
    return CostEstimate(usd_per_hour=price, usd_total=total, usd_per_million_tokens=upm, basis="(quick)")


def _accept(ctx: _Ctx, cand: _Cand, has_price: bool) -> None:
    cons = ctx.cons
    reason = None
    if cand.time_value is None:
        reason = "the speed model could not time it"
    if reason is None and ctx.space.task != "infer":
        reason = check_time(cons, cand.perf.time_to_train_s)
    if reason is None and ctx.space.task == "infer":
        reason = check_serving(cons, cand.perf.ttft_s, cand.perf.tpot_s)
    if reason is None and (cons.budget_usd or cons.budget_usd_per_hour) and cand.cost.usd_per_hour is None:
        reason = "has no price in the catalog, so the budget cannot be checked (set cost.usd_per_gpu_hour)"
    if reason is None:
        reason = check_money(cons, cand.cost.usd_per_hour, cand.cost.usd_total)
    if reason is None and cand.cost.usd_per_hour is None and ctx.objective != "fastest":
        reason = (f"no price for {cand.gpu.id}: no rentable offering matches and no launch price is known "
                  "(set cost.usd_per_gpu_hour or cost.capex_usd_per_gpu)")
        ctx.miss(cand.gpu.id, 1, 0, Rejection(cand.summary, reason, "price", cand.gpu.id, cand.count))
        return
    if reason is not None:
        # closeness: how near the plan is to passing (1 = passes)
        ctx.miss(cand.gpu.id, 3, _closeness(ctx, cand), Rejection(cand.summary, reason, "constraint", cand.gpu.id,
                                                                   cand.count))
        return
    ctx.feasible.append(cand)
    if cand.cost_value is not None and cand.time_value is not None:
        pt = (cand.cost_value, cand.time_value)
        if not any(fc <= pt[0] and ft <= pt[1] for fc, ft in ctx.front):
            ctx.front = [f for f in ctx.front if not (pt[0] <= f[0] and pt[1] <= f[1])] + [pt]
    first = {"cheapest": cand.cost_value, "fastest": cand.time_value, "cost_per_token": cand.usd_per_m}.get(
        ctx.objective, cand.cost_value)
    if first is not None:
        first *= cand.pref
        if cand.group not in ctx.group_best or first < ctx.group_best[cand.group]:
            ctx.group_best[cand.group] = first


def _closeness(ctx: _Ctx, cand: _Cand) -> float:
    c = ctx.cons
    ratios = []
    if c.deadline_s and cand.perf.time_to_train_s:
        ratios.append(c.deadline_s / cand.perf.time_to_train_s)
    if c.budget_usd and cand.cost.usd_total:
        ratios.append(c.budget_usd / cand.cost.usd_total)
    if c.budget_usd_per_hour and cand.cost.usd_per_hour:
        ratios.append(c.budget_usd_per_hour / cand.cost.usd_per_hour)
    if c.tpot_s and cand.perf.tpot_s:
        ratios.append(c.tpot_s / cand.perf.tpot_s)
    if c.ttft_s and cand.perf.ttft_s:
        ratios.append(c.ttft_s / cand.perf.ttft_s)
    return min(ratios) if ratios else 0.0


# ---- serving -----------------------------------------------------------------------------------------

def _infer_gpu(ctx: _Ctx, gpu: Any) -> None:
    from ..estimate.cost import estimate_cost
    from ..estimate.memory import estimate_memory
    sp, model, cons = ctx.space, ctx.model, ctx.cons
    inf_base = sp.base.get("infer", {})
    out_len = int(inf_base.get("output_len", 256))
    target = cons.requested_output_tokens_per_s(out_len)
    gpn = _node_size(sp, gpu)
    cap_headroom = 1 - (cons.min_headroom or 0.0)
    engines = sp.infer["engine"] or S.INFER_OPTIONS["engine"]
    levels = ctx.preset.engine_levels if ctx.preset else ("yes", "limited")
    has_price = _has_price(ctx, gpu)
    any_engine = False
    for engine in engines:
        problems = _software_problems(gpu, engine=ENGINE_KEY.get(engine, engine))
        err = _first_error(problems)
        if err is None and "limited" not in levels and any(p.severity == "warning" for p in problems):
            w = next(p for p in problems if p.severity == "warning")
            err = dataclasses.replace(w, message=w.message + f" (preset {ctx.preset.name} needs full support)")
        if err is not None:
            rej = Rejection(f"{engine} on {gpu.id}", err.message, "software", gpu.id, alternative=err.alternative)
            if sp.infer["engine"]:
                ctx.named_reject(rej)
            ctx.miss(gpu.id, 1, 0, rej)
            continue
        any_engine = True
        bf16_emulated = bool(_software_problems(gpu, dtype="bf16"))
        for weights in sp.options("infer", "weights", S.INFER_OPTIONS["weights"]):
            if weights == "bf16" and bf16_emulated and "weights" not in sp.named:
                weights = "fp16"        # no native bf16 (V100, T4): serve the 16-bit weights as fp16
            werr = _first_error(_software_problems(gpu, dtype=weights)) if _fmt_known(weights) else None
            if werr:
                rej = Rejection(f"{weights} weights on {gpu.id}", werr.message, "software", gpu.id,
                                alternative=werr.alternative)
                ctx.miss(gpu.id, 1, 0, rej)
                continue
            for kv in sp.options("infer", "kv_cache", S.INFER_OPTIONS["kv_cache"]):
                if kv.startswith("fp8") and _first_error(_software_problems(gpu, dtype="fp8")):
                    continue
                if kv == "bf16" and bf16_emulated and "kv_cache" not in sp.named:
                    kv = "fp16"
                tps = list(sp.parallel["tp"] or S.powers_of_two(gpn))
                pps = list(sp.parallel["pp"] or (1,))
                if engine == "llama.cpp" and not sp.parallel["tp"]:
                    tps = [1]
                for tp, pp in itertools.product(tps, pps):
                    if r := S.tp_reason(model, tp, "infer"):
                        if sp.parallel["tp"]:
                            ctx.named_reject(Rejection(f"tp={tp}", r, "layout"))
                        continue
                    if r := S.pp_reason(model, pp):
                        continue
                    group = tp * pp
                    if sp.counts and all(c % group for c in sp.counts):
                        continue
                    ctx.n_layouts += 1
                    section = {"engine": engine, "weights": weights, "kv_cache": kv}
                    par = {"tp": tp, "pp": pp}
                    scn1 = _build(ctx, gpu, group, gpn, par, section)
                    mem = estimate_memory(scn1, model, gpu.usable_memory_bytes)
                    ctx.n_mem += 1
                    cap = mem.capacity_bytes_per_gpu * cap_headroom
                    label = f"{group} x {gpu.id} ({engine}, {weights}" + (f", kv {kv}" if kv != "bf16" else "") + \
                        (f", tp={tp}" if tp > 1 else "") + (f", pp={pp}" if pp > 1 else "") + ")"
                    if mem.peak_bytes_per_gpu > cap:
                        text = memory_reason(mem.peak_bytes_per_gpu, mem.capacity_bytes_per_gpu, cons.min_headroom)
                        ctx.miss(gpu.id, 2, cap / mem.peak_bytes_per_gpu,
                                 Rejection(label, text, "memory", gpu.id, group))
                        continue
                    perf1 = _speed(scn1, model, gpu, ctx.params)
                    ctx.n_speed += 1
                    if not perf1.output_tokens_per_s:
                        ctx.miss(gpu.id, 2, 0.5, Rejection(label, "no KV-cache room left after the weights",
                                                           "memory", gpu.id, group))
                        continue
                    replicas = 1
                    if target:
                        replicas = max(1, math.ceil(target / perf1.output_tokens_per_s))
                    if sp.counts:
                        fitting = [c for c in sp.counts if c % group == 0 and c // group >= replicas]
                        if not fitting:
                            ctx.miss(gpu.id, 3, 0.5, Rejection(label, f"needs {replicas * group} GPUs for "
                                     f"{target:,.0f} output tokens/s; count fixed at {', '.join(map(str, sp.counts))}",
                                     "constraint", gpu.id, group))
                            continue
                        replicas = min(fitting) // group
                    count = replicas * group
                    if lim := check_gpus(cons, gpu.id, count) or (None if count <= ctx.max_gpus else
                                                                    f"needs {count} GPUs, more than {ctx.max_gpus}"):
                        ctx.miss(gpu.id, 3, 0.5, Rejection(label, lim, "constraint", gpu.id, count))
                        continue
                    scn = scn1 if count == group else _build(ctx, gpu, count, gpn, par, section)
                    perf = dataclasses.replace(perf1, output_tokens_per_s=perf1.output_tokens_per_s * replicas)
                    cost = estimate_cost(scn, gpu, perf)
                    cv, tv, upm = _values(perf, cost, count, "infer", out_len, bool(target))
                    if replicas > 1:
                        label = label.replace(f"{group} x", f"{count} x", 1) + f" x{replicas} replicas"
                    limited = any(p.severity == "warning" and " is limited" in p.message for p in problems)
                    cand = _Cand(gpu, count, scn, mem.peak_bytes_per_gpu, perf, cost, cv, tv, upm,
                                 (gpu.id, engine, weights, kv), label,
                                 _pref(ctx, weights=weights, engine=engine) * (LIMITED_SUPPORT_PENALTY if limited else 1.0),
                                 tuple(p.message for p in problems))
                    _accept(ctx, cand, has_price)
    if not any_engine:
        return


def _fmt_known(weights: str) -> bool:
    from ..hardware import software
    try:
        software.normalize_format(weights)
        return True
    except GpuplanError:
        return False


# ---- entry point ---------------------------------------------------------------------------------------

DEFAULT_DEADLINE_DAYS = 90.0
# A plan whose engine the software table rates "limited" on that accelerator (PyTorch/XLA on TPU,
# DeepSpeed on Gaudi's fork, MPS training) ranks as if it cost 25 % more: porting and debugging time
# the estimate cannot see. Explained in each such plan's warnings; docs/recommend.md.
LIMITED_SUPPORT_PENALTY = 1.25


def recommend(scenario_or_partial: Scenario | Mapping[str, Any] | str, *,
              objective: str | Mapping[str, float] | None = None, top: int = 10,
              gpus: Sequence[str] | None = None, preset: str | None = None,
              budget_usd: float | None = None, budget_usd_per_hour: float | None = None,
              deadline_days: float | None = None, max_gpus: int | None = None,
              owned: Mapping[str, int] | None = None, providers: Sequence[str] | None = None,
              spot: bool | None = None, ttft_s: float | None = None, tpot_s: float | None = None,
              requests_per_s: float | None = None, tokens_per_s: float | None = None,
              min_headroom: float | None = None, progress: bool | None = None) -> "Recommendation":
    """Ranked, explained, feasible plans for a scenario whose hardware and/or layout are left open.

    Precedence for every setting: keyword argument > scenario's `constraints:`/`objective:` block >
    preset > default. See docs/recommend.md.
    """
    t0 = time.perf_counter()
    data = _partial(scenario_or_partial)
    file_cons = dict(data.get("constraints") or {})
    preset_obj = get_preset(preset or data.get("preset"))
    data = json_copy(data)
    _validate_fixed(data)

    cons = Constraints()
    if preset_obj:
        cons = cons.merged(**preset_obj.constraints)
    cons = cons.merged(**{k: v for k, v in file_cons.items()})
    cons = cons.merged(budget_usd=budget_usd, budget_usd_per_hour=budget_usd_per_hour, deadline_days=deadline_days,
                       max_gpus=max_gpus, owned=owned, providers=providers, spot=spot, ttft_s=ttft_s, tpot_s=tpot_s,
                       requests_per_s=requests_per_s, tokens_per_s=tokens_per_s, min_headroom=min_headroom)
    task = data.get("task", "train")
    if cons.deadline_days is None and task in ("train", "finetune") and (data.get("train") or {}).get("tokens"):
        # without a deadline "cheapest" drifts to plans that run for years (heavy offload on a few
        # cheap cards); a default ceiling keeps answers usable and is stated in the assumptions
        cons = dataclasses.replace(cons, deadline_days=DEFAULT_DEADLINE_DAYS)
        default_deadline = True
    else:
        default_deadline = False
    scn_cost = data.get("cost") or {}
    if "spot" in scn_cost and spot is None and "spot" not in file_cons:
        cons = dataclasses.replace(cons, spot=bool(scn_cost["spot"]))
    obj_name, obj_weights = parse_objective(objective if objective is not None else
                                            data.get("objective") or (preset_obj.objective if preset_obj else None))

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
        sp.gpus = tuple(gpus)
        sp.named["gpu"] = sp.gpus
    model = get_model(data["model"])

    from ..hardware import get_gpu, list_gpus
    named_gpus: list = []
    if sp.gpus:
        for g in sp.gpus:
            named_gpus.append(get_gpu(g))
        candidates = named_gpus
    elif cons.owned:
        candidates = [get_gpu(g) for g in cons.owned]
        named_gpus = list(candidates)
    else:
        candidates = list_gpus()
    ctx = _Ctx(model=model, space=sp, cons=cons, preset=preset_obj, objective=obj_name, weights=obj_weights,
               max_gpus=cons.max_gpus or S.DEFAULT_MAX_GPUS, params=_efficiency_params(), t0=t0, top=max(1, top))
    ctx.default_deadline = default_deadline
    ctx.eta_max = _eta_max(ctx.params)
    ctx.eta_attn_max = _eta_max(ctx.params, "attention")
    candidates = _promising_first(ctx, candidates)
    show = sys.stderr.isatty() if progress is None else progress
    ctx.gpus_total = len(candidates)
    named_ids = {g.id for g in named_gpus}
    for gpu in candidates:
        why_not = gpu_allowed(preset_obj, gpu)
        if why_not:
            if gpu.id in named_ids:
                ctx.rejected.append(Rejection(gpu.id, why_not, "preset", gpu.id,
                                              alternative="drop the preset or override it with --gpus"))
            continue
        if sp.task == "infer":
            _infer_gpu(ctx, gpu)
        else:
            _train_gpu(ctx, gpu)
        ctx.gpus_done += 1
        if show and time.perf_counter() - t0 > 1.0:
            _bar(ctx)
    if show and time.perf_counter() - t0 > 1.0:
        sys.stderr.write("\n")
    return _finish(ctx, top, named_ids, time.perf_counter() - t0)


def _eta_max(params: Any, table: str = "matmul") -> float:
    """The largest efficiency the speed model can assign (bounds must not exceed it)."""
    try:
        vals = []
        for fam in params[table].values():
            vals.extend(float(v) for v in (fam.values() if isinstance(fam, Mapping) else [fam]))
        return min(1.0, max(vals)) if vals else 1.0
    except Exception:
        return 1.0


def _promising_first(ctx: _Ctx, gpus: list) -> list:
    """Search GPUs with the most matmul FLOP/s per rented dollar first, so the bounds bite early."""
    from ..estimate.speed import peak_flops

    def key(g):
        try:
            price = _hourly(ctx, g, 1) or _hourly(ctx, g, 8)
            return (0, price / peak_flops(g, "bf16")) if price else (1, 0.0)
        except Exception:
            return (1, 0.0)
    return sorted(gpus, key=key)


def _bar(ctx: _Ctx) -> None:
    n, total = ctx.gpus_done, max(ctx.gpus_total, 1)
    filled = int(30 * n / total)
    sys.stderr.write(f"\rrecommend [{'#' * filled}{'.' * (30 - filled)}] {n}/{total} GPUs, "
                     f"{ctx.n_mem + ctx.n_speed:,} evaluations")
    sys.stderr.flush()


def _finish(ctx: _Ctx, top: int, named_ids: set, elapsed: float) -> Recommendation:
    feas = ctx.feasible
    key = score_fn(ctx.objective, ctx.weights, feas)

    def k(c):
        base = key(c)
        return (base[0] * c.pref if isinstance(base[0], float) else base[0],) + tuple(base[1:])
    feas.sort(key=k)
    best_per_group: dict = {}
    for c in feas:
        best_per_group.setdefault(c.group, c)
    ranked = list(best_per_group.values())[:max(0, top)]
    front = pareto_front(feas, lambda c: None if c.cost_value is None or c.time_value is None
                         else (c.cost_value, c.time_value))
    if len(front) > 40:
        step = len(front) / 40
        front = [front[int(i * step)] for i in range(40)]

    cost_metric, time_metric = _metrics(ctx)
    built: dict[int, Plan] = {}

    def plan(c: _Cand, rank: int) -> Plan:
        if id(c) not in built:
            built[id(c)] = _plan(ctx, c, rank, len(feas))
        p = built[id(c)]
        return p if p.rank == rank else dataclasses.replace(p, rank=rank)
    plans = tuple(plan(c, i + 1) for i, c in enumerate(ranked))
    pareto = tuple(plan(c, 0) for c in front)

    rejected = list(ctx.rejected)
    feasible_gpus = {c.gpu.id for c in feas}
    for gid, misses in ctx.misses.items():
        if gid in feasible_gpus and gid not in named_ids:
            continue
        if gid in feasible_gpus:
            continue
        misses.sort(key=lambda m: (-m[0], -m[1]))
        rejected.append(misses[0][2])
    for gid in named_ids - feasible_gpus - set(ctx.misses) - {r.gpu for r in rejected}:
        rejected.append(Rejection(gid, "no GPU count within the limits gives a valid layout", "layout", gid))
    seen, unique = set(), []
    for r in rejected:
        if (r.option, r.reason) not in seen:
            seen.add((r.option, r.reason))
            unique.append(r)
    rejected = unique
    assumptions = _assumptions(ctx)
    stats = {"seconds": round(elapsed, 4), "gpus_searched": ctx.gpus_done, "layouts": ctx.n_layouts,
             "memory_evaluations": ctx.n_mem, "speed_evaluations": ctx.n_speed, "feasible": len(feas),
             "candidates_per_s": round((ctx.n_mem + ctx.n_speed) / elapsed) if elapsed > 0 else None}
    return Recommendation(plans=plans, pareto=pareto, rejected=tuple(rejected), objective=ctx.objective,
                          objective_weights=ctx.weights, constraints=ctx.cons, preset=ctx.preset,
                          task=ctx.space.task, cost_metric=cost_metric, time_metric=time_metric,
                          assumptions=assumptions, stats=stats)


def _metrics(ctx: _Ctx) -> tuple[str, str]:
    if ctx.space.task == "infer":
        target = ctx.cons.requested_output_tokens_per_s(int(ctx.space.base.get("infer", {}).get("output_len", 256)))
        return ("usd_per_hour" if target else "usd_per_million_tokens"), "request_latency_s"
    tokens = ctx.space.base.get("train", {}).get("tokens")
    return (("usd_total", "time_to_train_s") if tokens else ("usd_per_million_tokens", "s_per_billion_tokens"))


def _assumptions(ctx: _Ctx) -> tuple[str, ...]:
    out = []
    tr = ctx.space.base.get("train", {})
    if ctx.space.task != "infer":
        if not tr.get("global_batch"):
            gb = S.default_global_batch(ctx.space.task, int(tr.get("seq_len", 2048)))
            out.append(f"global batch not given: {gb} sequences per step "
                       + ("(~4M tokens, as Llama 3 pre-training started)" if ctx.space.task == "train" else
                          "(a common fine-tuning batch)") + "; set train.global_batch to change it")
        if not tr.get("tokens"):
            out.append("train.tokens not given: cost is ranked per million tokens and time per billion tokens")
        if ctx.default_deadline:
            out.append(f"no deadline given: plans longer than {DEFAULT_DEADLINE_DAYS:g} days are rejected; "
                       "set --deadline DAYS (or constraints.deadline_days) to change it")
    else:
        inf = ctx.space.base.get("infer", {})
        out.append(f"serving {inf.get('prompt_len', 1024)}-token prompts, {inf.get('output_len', 256)} output "
                   f"tokens, {inf.get('concurrency', 1)} concurrent requests per replica")
    out.append("rent prices: cheapest matching offering, whole instances billed; spot only when allowed")
    if ctx.preset:
        out.append(f"preset {ctx.preset.name}: {ctx.preset.summary}")
    return tuple(out)


def _plan(ctx: _Ctx, c: _Cand, rank: int, n_feasible: int) -> Plan:
    from ..estimate.memory import estimate_memory
    from ..estimate.cost import estimate_cost
    c.scn = scenario_from_dict(c.scn.model_dump(), "(recommended plan)")     # re-validate what is shown
    mem = estimate_memory(c.scn, ctx.model, c.gpu.usable_memory_bytes)
    c.cost = estimate_cost(c.scn, c.gpu, c.perf)
    est = {"memory": mem.to_json(), "performance": c.perf.to_json(), "cost": c.cost.to_json()}
    why = [f"fits: {mem.peak_bytes_per_gpu / GiB:.1f} of {mem.capacity_bytes_per_gpu / GiB:.1f} GiB per GPU "
           f"(peak in {mem.phase})"]
    if c.cost.usd_per_hour is not None:
        why.append(f"{c.cost.basis}: ${c.cost.usd_per_hour:,.2f}/h")
    be = c.cost.details.get("breakeven_months")
    if be is not None and (ctx.preset is None or ctx.preset.show_breakeven or rank == 1):
        why.append(f"buying these {c.count} GPUs pays off after {be:,.1f} months of continuous use")
    elif be is None and ctx.preset is not None and ctx.preset.show_breakeven:
        why.append(f"rent-vs-buy break-even unknown: no purchase price for {c.gpu.id} in the catalog "
                   "(set cost.capex_usd_per_gpu)" if c.cost.details.get("own") is None else
                   "buying never pays off: renting costs less than the electricity of owning")
    if rank == 1:
        why.append(f"best of {n_feasible} feasible plans by {ctx.objective}")
    if ctx.preset:
        why.append(f"preset {ctx.preset.name}: {ctx.preset.why[0]}")
    # the speed model's "details: k=v; ..." note is machine-readable bookkeeping, not a warning
    warnings = tuple(c.warnings) + tuple(n for n in (getattr(c.perf, "notes", ()) or ()) if not n.startswith("details:"))
    return Plan(rank=rank, gpu=c.gpu.id, count=c.count, summary=c.summary, scenario=c.scn, estimate=est,
                cost_value=c.cost_value, time_value=c.time_value, why=tuple(why), warnings=warnings)

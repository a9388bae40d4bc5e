"""The serving search on one GPU type: engines x weight formats x KV-cache formats x (tp, pp), each
replica sized on memory first, then timed, then replicated to meet a throughput target."""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable

from .. import pipeline
from . import space as S
from .candidate import accept, build, memory, performance, values
from .constraints import check_gpus, memory_reason
from .plan import Cand, Rejection
from .state import LIMITED_SUPPORT_PENALTY, Search, first_error, format_known, software_problems

ENGINE_KEY = {"llama.cpp": "llamacpp"}


@dataclass(frozen=True)
class Replica:
    """One serving configuration on one GPU type (before the layout and the replica count)."""
    gpu: Any
    gpn: int
    engine: str
    weights: str
    kv: str
    problems: tuple          # the engine's software-table problems on this GPU (warnings)
    target: float | None     # output tokens/s to sustain
    out_len: int


def infer_gpu(s: Search, gpu: Any) -> None:
    sp = s.space
    out_len = int(sp.base.get("infer", {}).get("output_len", 256))
    target = s.cons.requested_output_tokens_per_s(out_len)
    gpn = s.node_size(gpu)
    for engine in sp.infer["engine"] or S.INFER_OPTIONS["engine"]:
        problems = _engine_problems(s, gpu, engine)
        if problems is None:
            continue
        bf16_emulated = bool(software_problems(gpu, dtype="bf16"))
        for weights in sp.options("infer", "weights", S.INFER_OPTIONS["weights"]):
            if weights == S.INFER_DEFAULT_FIXED["weights"] and "weights" not in sp.named \
                    and engine in pipeline.STORED_FORMAT_ENGINES and s.model.stored_weights:
                weights = s.model.stored_weights    # the published checkpoint's format (pipeline.stored_weights_default)
            elif weights == "bf16" and bf16_emulated and "weights" not in sp.named:
                weights = "fp16"        # no native bf16 (V100, T4): serve the 16-bit weights as fp16
            werr = first_error(software_problems(gpu, dtype=weights)) if format_known(weights) else None
            if werr:
                s.tally.miss(gpu.id, 1, 0, Rejection(f"{weights} weights on {gpu.id}", werr.message, "software",
                                                     gpu.id, alternative=werr.alternative))
                continue
            for kv in sp.options("infer", "kv_cache", S.INFER_OPTIONS["kv_cache"]):
                if kv.startswith("fp8") and first_error(software_problems(gpu, dtype="fp8")):
                    continue
                if kv == "bf16" and bf16_emulated and "kv_cache" not in sp.named:
                    kv = "fp16"
                rep = Replica(gpu, gpn, engine, weights, kv, tuple(problems), target, out_len)
                for tp, pp in _layouts(s, rep):
                    s.check_time(f"at {gpu.id} ({engine}, {weights}, tp={tp}, pp={pp})")
                    _layout(s, rep, tp, pp)


def _engine_problems(s: Search, gpu: Any, engine: str) -> list | None:
    """The engine's software problems on `gpu`, or None (and the rejection recorded) when it cannot run."""
    problems = software_problems(gpu, engine=ENGINE_KEY.get(engine, engine))
    err = first_error(problems)
    levels = s.preset.engine_levels if s.preset else ("yes", "limited")
    if err is None and "limited" not in levels and any(p.severity == "warning" for p in problems):
        w = next(p for p in problems if p.severity == "warning")
        err = dataclasses.replace(w, message=w.message + f" (preset {s.preset.name} needs full support)")
    if err is None:
        return problems
    rej = Rejection(f"{engine} on {gpu.id}", err.message, "software", gpu.id, alternative=err.alternative)
    if s.space.infer["engine"]:
        s.tally.named_reject(rej)
    s.tally.miss(gpu.id, 1, 0, rej)
    return None


def _layouts(s: Search, rep: Replica):
    sp, model = s.space, s.model
    tps = list(sp.parallel["tp"] or S.powers_of_two(rep.gpn))
    pps = list(sp.parallel["pp"] or (1,))
    if rep.engine == "llama.cpp" and not sp.parallel["tp"]:
        tps = [1]
    for tp, pp in itertools.product(tps, pps):
        if r := S.tp_reason(model, tp, "infer"):
            if sp.parallel["tp"]:
                s.tally.named_reject(Rejection(f"tp={tp}", r, "layout"))
            continue
        if S.pp_reason(model, pp):
            continue
        if sp.counts and all(c % (tp * pp) for c in sp.counts):
            continue
        yield tp, pp


def _label(rep: Replica, group: int, tp: int, pp: int) -> str:
    return (f"{group} x {rep.gpu.id} ({rep.engine}, {rep.weights}" + (f", kv {rep.kv}" if rep.kv != "bf16" else "")
            + (f", tp={tp}" if tp > 1 else "") + (f", pp={pp}" if pp > 1 else "") + ")")


def _layout(s: Search, rep: Replica, tp: int, pp: int) -> None:
    """Size one replica on memory, time it, replicate it for the target and offer the plan."""
    gpu, cons, t = rep.gpu, s.cons, s.tally
    t.layouts += 1
    group = tp * pp
    section = {"engine": rep.engine, "weights": rep.weights, "kv_cache": rep.kv}
    par = {"tp": tp, "pp": pp}
    scn1 = build(s, gpu, group, rep.gpn, par, section)
    mem = memory(s, scn1, gpu)
    cap = mem.capacity_bytes_per_gpu * (1 - (cons.min_headroom or 0.0))
    label = _label(rep, group, tp, pp)
    if mem.peak_bytes_per_gpu > cap:
        text = memory_reason(mem.peak_bytes_per_gpu, mem.capacity_bytes_per_gpu, cons.min_headroom)
        t.miss(gpu.id, 2, cap / mem.peak_bytes_per_gpu, Rejection(label, text, "memory", gpu.id, group))
        return
    perf1 = performance(s, scn1, gpu, mem)
    if not perf1.output_tokens_per_s:
        t.miss(gpu.id, 2, 0.5, Rejection(label, "no KV-cache room left after the weights", "memory", gpu.id, group))
        return
    load = None
    if _sized_by_simulation(s, rep):
        sized = _replicas_for_slo(s, rep, scn1, gpu, mem, group, label)
        if sized is None:
            return
        replicas, load = sized
    else:
        replicas = _replicas(s, rep, perf1.output_tokens_per_s, group, label)
    if replicas is None:
        return
    count = replicas * group
    lim = check_gpus(cons, gpu.id, count) or (None if count <= s.max_gpus else
                                              f"needs {count} GPUs, more than {s.max_gpus}")
    if lim:
        t.miss(gpu.id, 3, 0.5, Rejection(label, lim, "constraint", gpu.id, count))
        return
    scn = scn1 if count == group else build(s, gpu, count, rep.gpn, par, section)
    notes: tuple[str, ...] = ()
    if load is not None:
        scn, notes = _simulated_replica(scn, load, cons)
    perf = dataclasses.replace(perf1, output_tokens_per_s=perf1.output_tokens_per_s * replicas)
    if load is not None:
        # sized by simulation: the latencies are the SLO percentile's at rate/replicas, the throughput is
        # what the target rate asks (so $/M tokens is the cost at that rate)
        perf = dataclasses.replace(
            perf1, ttft_s=load["ttft_at_percentile_s"], tpot_s=load["tpot_at_percentile_s"],
            output_tokens_per_s=cons.requests_per_s * load["mean_output_tokens"],
            details={**perf1.details, "load": load, "replicas": replicas})
    cost = pipeline.cost(s.resolved(scn, gpu), perf)
    cv, tv, upm = values(perf, cost, count, "infer", rep.out_len, bool(rep.target))
    if replicas > 1:
        label = label.replace(f"{group} x", f"{count} x", 1) + f" x{replicas} replicas"
    limited = any(p.severity == "warning" and p.limited for p in rep.problems)
    pref = s.pref(weights=rep.weights, engine=rep.engine) * (LIMITED_SUPPORT_PENALTY if limited else 1.0)
    accept(s, Cand(gpu, count, scn, mem, perf, cost, cv, tv, upm, (gpu.id, rep.engine, rep.weights, rep.kv), label,
                   pref, tuple(p.message for p in rep.problems) + notes))


def _simulated_replica(scn: Any, load: dict, cons: Any) -> tuple[Any, tuple[str, ...]]:
    """The plan's `infer.load` made the load the sizing simulated (estimate.load.replicas_for_slo): Poisson
    arrivals at the plan's whole rate, which `serve` deals to its replicas (rate/replicas each, as sized), the
    simulated request count, the SLO, no warm-up and no prefill/decode split, so `serve` on the plan reproduces
    the numbers shown. Returns the scenario and the warnings saying what of the scenario's load was not applied."""
    from ..scenario import Load
    old = scn.infer.load
    fields = {"rate_per_s": cons.requests_per_s, "arrival": "poisson",
              "requests": load["requests"],
              "warmup_requests": 0, "disaggregation": None, "slo_ttft_s": cons.ttft_s, "slo_tpot_s": cons.tpot_s}
    new = Load(**fields) if old is None else old.model_copy(update=fields)
    notes = []
    if old is not None and old.disaggregation is not None:
        dg = old.disaggregation
        notes.append(f"infer.load.disaggregation ({dg.prefill_instances} prefill + {dg.decode_instances} decode "
                     "instances) is not applied: recommend sizes colocated replicas, and this plan is one; "
                     "`gpuplan serve` on the scenario compares the split with colocated serving")
    if old is not None and old.arrival != "poisson":
        notes.append(f"infer.load.arrival {old.arrival} is not applied: the replicas are sized on Poisson arrivals")
    return scn.model_copy(update={"infer": scn.infer.model_copy(update={"load": new})}), tuple(notes)


def _replicas(s: Search, rep: Replica, tokens_per_s: float, group: int, label: str) -> int | None:
    """Replicas of `group` GPUs needed for the throughput target (None, with the miss, when the fixed
    GPU counts cannot give them)."""
    replicas = max(1, math.ceil(rep.target / tokens_per_s)) if rep.target else 1
    return _within_counts(s, rep, replicas, group, label, lambda: f"{rep.target:,.0f} output tokens/s")


def _within_counts(s: Search, rep: Replica, replicas: int, group: int, label: str,
                   need: Callable[[], str]) -> int | None:
    """The replicas the fixed GPU counts allow for at least `replicas` of `group` GPUs (the smallest such
    count), or None with the miss recorded; `need` says what the GPUs are for (built only for a miss)."""
    counts = s.space.counts
    if not counts:
        return replicas
    fitting = [c for c in counts if c % group == 0 and c // group >= replicas]
    if not fitting:
        s.tally.miss(rep.gpu.id, 3, 0.5, Rejection(label, f"needs {replicas * group} GPUs for {need()}; count fixed "
                     f"at {', '.join(map(str, counts))}", "constraint", rep.gpu.id, group))
        return None
    return min(fitting) // group


def _sized_by_simulation(s: Search, rep: Replica) -> bool:
    """A request rate: replicas are sized by the load simulator (docs/serving-load.md), to the latency SLO where one
    is given and otherwise to the rate each replica serves with a bounded queue (its continuous batching decides how
    many requests run at once, not infer.concurrency). Not for hf, which has no continuous-batching scheduler."""
    return bool(s.cons.requests_per_s) and rep.engine != "hf"


def _abandon(s: Search, rep: Replica, group: int) -> tuple[Callable[[int, Any, Any], bool], list, list]:
    """The sizing's stop test for one layout (estimate.load.replicas_for_slo `abandon`), the list it fills with
    (replicas ruled out, GPUs, $/h lower bound, time lower bound) when it stops, and the `lo` values it was asked
    about (0 first: the requests fit the KV pool and the sizing started). Once the answer is known to be more than
    `lo` replicas, the plan costs at least the $/h of (lo + 1) x group GPUs (a price never falls with the count:
    whole instances, the cheapest offering that holds them; tests/test_recommend_bounds.py), and its time value
    (TTFT + output_len x TPOT at the SLO percentile) is at least output_len x the cheapest decode iteration over
    tokens_per_step (load.cost.decode_floor). When a plan found so far beats both and the plan cannot enter the top
    N (bounds.serving_hopeless), the layout cannot change the answer: its sizing stops and says so."""
    from ..estimate.load.cost import decode_floor
    from .bounds import serving_hopeless
    from .pricing import hourly
    why: list = []
    floor: list = []
    asked: list = []
    limited = any(p.severity == "warning" and p.limited for p in rep.problems)
    pref = s.pref(weights=rep.weights, engine=rep.engine) * (LIMITED_SUPPORT_PENALTY if limited else 1.0)

    def abandon(lo: int, cost: Any, policy: Any) -> bool:
        asked.append(lo)
        if s.objective not in ("cheapest", "fastest") or not s.tally.front:
            return False
        gpus = (lo + 1) * group
        if s.space.counts:          # fixed counts: the plan takes the smallest that holds the replicas
            gpus = min((c for c in s.space.counts if c % group == 0 and c >= gpus), default=None)
            if gpus is None:
                return False        # the sizing says so itself (_within_counts)
        price = hourly(s, rep.gpu, gpus)
        if price is None:
            return False
        if not floor:
            floor.append(decode_floor(cost) / max(1.0, float(policy.tokens_per_step)))
        t_lb = rep.out_len * floor[0]
        if not serving_hopeless(s, price, t_lb, pref, (rep.gpu.id, rep.engine, rep.weights, rep.kv)):
            return False
        why.extend((lo, gpus, price, t_lb))
        return True
    return abandon, why, asked


def _doubling_cap(s: Search, group: int, limit: int) -> int:
    """How far the replica sizing (estimate.load.replicas_for_slo: doubling 1, 2, 4, ... then bisection) needs to
    double: to `limit` (max_gpus / group), or, when the GPU count is fixed, to the first doubling at or above the
    most replicas the fixed counts allow. The doublings up to it are the same as without the cap, so an answer found
    there is the same; an answer past it would need more GPUs than the counts allow (issue: heavy recommends)."""
    counts = s.space.counts
    if not counts:
        return limit
    most = max((c // group for c in counts if c % group == 0), default=0)
    p = 1
    while p < most:
        p *= 2
    return min(limit, p)


def _replicas_for_slo(s: Search, rep: Replica, scn1: Any, gpu: Any, mem: Any, group: int,
                      label: str) -> tuple[int, dict] | None:
    """The fewest replicas whose simulated p99 (or the scenario's infer.load.slo_percentile) TTFT and TPOT
    meet the constraints at requests_per_s / replicas each (None, with the miss, when none do)."""
    from ..estimate.load import replicas_for_slo
    from ..estimate.speed import serving_model
    from .pricing import hourly
    cons = s.cons
    if s.objective != "fastest" and hourly(s, gpu, 1) is None:
        # no offering holds even one of these GPUs and no purchase price is known: no replica count can be priced,
        # and a plan without a price is not kept (candidate.accept), so the layout is not sized by simulation
        # (candidate.accept's miss for a plan without a price; ranked with the sizing's own misses, above memory misses,
        # since this layout fits)
        s.tally.sizing_abandoned += 1
        s.tally.miss(rep.gpu.id, 3, 0, Rejection(label, f"no price for {gpu.id}: no rentable offering matches and no "
                     "launch price is known (set cost.usd_per_gpu_hour or cost.capex_usd_per_gpu); so its replicas were "
                     "not sized by the load simulator", "price", gpu.id, group,
                     alternative="set cost.usd_per_gpu_hour or cost.capex_usd_per_gpu; its replicas are then sized"))
        return None
    load = scn1.infer.load
    slo = {"ttft_s": cons.ttft_s, "tpot_s": cons.tpot_s,
           "percentile": load.slo_percentile if load is not None else 99.0}
    r = s.resolved(scn1, gpu)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    limit = max(1, s.max_gpus // group)
    cap = _doubling_cap(s, group, limit)
    abandon, why, asked = _abandon(s, rep, group)
    sized = replicas_for_slo(r.scenario, sv, int(gpu.usable_memory_bytes), cons.requests_per_s, slo,
                             max_replicas=cap, abandon=abandon)
    if why:
        lo, gpus, price, t_lb = why
        s.tally.sizing_abandoned += 1
        need = f"needs more than {lo} replica{'s' if lo > 1 else ''} ({gpus}+ GPUs, " if lo else f"needs {gpus}+ GPUs ("
        s.tally.miss(rep.gpu.id, 3, 0.5, Rejection(label, f"not sized further: {need}at least ${price:,.2f}/h) and its "
                     f"requests take at least {t_lb:.2f} s (output_len x the cheapest decode step), while plans already "
                     "found are cheaper and faster and it cannot enter the top plans (docs/recommend.md, bounded "
                     "sizing)", "constraint", rep.gpu.id, group))
        return None
    if sized is None and cap < limit and asked:
        # the fixed counts allow at most `cap` replicas and the sizing failed at every doubling up to it: whatever it
        # would find past it (or nothing) is more than the counts allow
        s.tally.miss(rep.gpu.id, 3, 0.5, Rejection(label, f"needs more than {cap * group} GPUs for the SLO at "
                     f"{cons.requests_per_s:g} requests/s (simulated); count fixed at "
                     f"{', '.join(map(str, s.space.counts))}", "constraint", rep.gpu.id, group))
        return None
    if sized is None:
        s.tally.miss(rep.gpu.id, 3, 0.5, Rejection(label, f"no replica count up to {s.max_gpus} GPUs keeps the "
                     f"p{slo['percentile']:g} TTFT/TPOT within the target at {cons.requests_per_s:g} requests/s "
                     "(simulated)", "constraint", rep.gpu.id, group))
        return None
    replicas = _within_counts(s, rep, sized[0], group, label, lambda: f"the SLO at {cons.requests_per_s:g} requests/s")
    if replicas is None:
        return None
    summary = sized[1]
    if replicas > sized[0]:
        # the fixed counts give more replicas than the SLO needs: the numbers shown are one replica's at
        # the plan's own share of the rate (what `serve` on the plan simulates); more replicas only lower them
        again = replicas_for_slo(r.scenario, sv, int(gpu.usable_memory_bytes), cons.requests_per_s / replicas, slo,
                                 max_replicas=1)
        summary = again[1] if again is not None else summary
    summary["mean_output_tokens"] = summary["output_tokens_per_s"] / summary["requests_per_s"] \
        if summary["requests_per_s"] else float(scn1.infer.output_len)
    summary["replicas_needed"] = sized[0]
    summary["replicas_simulated"] = replicas if summary is not sized[1] else sized[0]
    summary["rate_per_replica_s"] = cons.requests_per_s / replicas
    return replicas, summary

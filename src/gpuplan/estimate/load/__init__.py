"""Serving under load: a request-level simulation of one serving replica (docs/serving-load.md).

`serving_load` runs the scenario's `infer.load` workload through the engine's scheduler
(scheduler.py, engines.py) on the speed engine's step cost (cost.py) and the memory engine's KV
pool, and reports latency percentiles, throughput, goodput, KV occupancy, whether the rate is above
capacity, the capacity itself (bisection on the rate) and the highest rate meeting the SLO.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .cost import ConstantCost, EngineCost, SpecCost, step_cost
from .engines import engine_policy
from .scheduler import Policy, Result, SloStop, simulate
from .workload import SHAPES, Arrivals, Lengths, Workload, make_workload, trace_workload

__all__ = ["serving_load", "simulate", "summarize", "Policy", "Result", "ConstantCost", "EngineCost",
           "SpecCost", "Arrivals", "Lengths", "Workload", "make_workload", "trace_workload", "find_capacity", "is_overloaded",
           "measured",
           "saturation", "SHAPES", "replicas_for_slo", "meets_slo", "per_request"]

# requests simulated per replica count when sizing for an SLO without a scenario load block: the
# scenario default (ScenarioLoad.requests); fewer arrivals make the overload test see the warm-up as growth
DEFAULT_SLO_REQUESTS = 1000
SLO_MAX_REQUESTS = 2000
OVERLOAD_GROWTH = 0.05         # requests in the system growing at > 5 % of the arrival rate: no bound
CAPACITY_REQUESTS = 1000       # requests per simulation inside the rate bisections (at least)
MAX_CAPACITY_REQUESTS = 5000   # (at most)
BISECTION_STEPS = 7            # 2^-7 of the bracket: < 1 % of the capacity


def _stats(x: np.ndarray) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if not len(x):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def per_request(res: Result) -> dict[str, np.ndarray]:
    o = res.output_tokens.astype(float)
    tpot = np.where(o > 1, (res.finish_s - res.first_token_s) / np.maximum(o - 1, 1), np.nan)
    return {"ttft": res.first_token_s - res.arrival_s, "tpot": tpot, "e2e": res.finish_s - res.arrival_s,
            "queue": res.first_scheduled_s - res.arrival_s}


def is_overloaded(res: Result) -> bool:
    """Open-loop arrivals above capacity: over the later half of the arrivals, the number of requests in
    the system (waiting or running) seen by each arrival grows faster than OVERLOAD_GROWTH x the arrival
    rate (least-squares slope). Counting requests in the system, not only the queue, catches an engine
    whose running cap is never reached and that slows every request down instead of queueing them."""
    t = res.arrival_s
    n = len(t)
    if n < 20 or not t[-1] > t[0]:
        return False
    fin = np.sort(res.finish_s)
    in_system = np.arange(n) - np.searchsorted(fin, t, side="right")
    h = n // 2
    if not np.ptp(t[h:]) > 0:
        return False
    slope = np.polyfit(t[h:], in_system[h:], 1)[0]
    return bool(slope > OVERLOAD_GROWTH * (n - 1) / (t[-1] - t[0]))


def meets_slo(res: Result, slo: Mapping[str, Any]) -> bool:
    m = per_request(res)
    pct = slo.get("percentile", 99.0)
    for key, lim in (("ttft", slo.get("ttft_s")), ("tpot", slo.get("tpot_s"))):
        if lim is None:
            continue
        x = m[key][np.isfinite(m[key])]
        if len(x) and float(np.percentile(x, pct)) > lim:
            return False
    return True


def misses_to_fail(size: int, percentile: float) -> int:
    """The fewest values above a limit that put np.percentile(x, percentile) (linear interpolation, len(x) =
    `size`) above it: the value at index floor(q (size - 1)) is then above it, and the percentile is at least
    that value (numpy's _lerp of a <= b never returns less than a). The index is taken 1e-6 low, so a
    floating-point rounding of q (size - 1) can only ask for one miss more, never one fewer."""
    lo = max(0, int(np.floor(percentile / 100.0 * (size - 1) - 1e-6)))
    return size - lo


def slo_stop(workload: Workload, slo: Mapping[str, Any]) -> SloStop:
    """When a run of `workload` certainly fails meets_slo(res, slo) (scheduler.SloStop): TTFT is finite for every
    request of a finished run, TPOT for those with more than one output token."""
    pct = slo.get("percentile", 99.0)
    n_tpot = int((np.asarray(workload.output_tokens) > 1).sum())
    return SloStop(slo.get("ttft_s"), misses_to_fail(workload.n, pct),
                   slo.get("tpot_s") if n_tpot else None, misses_to_fail(n_tpot, pct) if n_tpot else 0)


def measured(res: Result, warmup: int = 0) -> np.ndarray:
    """Which requests the statistics count: all but the first `warmup` sent (arrival order; a closed
    loop's first round is its first `clients` requests). A load tester's warm-up requests
    (genai-perf / AIPerf `--warmup-request-count`) are served like any other but not reported."""
    n = len(res.arrival_s)
    keep = np.ones(n, bool)
    if warmup > 0:
        if warmup >= n:
            raise ValueError(f"warmup_requests ({warmup}) leaves none of the {n} requests to measure")
        keep[np.argsort(res.arrival_s, kind="stable")[:warmup]] = False
    return keep


def summarize(res: Result, *, slo: Mapping[str, Any] | None = None, open_loop: bool = True,
              warmup: int = 0) -> dict[str, Any]:
    """Latency statistics and throughput over the measured requests (all but `warmup` first ones: their
    span, first measured arrival to last measured completion); the time averages (KV occupancy, requests
    in the system) and the overload test cover the whole run."""
    keep = measured(res, warmup)
    m = {k: v[keep] for k, v in per_request(res).items()}
    t0 = float(np.nanmin(res.arrival_s[keep]))
    dur = float(np.nanmax(res.finish_s[keep])) - t0
    n = int(keep.sum())
    out_tok = float(res.output_tokens[keep].sum())
    tot_tok = out_tok + float(res.input_tokens[keep].sum())
    good = None
    if slo and (slo.get("ttft_s") is not None or slo.get("tpot_s") is not None):
        ok = np.ones(n, bool)
        if slo.get("ttft_s") is not None:
            ok &= m["ttft"] <= slo["ttft_s"]
        if slo.get("tpot_s") is not None:
            ok &= ~(m["tpot"] > slo["tpot_s"])          # a one-token answer has no TPOT
        good = float(ok.sum()) / dur if dur > 0 else None
    t_run = float(np.nanmin(res.arrival_s))
    return {
        "requests": n,
        "ttft_s": _stats(m["ttft"]), "tpot_s": _stats(m["tpot"]), "e2e_s": _stats(m["e2e"]),
        "queue_s": _stats(m["queue"]),
        "output_tokens_per_s": out_tok / dur if dur > 0 else None,
        "total_tokens_per_s": tot_tok / dur if dur > 0 else None,
        "requests_per_s": n / dur if dur > 0 else None,
        "goodput_requests_per_s": good,
        "overloaded": is_overloaded(res) if open_loop else False,
        "kv_occupancy": {"mean": res.kv_block_s / res.horizon_s / res.kv_blocks if res.horizon_s > 0 and res.kv_blocks
                         else None, "max": res.kv_max_blocks / res.kv_blocks if res.kv_blocks else None},
        "preemptions": res.preemptions,
        "mean_in_system": (res.in_system_s / (res.horizon_s - t_run) if res.horizon_s > t_run else None),
        "simulated_s": dur, "iterations": res.iterations, "engine_steps": res.engine_steps,
        "timeline": [{"t_s": a, "kv_occupancy": b, "running": c, "waiting": d} for a, b, c, d in res.timeline],
    }


def _bisect(ok: Callable[[float], bool], lo: float, hi: float, steps: int = BISECTION_STEPS) -> float:
    """The largest rate in [lo, hi] where ok holds (ok(lo) true, ok(hi) false, monotone)."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def saturation(policy: Policy, cost: Any, inp: Lengths, out: Lengths, seed: int) -> tuple[float, float]:
    """(requests/s, mean latency s) of one replica kept full: a closed loop with as many clients as the
    engine runs at once (max_num_seqs), measured over the middle half of the completions (no fill-up,
    no drain)."""
    clients = max(1, policy.max_num_seqs)
    n = max(2000, 4 * clients)
    wl = make_workload(Arrivals("closed", clients=clients), n, inp, out, seed)
    res = simulate(wl, policy, cost)
    fin = np.sort(res.finish_s)
    a, b = n // 4, (3 * n) // 4
    span = fin[b] - fin[a]
    rate = (b - a) / span if span > 0 else float(n) / max(fin[-1], 1e-12)
    return rate, float(np.mean(res.finish_s - res.arrival_s))


def find_capacity(run: Callable[[float], Result], guess: float) -> float:
    """The highest Poisson rate whose queue stays bounded, by bisection on the rate around `guess`
    (the saturated throughput, which no open-loop rate exceeds for long)."""
    def ok(rate: float) -> bool:
        return not is_overloaded(run(rate))
    hi = guess * 1.5
    for _ in range(6):
        if not ok(hi):
            break
        hi *= 2.0
    else:
        return hi
    lo = hi / 2.0
    for _ in range(10):
        if ok(lo):
            break
        hi, lo = lo, lo / 2.0
    else:
        return 0.0
    return _bisect(ok, lo, hi)


def _lengths(spec: Any, default: int) -> Lengths:
    if spec is None:
        return Lengths("fixed", float(default))
    return Lengths(spec.dist, float(spec.mean or 1.0), float(spec.std or 0.0),
                   float(spec.cv if spec.cv is not None else 1.0), int(spec.min), int(spec.max or (1 << 30)))


def _arrivals(load: Any, rate: float | None = None) -> Arrivals:
    r = rate if rate is not None else (load.rate_per_s or 1.0)
    return Arrivals(load.arrival, float(r), float(load.arrival_cv), int(load.clients or 1))


SWEEP_FRACTIONS = (0.1, 0.25, 0.4, 0.55, 0.7, 0.8, 0.9, 1.0)   # of the capacity, for the rate chart


def serving_load(scn: Any, serving: Any, capacity_bytes: int, *, trace_rows: Sequence[Mapping[str, Any]] | None = None,
                 cost: Any = None, search: bool = True, sweep: bool = False,
                 progress: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Simulate `scn.infer.load` on one replica of `serving` (speed.py `_Serving`, holding the memory
    engine's KV pool). `search`: also find the capacity and the highest rate meeting the SLO.
    `progress(text)` is called as each simulation run starts (no I/O here: the caller draws it)."""
    say = progress or (lambda text: None)
    inf = scn.infer
    load = inf.load
    policy, notes = engine_policy(scn, serving, capacity_bytes)
    inp, out = _lengths(load.input, inf.prompt_len), _lengths(load.output, inf.output_len)
    adp = serving.adp

    def workload(rate: float | None, n: int, arrival: str | None = None) -> Workload:
        if load.arrival == "trace" and arrival is None:
            return trace_workload(trace_rows or [])
        a = _arrivals(load, rate)
        if arrival:
            a = replace(a, kind=arrival)
        if a.kind in ("poisson", "gamma"):
            a = replace(a, rate=a.rate / adp)        # each attention replica gets its share
        return make_workload(a, n, inp, out, load.seed)

    wl = workload(load.rate_per_s, load.requests)
    max_ctx = int((wl.input_tokens + wl.output_tokens).max())
    if cost is None:
        cost = step_cost(serving, policy.max_num_seqs, max_ctx, max(policy.token_budget, int(wl.input_tokens.max())))
    pool_tokens = policy.kv_blocks * policy.block_size
    if max_ctx > pool_tokens:
        from ...errors import InputError
        raise InputError("infer.load request lengths", f"the longest request ({max_ctx:,} tokens) does not fit "
                         f"the KV pool of {pool_tokens:,} tokens.", "shorten the lengths (max:) or add GPUs / "
                         "lower the weights' precision.")
    if load.warmup_requests >= len(wl.input_tokens):       # a trace may hold fewer rows than `requests`
        from ...errors import InputError
        raise InputError("infer.load.warmup_requests", f"{load.warmup_requests} leaves none of the "
                         f"{len(wl.input_tokens)} requests to measure.", "use fewer warm-up requests or a longer run "
                         "(requests, or more trace rows).")
    say(f"simulating {len(wl.input_tokens):,} requests")
    open_loop = load.arrival in ("poisson", "gamma", "trace")
    slo = {"ttft_s": load.slo_ttft_s, "tpot_s": load.slo_tpot_s, "percentile": load.slo_percentile}
    if getattr(load, "disaggregation", None) is not None:
        return _disaggregated(scn, serving, wl, policy, cost, slo, open_loop, notes)
    res = simulate(wl, policy, cost)
    warmup = load.warmup_requests
    s = summarize(res, slo=slo, open_loop=open_loop, warmup=warmup)
    if warmup:
        notes.append(f"the first {warmup} requests are a warm-up: simulated, not counted in the statistics.")
    for k in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "goodput_requests_per_s"):
        if s[k] is not None:
            s[k] *= adp
    if adp > 1:
        notes.append(f"{adp} attention-data-parallel replicas: one is simulated at 1/{adp} of the rate; "
                     "rates and throughputs are the model copy's.")
    s.update({"engine": policy.engine, "arrival": load.arrival,
              "rate_per_s": load.rate_per_s if load.arrival in ("poisson", "gamma") else s["requests_per_s"],
              "policy": {"max_num_seqs": policy.max_num_seqs, "max_num_batched_tokens": policy.token_budget,
                         "kv_block_tokens": policy.block_size, "kv_pool_tokens": pool_tokens,
                         "chunked_prefill": policy.chunked_prefill, "mixed_batches": policy.mixed,
                         "reserve_output": policy.reserve_full, "prefix_cache_hit": policy.prefix_hit,
                         "tokens_per_step": policy.tokens_per_step, "new_token_ratio": policy.new_token_ratio}})
    s["capacity_per_s"] = None
    s["max_rate_meeting_slo_per_s"] = None
    if search and load.arrival != "trace":
        mu, w = saturation(policy, cost, inp, out, load.seed)
        # each probe spans several latencies at the saturated rate, so the fill-up at its start does
        # not read as a growing queue
        n_cap = int(min(MAX_CAPACITY_REQUESTS, max(CAPACITY_REQUESTS, 6 * mu * w)))

        probes = [0]

        def run(rate: float) -> Result:
            probes[0] += 1
            say(f"capacity and SLO search: probe {probes[0]} at {rate:.3g} requests/s")
            return simulate(workload(rate, n_cap, "poisson"), policy, cost)
        cap = find_capacity(run, mu * adp)
        s["capacity_per_s"] = cap
        if load.arrival in ("poisson", "gamma") and s["overloaded"]:
            notes.append(f"overloaded: the queue grows without bound above {cap:.3g} requests/s "
                         f"(this run: {load.rate_per_s:g}).")
        if slo["ttft_s"] is not None or slo["tpot_s"] is not None:
            def ok(rate: float) -> bool:
                r = run(rate)
                return not is_overloaded(r) and meets_slo(r, slo)
            lo = cap / 64.0
            if cap > 0 and ok(cap):
                s["max_rate_meeting_slo_per_s"] = cap
            elif cap > 0 and ok(lo):
                s["max_rate_meeting_slo_per_s"] = _bisect(ok, lo, cap)
            else:
                s["max_rate_meeting_slo_per_s"] = 0.0
                notes.append("the SLO is not met even at a small fraction of the capacity: the single-request "
                             "TTFT/TPOT exceed it.")
        if sweep and cap > 0:
            # latency percentiles and goodput versus rate (the --plot chart), probes as above
            s["sweep"] = []
            for f in SWEEP_FRACTIONS:
                q = summarize(run(cap * f), slo=slo)
                s["sweep"].append({
                    "rate_per_s": cap * f, "ttft_p50_s": q["ttft_s"]["p50"], "ttft_p99_s": q["ttft_s"]["p99"],
                    "tpot_p50_s": q["tpot_s"]["p50"], "tpot_p99_s": q["tpot_s"]["p99"],
                    "requests_per_s": q["requests_per_s"] * adp if q["requests_per_s"] else q["requests_per_s"],
                    "goodput_requests_per_s": None if q["goodput_requests_per_s"] is None
                    else q["goodput_requests_per_s"] * adp})
    s["slo"] = slo if (slo["ttft_s"] is not None or slo["tpot_s"] is not None) else None
    s["notes"] = notes
    return s


def _disaggregated(scn: Any, serving: Any, wl: Workload, policy: Policy, cost: Any, slo: Mapping[str, Any],
                   open_loop: bool, notes: list[str]) -> dict[str, Any]:
    """Prefill/decode disaggregation (disagg.py) beside colocated serving on the same GPUs."""
    from ...validate import disaggregation_rules
    from .disagg import simulate_disaggregated, split_round_robin, transfer_link, transfer_seconds
    load = scn.infer.load
    dg = load.disaggregation
    n, m = dg.prefill_instances, dg.decode_instances
    disaggregation_rules(scn, serving.model)      # pipeline.resolve has checked it already; a direct caller too
    gpus = (n + m) * serving.group_gpus
    link = transfer_link(serving, n + m)
    res, tx = simulate_disaggregated(wl, policy, cost, n, m, lambda p: transfer_seconds(serving, link, p))
    w = load.warmup_requests
    s = summarize(res, slo=slo, open_loop=open_loop, warmup=w)
    col = summarize(split_round_robin(wl, n + m, policy, cost), slo=slo, open_loop=open_loop, warmup=w)
    keep = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "requests_per_s", "output_tokens_per_s", "goodput_requests_per_s",
            "overloaded", "preemptions")
    s.update({"engine": policy.engine, "arrival": load.arrival,
              "rate_per_s": load.rate_per_s if load.arrival in ("poisson", "gamma") else s["requests_per_s"],
              "policy": {"max_num_seqs": policy.max_num_seqs, "max_num_batched_tokens": policy.token_budget,
                         "kv_block_tokens": policy.block_size, "kv_pool_tokens": policy.kv_blocks * policy.block_size,
                         "chunked_prefill": policy.chunked_prefill, "mixed_batches": policy.mixed,
                         "reserve_output": policy.reserve_full, "prefix_cache_hit": policy.prefix_hit,
                         "tokens_per_step": policy.tokens_per_step, "new_token_ratio": policy.new_token_ratio},
              "capacity_per_s": None, "max_rate_meeting_slo_per_s": None,
              "disaggregation": {
                  "prefill_instances": n, "decode_instances": m, "gpus": gpus,
                  "link": link.kind, "link_bytes_per_s_per_gpu": link.effective_bytes_per_s,
                  "kv_transfer_s": {"mean": float(np.mean(tx)), "p50": float(np.percentile(tx, 50)),
                                    "p90": float(np.percentile(tx, 90)), "p99": float(np.percentile(tx, 99))},
                  "colocated": dict({k: col[k] for k in keep}, replicas=n + m)}})
    s["slo"] = slo if (slo["ttft_s"] is not None or slo["tpot_s"] is not None) else None
    notes.append(f"prefill/decode disaggregation: {n} prefill + {m} decode instance(s) on {gpus} GPUs, KV over "
                 f"{link.kind}; rates are the whole system's; 'colocated' serves the same arrivals on {n + m} "
                 "ordinary replicas. The capacity search is not run for disaggregated plans.")
    s["notes"] = notes
    return s


def replicas_for_slo(scn: Any, serving: Any, capacity_bytes: int, rate: float, slo: Mapping[str, Any], *,
                     requests: int | None = None, max_replicas: int = 4096,
                     abandon: Callable[[int, Any, Policy], bool] | None = None) -> tuple[int, dict[str, Any]] | None:
    """The fewest replicas whose simulated `slo['percentile']` TTFT and TPOT meet the SLO when each gets
    rate/replicas Poisson arrivals (and its queue stays bounded), with that replica's load summary;
    None when even `max_replicas` do not (one request alone is slower than the SLO). Each replica
    simulates the scenario's own `infer.load.requests` (what `serve` simulates; at most SLO_MAX_REQUESTS)
    unless told otherwise.

    `abandon(lo, cost, policy)`: asked whenever the answer is known to be more than `lo` replicas and more runs
    would follow (`cost`, `policy`: the replica's step cost and scheduler); True stops the search there and returns None (the caller knows
    why: the recommend search stops sizing a layout that can no longer matter, search/serve_search.py)."""
    inf = scn.infer
    load = inf.load
    if requests is None:   # bounded work per candidate: at most SLO_MAX_REQUESTS per simulated replica count
        requests = min(load.requests, SLO_MAX_REQUESTS) if load is not None else DEFAULT_SLO_REQUESTS
    policy, _ = engine_policy(scn, serving, capacity_bytes)
    inp = _lengths(load.input if load is not None else None, inf.prompt_len)
    out = _lengths(load.output if load is not None else None, inf.output_len)
    seed = load.seed if load is not None else 0
    probe = make_workload(Arrivals("offline"), requests, inp, out, seed)
    max_ctx = int((probe.input_tokens + probe.output_tokens).max())
    if max_ctx > policy.kv_blocks * policy.block_size:
        return None
    cost = step_cost(serving, policy.max_num_seqs, max_ctx, max(policy.token_budget, int(probe.input_tokens.max())))
    adp = serving.adp
    runs: dict[int, Result | None] = {}

    def ok(n: int) -> bool:
        if n not in runs:
            wl = make_workload(Arrivals("poisson", rate / n / adp), requests, inp, out, seed)
            # a run that certainly misses the SLO stops there (None): only its verdict is used, never its numbers
            runs[n] = simulate(wl, policy, cost, slo_stop=slo_stop(wl, slo))
        r = runs[n]
        return r is not None and not is_overloaded(r) and meets_slo(r, slo)

    if abandon is not None and abandon(0, cost, policy):
        return None
    hi = 1
    while not ok(hi):
        if hi >= max_replicas:
            return None
        if abandon is not None and abandon(hi, cost, policy):
            return None
        hi = min(hi * 2, max_replicas)
    lo = hi // 2                      # ok(lo) false (or lo = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
            if hi - lo > 1 and abandon is not None and abandon(lo, cost, policy):
                return None
    s = summarize(runs[hi], slo=slo)
    m = per_request(runs[hi])
    pct = slo.get("percentile", 99.0)
    s["ttft_at_percentile_s"] = float(np.nanpercentile(m["ttft"], pct))
    tp = m["tpot"][np.isfinite(m["tpot"])]
    s["tpot_at_percentile_s"] = float(np.percentile(tp, pct)) if len(tp) else None
    for k in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "goodput_requests_per_s"):
        if s[k] is not None:
            s[k] *= adp           # the model copy's attention replicas together
    s["rate_per_replica_s"] = rate / hi
    s.pop("timeline", None)
    return hi, s

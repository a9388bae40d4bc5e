"""The training search on one GPU type: counts x model-parallel splits x pipeline depths x techniques.

Memory first: techniques that cost time (recompute, higher ZeRO stage, offload, 8-bit optimizer
states) are tried from the cheapest up, each with the largest micro-batch that fits; once a
combination fits, every combination at least as slow on every axis is skipped, and only the
non-dominated fitting ones are timed. For each tensor-parallel size the pipeline depth grows only
until a plan fits without recompute or offload.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from ..estimate.layout import grad_accum_steps
from . import frameworks as F
from . import space as S
from . import grid as G
from .bounds import candidate_hopeless, pipeline_pruned, pruned
from .candidate import accept, fast, layout_text, performance, train_memory, values
from .constraints import check_gpus, memory_reason
from .plan import Cand, Rejection
from .pricing import has_price, no_price_reason, quick_cost
from .state import LIMITED_SUPPORT_PENALTY, Search, first_error, software_problems, stack_of

TRAIN_ENGINE = {"megatron": "megatron", "deepspeed": "deepspeed", "torchtitan": "fsdp", "hf": "pytorch"}
# 8-bit states change the optimisation: tried after the full-precision ones (new optimizers are the user's choice)
OPT_RANK = {"adamw": 0, "lion": 0, "sgd": 0, "adafactor": 0, "muon": 0, "galore": 0, "soap": 0, "paged-adamw": 0,
            "adamw-8bit": 1, "paged-adamw-8bit": 1}
# The global batch is a target: a layout runs the nearest whole number of dp-sized steps to it. A
# layout whose nearest batch is further than this share from the target is rejected (a policy, not
# physics: a batch that far off changes the optimisation the user planned).
BATCH_TOLERANCE = 0.25


@dataclass(frozen=True)
class Job:
    """What is fixed for one GPU type's training search."""
    gpu: Any
    gpn: int                      # GPUs per node
    cap: int                      # bytes per GPU a plan may use (after the headroom)
    seq_len: int
    global_batch: int             # the target (sequences per step)
    precision: str
    attention: str
    optimizers: tuple
    recomputes: tuple
    micro_batches: tuple


@dataclass(frozen=True)
class Layout:
    count: int
    method: str
    par: dict                     # tp, pp, cp, ep, dp
    micro_batches: tuple          # those that give `global_batch` exactly
    global_batch: int             # the achievable batch nearest the target (batch_for)
    options: tuple = ()           # frameworks.Option: who runs this layout, with which ZeRO/offload


def train_gpu(s: Search, gpu: Any) -> None:
    sp = s.space
    tr = sp.base.get("train", {})
    seq_len = int(tr.get("seq_len", 2048))
    framework = sp.base.get("framework", "hf")
    problems = software_problems(gpu, engine=TRAIN_ENGINE.get(framework, "pytorch"))
    if err := first_error(problems):
        s.tally.miss(gpu.id, 1, 0, Rejection(gpu.id, err.message, "software", gpu.id, alternative=err.alternative))
        return
    s.cache.limited[gpu.id] = tuple(p.message for p in problems)
    formats = _formats(s, gpu)
    if formats is None:
        return
    if not has_price(s, gpu) and s.objective != "fastest":
        s.tally.miss(gpu.id, 3, 0, Rejection(gpu.id, no_price_reason(s, gpu), "price", gpu.id,
                                             alternative="set cost.usd_per_gpu_hour, or list it under constraints.owned"))
        return
    job = Job(gpu, s.node_size(gpu), int(gpu.usable_memory_bytes * (1 - (s.cons.min_headroom or 0.0))), seq_len,
              int(tr.get("global_batch") or S.default_global_batch(sp.task, seq_len)), formats[0], formats[1],
              sp.options("train", "optimizer", ("adamw",)), sp.options("train", "recompute", S.TRAIN_OPTIONS["recompute"]),
              tuple(sp.train.get("micro_batch") or S.TRAIN_OPTIONS["micro_batch"]))
    stack = stack_of(gpu)
    for method in sp.options("train", "method", ("full",)):
        if method == "qlora" and stack not in ("cuda", "rocm"):
            s.tally.miss(gpu.id, 1, 0, Rejection(f"{gpu.id} qlora", f"QLoRA (bitsandbytes) needs CUDA or ROCm; "
                                                 f"{gpu.id} runs {stack}", "software", gpu.id,
                                                 alternative="use LoRA on a 16-bit base"))
            continue
        cs = counts(s, gpu, job.gpn)
        grid = G.for_search(s, job, method, cs)
        s.tally.space_points += grid.size
        for count in cs:
            s.check_time(f"at {count} x {gpu.id}")
            if check_gpus(s.cons, gpu.id, count) or pruned(s, gpu, count, method, job.precision, seq_len):
                s.tally.bound_points += grid.by_count.get(count, 0)
            else:
                _splits(s, job, count, method, grid)


def _formats(s: Search, gpu: Any) -> tuple[str, str] | None:
    """The numeric format and attention kernel this GPU runs (the first the user allows that works),
    or None with the software miss recorded."""
    sp = s.space
    reasons = []
    precision = attention = None
    defaulted = sp.train.get("_precision_defaulted")
    prec_opts = sp.train["precision"] if not defaulted else ("bf16", "fp16")
    for p in prec_opts:
        problems = software_problems(gpu, dtype=p)
        err = first_error(problems) or (problems[0] if (p == "fp8" and problems) else None)  # no fp8 training emulation
        if err is None and (not problems or p == prec_opts[-1] or not defaulted):
            precision = p
            break
        if err is not None:
            reasons.append(err)
    if precision is None and not reasons:
        precision = prec_opts[0]
    attn_opts = sp.train["attention"] if not sp.train.get("_attention_defaulted") else ("flash", "sdpa")
    for a in attn_opts:
        err = first_error(software_problems(gpu, attention=a))
        if err is None:
            attention = a
            break
        reasons.append(err)
    if precision is None or attention is None:
        err = reasons[0]
        s.tally.miss(gpu.id, 1, 0, Rejection(gpu.id, err.message, "software", gpu.id, alternative=err.alternative))
        return None
    return precision, attention


def counts(s: Search, gpu: Any, gpn: int) -> list[int]:
    cons = s.cons
    limit = s.max_gpus
    owned = cons.owned is not None and gpu.id in cons.owned
    if owned:
        limit = min(limit, cons.owned[gpu.id])
    if s.space.counts:
        # counts the user named are capped only by a max_gpus they set, not by the default cap
        default_cap_only = cons.max_gpus is None and not owned
        return [c for c in s.space.counts if default_cap_only or c <= limit]
    out = S.node_aligned_counts(gpn, limit)
    if owned and limit not in out:
        out.append(limit)
    return sorted(out)


def _splits(s: Search, job: Job, count: int, method: str, grid: G.Grid) -> None:
    """Every (tp, cp, ep) split, widest tensor-parallel split first (least memory). No split is
    skipped by a heuristic: a layout is left out only by a proven bound (bounds.py, grid.py)."""
    sp = s.space
    splits = sorted(model_splits(s, count, job.gpn, job.seq_len), key=lambda x: -x[0])
    if method != "full" and not sp.parallel["tp"]:
        # peft adapters train under HF/accelerate: data parallel (DDP/FSDP/ZeRO) only
        splits = [x for x in splits if x[0] == 1 and x[1] == 1] or splits[-1:]
    for tp, cp, ep in splits:
        _pipelines(s, job, count, method, tp, cp, ep, grid)


def model_splits(s: Search, count: int, gpn: int, seq_len: int):
    """(tp, cp, ep) splits valid for the model that divide `count`; named values that are invalid
    are rejected with the reason."""
    sp, model, task = s.space, s.model, s.space.task
    tps = list(sp.parallel["tp"]) if sp.parallel["tp"] else S.powers_of_two(min(gpn, count))
    good_tps = []
    for tp in tps:
        if r := S.tp_reason(model, tp, task):
            if sp.parallel["tp"]:
                s.tally.named_reject(Rejection(f"tp={tp}", r, "layout",
                                               alternative="use a tp that divides the head counts"))
            continue
        if tp > gpn and not sp.parallel["tp"]:
            continue
        good_tps.append(tp)
    cps = sp.parallel["cp"] or ([1, 2, 4, 8] if seq_len >= 32768 and task != "infer" else [1])
    eps = sp.parallel["ep"] or ([1] + [e for e in S.powers_of_two(min(model.num_experts, 64), 2)
                                      if model.num_experts % e == 0] if model.num_experts else [1])
    for tp, cp in itertools.product(good_tps, cps):
        if r := S.cp_reason(seq_len, cp, task):
            if sp.parallel["cp"]:
                s.tally.named_reject(Rejection(f"cp={cp}", r, "layout"))
            continue
        for ep in eps:
            if r := S.ep_reason(model, ep):
                if sp.parallel["ep"]:
                    s.tally.named_reject(Rejection(f"ep={ep}", r, "layout"))
                continue
            if count % (tp * cp) == 0:
                yield tp, cp, ep


def batch_for(target: int, dp: int) -> int:
    """The global batch nearest `target` that `dp` data-parallel ranks run in whole steps of one
    sequence each: dp x round(target / dp), at least dp (ties round down)."""
    k = max(1, (2 * target + dp - 1) // (2 * dp))
    return k * dp


def _exact(global_batch: int, micro_batch: int, dp: int) -> bool:
    """True when whole gradient-accumulation steps give the global batch exactly."""
    return grad_accum_steps(global_batch, micro_batch, dp) * micro_batch * dp == global_batch


def _framework_error(s: Search, gpu: Any, framework: str | None) -> Any:
    """The software error of the framework a layout runs on, if any (None: the scenario's own,
    checked once per GPU in train_gpu)."""
    if framework is None:
        return None
    key = (gpu.id, framework)
    if key not in s.cache.engine_error:
        s.cache.engine_error[key] = first_error(software_problems(gpu, engine=TRAIN_ENGINE.get(framework, "pytorch")))
    return s.cache.engine_error[key]


def _framework_warning(s: Search, gpu: Any, framework: str) -> Any:
    key = (gpu.id, framework, "warning")
    if key not in s.cache.engine_error:
        s.cache.engine_error[key] = next(iter(software_problems(gpu, engine=TRAIN_ENGINE.get(framework, "pytorch"))),
                                         None)
    return s.cache.engine_error[key]


def _options(s: Search, gpu: Any, count: int, par: dict) -> list:
    """The framework options that run this layout on this GPU (misses recorded when none does)."""
    named = F.named_framework(s.space.base)
    opts, why = F.options(named, par, par["dp"] * par["cp"], s.model)
    label = f"{gpu.id} x{count} ({layout_text(par)})"
    good = []
    for o in opts:
        err = _framework_error(s, gpu, o.framework)
        if err is None and named is None and o.framework in ("torchtitan", "deepspeed"):
            # the alternatives to Megatron must be fully supported here: a "limited" FSDP/DeepSpeed
            # (PyTorch/XLA on TPU, Gaudi's fork) runs data-parallel sharding at best, not TP with it
            err = _framework_warning(s, gpu, o.framework)
        if err:
            why_not = Rejection(label, err.message, "software", gpu.id, count, alternative=err.alternative)
            s.tally.miss(gpu.id, 1, 0, why_not)
            continue
        good.append(o)
    if not good and why:
        s.tally.miss(gpu.id, 0, 0, Rejection(label, "; ".join(why), "layout", gpu.id, count))
    return good


def _pipelines(s: Search, job: Job, count: int, method: str, tp: int, cp: int, ep: int, grid: G.Grid) -> None:
    sp, model, gpu = s.space, s.model, job.gpu
    pps = sp.parallel["pp"] or (S.powers_of_two(min(model.num_layers, count // (tp * cp))) if method == "full"
                                else [1])
    for pp in pps:
        if count % (tp * cp * pp):
            continue
        dp = count // (tp * cp * pp)
        if pp_r := S.pp_reason(model, pp):
            if sp.parallel["pp"]:
                s.tally.named_reject(Rejection(f"pp={pp}", pp_r, "layout"))
            continue
        if ep > 1 and (dp * cp) % ep:
            continue
        s.check_time(f"at {count} x {gpu.id} (tp={tp}, pp={pp})")
        par = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp}
        all_opts, _ = F.options(F.named_framework(sp.base), par, dp * cp, model)
        points = {o.framework: grid.by_option.get((count, tp, pp, cp, ep, o.framework), (0.0, 0)) for o in all_opts}
        opts = _options(s, gpu, count, par)
        s.tally.bound_points += sum(points[o.framework][1] for o in all_opts if o not in opts)   # software
        opts = _memory_bound(s, job, count, par, opts, points)
        if not opts:
            continue
        # the global batch is a target: the nearest batch this dp runs in whole steps, and the
        # micro-batches that give exactly that batch
        gb = batch_for(job.global_batch, dp)
        if abs(gb - job.global_batch) > BATCH_TOLERANCE * job.global_batch:
            s.tally.miss(gpu.id, 0, 0, Rejection(
                f"{gpu.id} x{count} dp={dp}", f"the nearest global batch dp={dp} runs is {gb:,} sequences, "
                f"{abs(gb - job.global_batch) / job.global_batch:.0%} from the {job.global_batch:,} asked "
                f"(more than {BATCH_TOLERANCE:.0%})", "layout", gpu.id, count,
                alternative=f"set train.global_batch to {gb:,}, or use fewer or more GPUs"))
            continue
        mbs = tuple(m for m in job.micro_batches if _exact(gb, m, dp))
        if not mbs:
            s.tally.miss(gpu.id, 0, 0, Rejection(
                f"{gpu.id} x{count} dp={dp}", f"no listed micro-batch gives the global batch of {gb:,} sequences "
                f"with dp={dp}", "layout", gpu.id, count))
            continue
        vpp = int(sp.base.get("_parallel_rest", {}).get("vpp", 1))
        if pp > 1 and pipeline_pruned(s, gpu, count, method, job.precision, job.seq_len, pp,
                                      gb // (dp * min(mbs)), vpp):
            s.tally.bound_points += sum(points[o.framework][1] for o in opts)
            continue
        s.tally.layouts += 1
        lay = Layout(count, method, par, mbs, gb, tuple(opts))
        fitting = fitting_techniques(s, job, lay)
        for tech in fitting:
            time_train(s, job, lay, tech)
        # no early stop at the first pipeline depth that fits without recompute: a deeper pipeline
        # also shrinks dp, and with it the data-parallel gradient traffic and the ZeRO stage needed,
        # so it can be cheaper (found by the exhaustiveness test, tests/test_search_exhaustive.py)


def _memory_bound(s: Search, job: Job, count: int, par: dict, opts: list, points: dict) -> list:
    """The framework options of a layout whose batched memory bound (grid.py) fits; the others are
    decided without a scalar estimate (a miss that says "at least" when none is left)."""
    keep = [o for o in opts if points[o.framework][0] <= job.cap]
    out = [o for o in opts if o not in keep]
    if out:
        s.tally.bound_points += sum(points[o.framework][1] for o in out)
        if not keep:
            lb = min(points[o.framework][0] for o in out)
            gpu = job.gpu
            text = (memory_reason(int(lb), gpu.usable_memory_bytes, s.cons.min_headroom)
                    + " (at least: the model states alone, before activations, with every ZeRO stage and "
                      "offload this layout's frameworks offer)")
            s.tally.miss(gpu.id, 2, job.cap / lb, Rejection(f"{gpu.id} x{count} ({layout_text(par)})", text,
                                                            "memory", gpu.id, count))
    return keep


# ---- techniques ------------------------------------------------------------------------------------

def _combos(s: Search, job: Job, lay: Layout) -> list[tuple]:
    """(recompute rank, zero, offload rank, optimizer rank, recompute, offload, optimizer, framework),
    cheapest first, over every framework option of the layout."""
    sp = s.space
    combos = []
    for fi, opt_fw in enumerate(lay.options):
        zeros = sp.parallel["zero"] or opt_fw.zeros
        offloads = sp.parallel["offload"] or opt_fw.offloads
        for rec, z, off, opt in itertools.product(job.recomputes, zeros, offloads, job.optimizers):
            if off == "optimizer+params" and z < 3 and not sp.parallel["offload"]:
                continue
            if F.optimizer_reason(opt_fw.framework, opt) is not None:
                continue
            combos.append((S.RECOMPUTE_RANK[rec], z, S.OFFLOAD_RANK[off], OPT_RANK.get(opt, 0), rec, off, opt,
                           opt_fw.framework, fi))
    combos.sort(key=lambda c: (c[2], sum(c[:4]), c[8], c[:8]))
    return combos


def _section(job: Job, lay: Layout, rec: str, mb: int, opt: str) -> dict:
    return {"method": lay.method, "precision": job.precision, "attention": job.attention,
            "global_batch": lay.global_batch, "recompute": rec, "micro_batch": mb, "optimizer": opt}


def _memory_miss(s: Search, job: Job, lay: Layout, peak: int, par: dict, section: dict) -> None:
    gpu = job.gpu
    text = memory_reason(peak, gpu.usable_memory_bytes, s.cons.min_headroom)
    layout = layout_text(par, {"recompute": section["recompute"], "mb": section["micro_batch"]})
    s.tally.miss(gpu.id, 2, job.cap / peak, Rejection(f"{gpu.id} x{lay.count} ({layout})", text, "memory",
                                                      gpu.id, lay.count))


def _lightest_fits(s: Search, job: Job, lay: Layout, combos: list[tuple]) -> tuple[list[tuple], tuple | None]:
    """The combinations of the frameworks whose lightest combination fits (a lower bound on memory:
    if even that does not fit, nothing of that framework will), and the closest miss."""
    mbs = sorted(lay.micro_batches)
    keep, miss = [], None
    for fi in sorted({c[8] for c in combos}):
        mine = [c for c in combos if c[8] == fi]
        lightest = max(mine, key=lambda c: (c[2], c[1], c[0], c[3]))
        p_l = {**lay.par, "zero": lightest[1], "offload": lightest[5]}
        s_l = _section(job, lay, lightest[4], mbs[0], lightest[6])
        peak = train_memory(s, job.gpu, lay.count, job.gpn, p_l, s_l, lightest[7]).peak_bytes_per_gpu
        if peak <= job.cap:
            keep.extend(mine)
        elif miss is None or peak < miss[0]:
            miss = (peak, p_l, s_l)
    return keep, miss


def fitting_techniques(s: Search, job: Job, lay: Layout) -> list[dict]:
    """Non-dominated technique sets that fit, each with the largest micro-batch that fits."""
    combos = _combos(s, job, lay)
    if not combos:
        return []
    mbs = sorted(lay.micro_batches)
    combos, light_miss = _lightest_fits(s, job, lay, combos)
    if not combos:
        _memory_miss(s, job, lay, *light_miss)
        return []
    found: list[tuple] = []          # (rec_rank, zero, off_rank, opt_rank, mb, rec, off, opt, framework)
    best_miss = None
    # 8-bit optimizer states change the optimisation, so they are a last resort: tried only when
    # nothing with full-precision states fits. Offload is tried beside recompute (offloading with
    # no recompute can be faster than full recompute without offload: the exhaustiveness test
    # found such plans). Sets of different frameworks dominate each other like sets of one
    # framework: a lower ZeRO stage, less recompute or offload and a larger micro-batch are never
    # slower in the speed model.
    for phase in sorted({c[3] for c in combos}):
        if found:
            break
        for combo in (c for c in combos if c[3] == phase):
            best_miss = _try_combo(s, job, lay, mbs, combo, found, best_miss)
    if not found and best_miss is not None:
        _memory_miss(s, job, lay, *best_miss)
    return _minimal(found, lay, mbs)


def _minimal(found: list[tuple], lay: Layout, mbs: list[int]) -> list[dict]:
    minimal = [f for f in found if not any(
        g is not f and g[0] <= f[0] and g[1] <= f[1] and g[2] <= f[2] and g[3] <= f[3] and g[4] >= f[4]
        and g[:5] != f[:5] for g in found)]
    out, seen = [], set()
    for f in minimal:
        # without a pipeline the largest micro-batch that fits (bigger GEMMs, fewer steps, never
        # slower in the speed model); a pipeline also tries the smallest (more micro-batches per
        # step, a smaller bubble), so neither is assumed better
        for mb in ((mbs[0], f[4]) if lay.par["pp"] > 1 else (f[4],)):
            key = (f[5], f[1], f[6], f[7], mb)
            if key not in seen:
                seen.add(key)
                out.append({"recompute": f[5], "zero": f[1], "offload": f[6], "optimizer": f[7], "micro_batch": mb,
                            "framework": f[8]})
    return out


def _try_combo(s: Search, job: Job, lay: Layout, mbs: Sequence[int], combo: tuple, found: list, best_miss):
    """Grow the micro-batch of one technique combination until it no longer fits; record the fit."""
    rr, z, orank, oprank, rec, off, opt, fw, _ = combo

    def covered(mb: int) -> bool:
        return any(f[0] <= rr and f[1] <= z and f[2] <= orank and f[3] <= oprank and f[4] >= mb for f in found)
    if covered(mbs[-1]):
        return best_miss
    best_mb = None
    for mb in mbs:
        if covered(mb):
            best_mb = mb          # an at-least-as-good fitting set already covers this mb
            continue
        section = _section(job, lay, rec, mb, opt)
        p = {**lay.par, "zero": z, "offload": off}
        peak = train_memory(s, job.gpu, lay.count, job.gpn, p, section, fw).peak_bytes_per_gpu
        if peak <= job.cap:
            best_mb = mb
        else:
            if best_miss is None or peak < best_miss[0]:
                best_miss = (peak, p, section)
            break
    if best_mb is not None:
        found.append((rr, z, orank, oprank, best_mb, rec, off, opt, fw))
    return best_miss


def time_train(s: Search, job: Job, lay: Layout, tech: dict) -> None:
    gpu, count, method, fw = job.gpu, lay.count, lay.method, tech["framework"]
    vpp = int(s.space.base.get("_parallel_rest", {}).get("vpp", 1))
    m = lay.global_batch // (lay.par["dp"] * tech["micro_batch"])
    if candidate_hopeless(s, gpu, count, method, job.precision, job.seq_len, lay.par["pp"], m, vpp):
        s.tally.bound_points += 1          # proven dominated before timing (bounds.py)
        return
    par = {**lay.par, "zero": tech["zero"], "offload": tech["offload"]}
    section = _section(job, lay, tech["recompute"], tech["micro_batch"], tech["optimizer"])
    _time_plan(s, job, lay, tech, par, section)
    group = node_shard_group(s, job, lay, tech)
    if group is not None:
        # hybrid sharding: the same plan with FSDP within one node and replicas across nodes, if it fits
        hybrid = {**par, "shard_group": group}
        if train_memory(s, gpu, count, job.gpn, hybrid, section, fw).peak_bytes_per_gpu <= job.cap:
            _time_plan(s, job, lay, tech, hybrid, section)


def node_shard_group(s: Search, job: Job, lay: Layout, tech: dict) -> int | None:
    """The one hybrid-shard candidate of a ZeRO-3 plan whose data-parallel ranks span nodes: a shard group of
    one node's GPUs (gpus_per_node / (tp x cp) data-parallel ranks), replicated across nodes, so the per-layer
    all-gathers and reduce-scatters stay on the node's link and only the gradient shards cross the network.
    Only on the frameworks whose launch writes it (torchtitan, HF accelerate), without expert parallelism."""
    par = lay.par
    fw = tech["framework"] or s.space.base.get("framework", "hf")
    if tech["zero"] != 3 or par["ep"] > 1 or fw not in ("torchtitan", "hf"):
        return None
    per_group = par["tp"] * par["cp"]
    if job.gpn % per_group:
        return None
    group = job.gpn // per_group
    return group if 1 < group < par["dp"] and par["dp"] % group == 0 else None


def _time_plan(s: Search, job: Job, lay: Layout, tech: dict, par: dict, section: dict) -> None:
    gpu, count, method, fw = job.gpu, lay.count, lay.method, tech["framework"]
    scn = fast(s, gpu, count, job.gpn, par, section, fw)
    mem = train_memory(s, gpu, count, job.gpn, par, section, fw)      # capacity set for the plans shown
    perf = performance(s, scn, gpu, mem)
    cost = quick_cost(s, gpu, count, perf)
    cv, tv, upm = values(perf, cost, count, "train", 0, False)
    extra = {"mb": tech["micro_batch"]} if tech["recompute"] == "none" else \
        {"recompute": tech["recompute"], "mb": tech["micro_batch"]}
    if lay.global_batch != job.global_batch:
        extra["gb"] = lay.global_batch
    layout = layout_text(par, extra)
    if tech["optimizer"] != "adamw":
        layout += f", {tech['optimizer']}"
    summary = f"{count} x {gpu.id}" + (f" [{method}]" if method != "full" else "") + (f" ({layout})" if layout else "")
    if fw and "framework" not in s.space.base:
        summary += f" on {fw}"
    notes = s.cache.limited.get(gpu.id, ())
    limited = bool(notes)
    if lay.global_batch != job.global_batch:
        notes += (batch_note(job.global_batch, lay.global_batch, par["dp"]),)
    accept(s, Cand(gpu, count, scn, mem, perf, cost, cv, tv, upm, (gpu.id, method), summary,
                   s.pref(method=method) * (LIMITED_SUPPORT_PENALTY if limited else 1.0), notes))


def batch_note(target: int, achieved: int, dp: int) -> str:
    return (f"global batch {achieved:,} sequences instead of the {target:,} asked: the nearest batch that "
            f"dp={dp} runs in whole steps ({achieved // dp} sequences per data-parallel rank per step)")

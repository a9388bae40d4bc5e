"""What-if: for one concrete plan, what each memory-saving technique would save and what it would
cost in time (issue 6). Each row changes one thing relative to the scenario as given.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import GpuplanError
from ..scenario import Scenario
from ..techniques import techniques_for


def _variants(scn: Scenario) -> list[tuple[str, dict[str, Any], str]]:
    """(technique, nested update, note) for every single change of the one techniques catalog."""
    return [(t.name, t.changes, f"{t.note}; {t.tradeoff}") for t in techniques_for(scn)]


def _fit_moves(scn: Scenario, allow_method_change: bool) -> list[tuple[str, dict[str, Any], str]]:
    """The changes the fit path may take: they free memory without changing the workload."""
    return [(t.name, t.changes, t.note) for t in techniques_for(scn)
            if t.saves_memory and not t.changes_workload and (allow_method_change or not t.changes_method)]


def _time(perf: Any, training: bool) -> float | None:
    return perf.step_time_s if training else perf.tpot_s


def whatif(scenario: Scenario | Mapping[str, Any] | str) -> list[dict[str, Any]]:
    """Rows: technique, what it changes, peak memory, memory saved, fits, time per step (training) or
    per output token (serving), and the time change relative to the scenario (+0.25 = 25 % slower)."""
    from ..pipeline import as_scenario, evaluate as estimate
    scn = as_scenario(scenario)
    base = estimate(scn)
    training = scn.is_training
    t0 = _time(base.performance, training)
    rows = [{"technique": "as given", "change": {}, "peak_bytes_per_gpu": base.memory.peak_bytes_per_gpu,
             "saved_bytes": 0, "fits": base.memory.fits, "time_s": t0, "time_change": 0.0,
             "usd_per_million_tokens": base.cost.usd_per_million_tokens, "note": "baseline", "error": None}]
    for name, update, note in _variants(scn):
        try:
            est = estimate(scn.replace(**update))
        except GpuplanError as err:
            rows.append({"technique": name, "change": update, "peak_bytes_per_gpu": None, "saved_bytes": None,
                         "fits": None, "time_s": None, "time_change": None, "usd_per_million_tokens": None,
                         "note": note, "error": err.message})
            continue
        t = _time(est.performance, training)
        rows.append({"technique": name, "change": update, "peak_bytes_per_gpu": est.memory.peak_bytes_per_gpu,
                     "saved_bytes": base.memory.peak_bytes_per_gpu - est.memory.peak_bytes_per_gpu,
                     "fits": est.memory.fits, "time_s": t,
                     "time_change": (t / t0 - 1.0) if (t and t0) else None,
                     "usd_per_million_tokens": est.cost.usd_per_million_tokens, "note": note, "error": None})
    return rows


def path_to_fit(scenario: Scenario | Mapping[str, Any] | str, max_steps: int = 5) -> list[dict[str, Any]]:
    """The fewest changes (greedy) that make the scenario fit on its hardware, keeping the training
    method (full fine-tune stays full) when that is possible and switching to LoRA/QLoRA only when not.

    At each step, among single changes of the current plan, take the one that fits with the least
    slowdown; if none fits yet, the one that saves the most memory per unit of slowdown. Returns the
    steps taken (technique, peak after, fits after, time change against the scenario as given);
    empty if it already fits or nothing helps.
    """
    keep = _greedy_fit(scenario, max_steps, allow_method_change=False)
    if keep and keep[-1].get("fits"):
        return keep
    return _greedy_fit(scenario, max_steps, allow_method_change=True) or keep


def _greedy_fit(scenario: Scenario | Mapping[str, Any] | str, max_steps: int,
                allow_method_change: bool) -> list[dict[str, Any]]:
    from ..pipeline import as_scenario, evaluate as estimate
    scn = as_scenario(scenario)
    base = estimate(scn)
    t0 = _time(base.performance, scn.is_training)
    steps: list[dict[str, Any]] = []
    current, peak = scn, base.memory.peak_bytes_per_gpu
    fits = base.memory.fits
    while not fits and len(steps) < max_steps:
        options = []
        for name, update, note in _fit_moves(current, allow_method_change):
            try:
                cand = current.replace(**update)
                est = estimate(cand)
            except GpuplanError:
                continue
            saved = peak - est.memory.peak_bytes_per_gpu
            if saved <= 0:
                continue
            t = _time(est.performance, scn.is_training)
            slowdown = (t / t0 - 1.0) if (t and t0) else 0.0
            options.append((est.memory.fits, slowdown, saved, name, note, cand, est))
        if not options:
            break
        fitting = [o for o in options if o[0]]
        if fitting:
            best = min(fitting, key=lambda o: o[1])
        else:
            best = max(options, key=lambda o: o[2] / (1.0 + max(o[1], 0.0)))
        _, slowdown, saved, name, note, current, est = best
        peak, fits = est.memory.peak_bytes_per_gpu, est.memory.fits
        steps.append({"technique": name, "note": note, "peak_bytes_per_gpu": peak, "saved_bytes": saved,
                      "fits": fits, "time_change": slowdown})
    return steps if fits else steps + [{"technique": None, "fits": False}] if steps else []


# ---- ways to make a plan that does not fit fit (gpuplan memory, rl-plan, estimate) ----------------------------

def _time_per_token(est) -> float | None:
    """Seconds per token of the whole plan: training tokens (all GPUs) or one output token (serving)."""
    perf = est.performance
    if est.scenario.is_training:
        total = (perf.tokens_per_s_per_gpu or 0.0) * est.scenario.hardware.count
        return 1.0 / total if total > 0 else None
    return perf.tpot_s


def _more_gpus(est) -> dict | None:
    """The fewest GPUs of this type that fit it: training scales data parallel with ZeRO-3 (the weights,
    gradients and optimizer states shard across the GPUs; tensor/pipeline sizes as given), serving scales
    tensor parallel. Powers of two up to 4,096 GPUs."""
    from ..errors import GpuplanError
    from ..pipeline import evaluate
    scn, n = est.scenario, 2
    group = scn.parallel.tp * scn.parallel.pp * scn.parallel.cp
    while n <= 4096:
        try:
            if scn.is_training:
                cand = scn.replace(hardware={"count": n * group}, parallel={"dp": None, "zero": 3})
            else:
                cand = scn.replace(hardware={"count": n}, parallel={"tp": n, "dp": None})
            if cand.hardware.count > scn.hardware.count:
                found = evaluate(cand)
                if found.memory.fits:
                    return _alternative(est, found, f"{cand.hardware.count} x {est.gpu.id}" + (
                        f" with ZeRO-3 (dp={cand.dp})" if scn.is_training else f" with tensor parallel (tp={n})"),
                        "more GPUs of this type; every GPU holds a shard")
        except GpuplanError:
            pass
        n *= 2
    return None


def _alternative(base, est, change: str, note: str) -> dict:
    t0, t = _time_per_token(base), _time_per_token(est)
    return {"change": change, "gpus": est.scenario.hardware.count, "peak_bytes_per_gpu": est.memory.peak_bytes_per_gpu,
            "capacity_bytes_per_gpu": est.memory.capacity_bytes_per_gpu, "fits": est.memory.fits,
            "time_per_token_change": (t / t0 - 1.0) if (t and t0) else None, "note": note}


def fit_alternatives(est) -> list[dict]:
    """Ways to make a plan that does not fit fit, each applied to the scenario as given and evaluated on its
    own: every single technique that fits alone, the fewest techniques together (when no single one does),
    and more GPUs of the same type."""
    from ..pipeline import evaluate
    out = []
    for row in whatif(est.scenario)[1:]:
        if row.get("fits") and not row.get("error"):
            alt = evaluate(est.scenario.replace(**row["change"]))
            out.append(_alternative(est, alt, row["technique"], row["note"]))
    if not out:
        steps = [s for s in path_to_fit(est.scenario) if s.get("technique")]
        if steps:
            cand = est.scenario
            for step in steps:             # replay the path: each step is one technique of the catalog
                change = next((t.changes for t in techniques_for(cand) if t.name == step["technique"]), None)
                if change is None:
                    break
                cand = cand.replace(**change)
            out.append(_alternative(est, evaluate(cand), " + ".join(s["technique"] for s in steps),
                                    "these changes together (no single one fits)"))
    more = _more_gpus(est)
    if more:
        out.append(more)
    return out


def fit_advice(est, alternatives: list[dict] | None = None) -> str:
    """The alternatives as text: each a separate way to make it fit, with its own result."""
    from ..units import fmt_bytes
    alts = fit_alternatives(est) if alternatives is None else alternatives
    fitting = [a for a in alts if a["fits"]]
    rl = est.scenario.train is not None and est.scenario.train.rl is not None
    # an RL scenario's recommend places rollout and training on the scenario's GPUs; other GPU types: compare
    search = ("`gpuplan compare SCENARIO --gpus A,B` weighs other GPU types" if rl else
              "`gpuplan recommend` searches GPUs and layouts")
    if not fitting:
        return ("To make it fit: no single memory-saving technique, no combination of them and no number of "
                f"{est.gpu.id} GPUs up to 4,096 fits it as configured; try " + (
                    "`gpuplan compare SCENARIO --gpus A,B` (other GPU types)." if rl else
                    "`gpuplan recommend` (other GPUs, methods and layouts)."))
    lines = ["To make it fit, any one of these (each applied to the scenario as given, on its own):"]
    for i, a in enumerate(fitting, 1):
        change = a["time_per_token_change"]
        timing = "" if change is None else f"; time per token {change:+.0%}"
        lines.append(f"  {i}. {a['change']}: peak {fmt_bytes(a['peak_bytes_per_gpu'])} of "
                     f"{fmt_bytes(a['capacity_bytes_per_gpu'])} per GPU on {a['gpus']} GPU{'s' if a['gpus'] > 1 else ''}"
                     f"{timing} - {a['note']}")
    lines.append(f"`gpuplan whatif` lists every single change; {search}.")
    return "\n".join(lines)

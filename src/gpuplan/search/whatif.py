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

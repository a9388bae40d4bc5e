"""Plain-text rendering shared by the CLI (and the web page's text export)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from .estimate.results import MEMORY_COMPONENTS
from .units import GiB, fmt_bytes, fmt_count, fmt_seconds


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)
    def fmt(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(cells[0]), sep] + [fmt(r) for r in cells[1:]])


def bar(fraction: float, width: int = 30) -> str:
    fraction = max(0.0, fraction)
    full = min(width, int(round(fraction * width)))
    return "█" * full + "·" * (width - full) + (" !" if fraction > 1 else "")


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)


def memory_report(mem, title: str = "") -> str:
    lines = [title] if title else []
    peak, cap = mem.peak_bytes_per_gpu, mem.capacity_bytes_per_gpu
    rows = []
    for k in MEMORY_COMPONENTS:
        v = mem.components.get(k, 0)
        if v:
            rows.append((k, fmt_bytes(v), f"{100 * v / peak:5.1f} %", bar(v / cap if cap else 0, 24)))
    rows.append(("peak per GPU", fmt_bytes(peak), "100.0 %", bar(peak / cap if cap else 0, 24)))
    lines.append(table(rows, ["component", "bytes", "share", "of capacity"], "lrrl"))
    verdict = "fits" if mem.fits else "does NOT fit"
    lines.append(f"\nPeak {fmt_bytes(peak)} at {mem.phase}; capacity {fmt_bytes(cap)}: {verdict} "
                 f"(headroom {fmt_bytes(mem.headroom_bytes)}).")
    if mem.cpu_bytes:
        lines.append(f"Host (CPU) memory needed: {fmt_bytes(mem.cpu_bytes)}.")
    if mem.limits:
        lines.append("Limits: " + ", ".join(f"{k}={fmt_count(v) if isinstance(v, (int, float)) and 'bytes' not in k else fmt_bytes(v) if v is not None else '-'}"
                                             for k, v in mem.limits.items()))
    lines += _error_bar(mem, "memory")
    for n in mem.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _error_bar(result, what: str) -> list[str]:
    u = getattr(result, "uncertainty", None)
    return [f"error bar ({what}): {u.text()}"] if u is not None else []


def performance_report(perf) -> str:
    rows = []
    for key, fmt in (("step_time_s", fmt_seconds), ("tokens_per_s_per_gpu", fmt_count), ("mfu", _pct), ("hfu", _pct),
                     ("time_to_train_s", fmt_seconds), ("ttft_s", fmt_seconds), ("tpot_s", fmt_seconds),
                     ("output_tokens_per_s", fmt_count)):
        v = getattr(perf, key, None)
        if v is not None:
            rows.append((key, fmt(v)))
    out = table(rows, ["metric", "value"])
    for line in _error_bar(perf, "speed"):
        out += "\n" + line
    if perf.breakdown:
        out += "\n\n" + table([(k, fmt_seconds(v)) for k, v in perf.breakdown.items()], ["time goes to", "seconds"])
    for n in perf.notes:
        out += f"\nnote: {n}"
    return out


def cost_report(cost) -> str:
    rows = [(k, f"${v:,.2f}" if v is not None else "-") for k, v in
            (("usd_per_hour", cost.usd_per_hour), ("usd_total", cost.usd_total),
             ("usd_per_million_tokens", cost.usd_per_million_tokens))]
    out = table(rows, ["cost", "USD"])
    if cost.basis:
        out += f"\nbasis: {cost.basis}"
    for line in _error_bar(cost, "cost, from the time"):
        out += "\n" + line
    return out


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


def estimate_report(est) -> str:
    s = est.scenario
    m = est.model
    head = (f"{m.name} ({fmt_count(m.params_total)} params) · task {s.task} · "
            f"{s.hardware.count}x {est.gpu.id} · dp={s.dp} tp={s.parallel.tp} pp={s.parallel.pp} "
            f"zero={s.parallel.zero}")
    parts = [head, "", memory_report(est.memory), "", performance_report(est.performance), "", cost_report(est.cost)]
    train = getattr(s, "train", None)
    if train is not None and getattr(train, "objective", "sft") != "sft":   # post-training: per-phase table
        parts += ["", posttrain_phases(est)]
    for w in est.warnings:
        parts.append(f"warning: {w}")
    return "\n".join(parts)


def posttrain_phases(est) -> str:
    """Post-training (estimate/posttrain.py, estimate/rl.py): each phase's seconds per step and the peak
    memory per GPU while it runs, and the phase that bounds the step."""
    from .estimate.posttrain import phase_table
    rows = [(k, fmt_bytes(b) if b is not None else None, fmt_seconds(t)) for k, b, t in
            phase_table(est.memory, est.performance)]
    out = table(rows, ["phase", "peak memory / GPU", "time / step"], "lrr")
    bound = (est.performance.details or {}).get("bound_by")
    return f"{est.scenario.train.objective} step, phase by phase\n" + out + (f"\nstep bounded by: {bound}" if bound else "")


def gib(n: float) -> str:
    return f"{n / GiB:.1f}"


def lines(items: Iterable[str]) -> str:
    return "\n".join(items)

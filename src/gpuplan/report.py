"""Text rendering of results for the CLI: plain text, or rich tables when the CLI runs on a terminal
(gpuplan.term decides; library callers always get the plain text)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from . import term
from .estimate.results import MEMORY_COMPONENTS
from .explain import layout_text
from .units import GiB, fmt_bytes, fmt_count, fmt_seconds


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    """A table as text: on a terminal drawn by rich (fitted to its width, coloured where it helps, see
    gpuplan.term); otherwise plain columns padded with spaces, the stable text that pipes, tests and
    docs/guide.md read. The cells are the same either way."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    align = align or "l" + "r" * (len(headers) - 1)
    if term.settings().styled:
        return term.rich_table(cells[0], cells[1:], align)
    return plain_table(cells, align)


def plain_table(cells: list[list[str]], align: str) -> str:
    """Header, a dashed rule, then the rows; each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
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
    width = term.bar_width(24)
    for k in MEMORY_COMPONENTS:
        v = mem.components.get(k, 0)
        if v:
            rows.append((k, fmt_bytes(v), f"{100 * v / peak:5.1f} %", bar(v / cap if cap else 0, width)))
    rows.append(("peak per GPU", fmt_bytes(peak), "100.0 %", bar(peak / cap if cap else 0, width)))
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
        # training: every entry is per optimizer step (estimate/speed.py)
        unit = "seconds per optimizer step" if perf.step_time_s is not None else "seconds"
        out += "\n\n" + table([(k, fmt_seconds(v)) for k, v in perf.breakdown.items()], ["time goes to", unit])
    for n in perf.notes:
        out += f"\nnote: {n}"
    return out


def token_prices(usd_per_million_output: float | None, prompt_len: int, output_len: int) -> dict[str, float | None]:
    """Serving's price per million tokens three ways, from the price per million output tokens (the plan's whole
    hourly cost over its output tokens): over the input tokens instead (each request reads prompt_len tokens for
    output_len it writes, so input tokens flow prompt_len/output_len times as fast), and over both together."""
    if usd_per_million_output is None:
        return {"output": None, "input": None, "blended": None}
    return {"output": usd_per_million_output,
            "input": usd_per_million_output * output_len / prompt_len,
            "blended": usd_per_million_output * output_len / (prompt_len + output_len)}


def _usd(v: float | None) -> str:
    if v is None:
        return "-"
    return f"${v:,.2f}" if abs(v) >= 0.1 or v == 0 else f"${v:,.4f}"


def cost_report(cost, scenario=None) -> str:
    rows: list[tuple[str, str]] = [("usd_per_hour", _usd(cost.usd_per_hour)), ("usd_total", _usd(cost.usd_total))]
    if scenario is not None and scenario.task == "infer" and scenario.infer is not None:
        prices = token_prices(cost.usd_per_million_tokens, scenario.infer.prompt_len, scenario.infer.output_len)
        rows += [("per million output tokens (whole cost on output)", _usd(prices["output"])),
                 ("per million input tokens (whole cost on input)", _usd(prices["input"])),
                 ("per million tokens, input + output (blended)", _usd(prices["blended"]))]
    else:
        label = "per million trained tokens" if scenario is not None else "usd_per_million_tokens"
        rows.append((label, _usd(cost.usd_per_million_tokens)))
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
    head = f"{m.name} ({fmt_count(m.params_total)} params) · task {s.task} · {layout_text(s, est.gpu.id)}"
    parts = [head, "", memory_report(est.memory), "", performance_report(est.performance), "", cost_report(est.cost, s)]
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


def load_report(load: dict) -> str:
    """Serving under load (pipeline.serving_load): the percentile table and the rates."""
    def rate(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}/s"
    arrival = load.get("arrival")
    n = load.get("replicas") or 1
    each = load.get("rate_per_replica_s")
    head = (f"Serving under load ({load.get('engine')}, {arrival} arrivals"
            + (f" at {load['rate_per_s']:.3g} requests/s" if arrival in ("poisson", "gamma") else "")
            + (f" over {n} replicas of {load.get('gpus_per_replica')} GPU(s)"
               + (f", {each:.3g}/s each" if each is not None and arrival in ("poisson", "gamma") else "")
               + f"; {load.get('requests')} requests simulated on one):" if n > 1 else
               f", {load.get('requests')} requests simulated, one replica of {load.get('gpus_per_replica')} GPU(s)):"))
    rows = [(name, *(fmt_seconds((load.get(key) or {}).get(p)) for p in ("mean", "p50", "p90", "p99")))
            for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("end-to-end", "e2e_s"), ("queueing", "queue_s"))]
    out = [head, table(rows, ["latency", "mean", "p50", "p90", "p99"]), ""]
    out.append(f"throughput: {rate(load.get('requests_per_s'))} requests, {fmt_count(load.get('output_tokens_per_s'))} "
               f"output tok/s, {fmt_count(load.get('total_tokens_per_s'))} total tok/s")
    kv = load.get("kv_occupancy") or {}
    if kv.get("mean") is not None:
        out.append(f"KV pool: {kv['mean']:.0%} used on average, {kv['max']:.0%} at most; "
                   f"{load.get('preemptions', 0)} preemption(s)")
    slo = load.get("slo")
    if slo:
        parts = [f"TTFT <= {fmt_seconds(slo['ttft_s'])}" if slo.get("ttft_s") else "",
                 f"TPOT <= {fmt_seconds(slo['tpot_s'])}" if slo.get("tpot_s") else ""]
        out.append(f"SLO ({' and '.join(p for p in parts if p)} per request; p{slo['percentile']:g} for the rate "
                   f"search): goodput {rate(load.get('goodput_requests_per_s'))}")
    dg = load.get("disaggregation")
    if dg:
        col = dg["colocated"]
        out.append(f"disaggregated: {dg['prefill_instances']} prefill + {dg['decode_instances']} decode instance(s), "
                   f"{dg['gpus']} GPUs; KV transfer over {dg['link']} {fmt_seconds(dg['kv_transfer_s']['mean'])} "
                   "on average")
        out.append(table([(name, *(fmt_seconds((src.get(key) or {}).get(p)) for p in ("mean", "p50", "p99")))
                          for name, src, key in (("TTFT disaggregated", load, "ttft_s"),
                                                 (f"TTFT colocated x{col['replicas']}", col, "ttft_s"),
                                                 ("TPOT disaggregated", load, "tpot_s"),
                                                 (f"TPOT colocated x{col['replicas']}", col, "tpot_s"))],
                         ["same GPUs", "mean", "p50", "p99"]))
        out.append(f"colocated: {rate(col.get('requests_per_s'))} requests, goodput "
                   f"{rate(col.get('goodput_requests_per_s'))}" + (", OVERLOADED" if col.get("overloaded") else ""))
    if load.get("overloaded") and dg:
        out.append("OVERLOADED: the disaggregated system's queue grows without bound at this rate.")
    elif load.get("overloaded"):
        out.append(f"OVERLOADED: the queue grows without bound above {rate(load.get('capacity_per_s'))}.")
    if load.get("capacity_per_s") is not None:
        out.append(f"capacity (highest rate with a bounded queue): {rate(load['capacity_per_s'])} per replica")
    if load.get("max_rate_meeting_slo_per_s") is not None:
        out.append(f"highest rate meeting the SLO: {rate(load['max_rate_meeting_slo_per_s'])} per replica"
                   f" ({load.get('replicas', 1)} replica(s) in this plan)")
    out += [f"note: {n}" for n in load.get("notes", [])]
    return "\n".join(out)

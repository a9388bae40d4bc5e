"""CLI glue for `gpuplan recommend`, `gpuplan compare` and `gpuplan whatif` (wired in by gpuplan.cli)."""
from __future__ import annotations

import argparse
from typing import Any

from ..term import emit, settings
from ..units import DAY_S, GiB


def _limit(flag: str, high: float, field: str, **kw: Any):
    """A positive, finite constraint value up to `high`, named by its constraint field in errors."""
    from ..cliargs import real_number
    return real_number(flag, 0, high, field=f"constraints.{field}", **kw)


def add_parsers(sub: Any) -> None:
    from ..cliargs import MAX_GPUS, add_scenario_args, positive_int
    from .presets import PRESETS
    from .rl_search import DEFAULT_STEPS
    s = sub.add_parser("recommend", help="which GPUs, how many, configured how: ranked plans with reasons")
    add_scenario_args(s)
    s.add_argument("--objective", default=None,
                   help="cheapest | fastest | cost_per_token | weighted:cost=0.7,time=0.3")
    s.add_argument("--budget", type=_limit("--budget", 1e15, "budget_usd"), metavar="USD",
                   help="total budget for the run")
    s.add_argument("--budget-per-hour", type=_limit("--budget-per-hour", 1e12, "budget_usd_per_hour"), metavar="USD",
                   help="most US dollars per hour for all GPUs together")
    s.add_argument("--deadline", type=_limit("--deadline", 36500, "deadline_days"), metavar="DAYS",
                   help="training: finish within this many days")
    s.add_argument("--max-gpus", type=positive_int("--max-gpus", MAX_GPUS, "constraints.max_gpus"), metavar="N",
                   help="consider at most N GPUs in one plan")
    s.add_argument("--gpus", default=None, help="comma-separated GPU ids to consider")
    s.add_argument("--owned", default=None, help="GPUs you own, e.g. rtx-4090=4,a100-sxm-80gb=8")
    s.add_argument("--providers", default=None, help="comma-separated cloud providers")
    s.add_argument("--spot", action="store_true", default=None, help="allow spot prices")
    s.add_argument("--ttft", type=_limit("--ttft", 86400, "ttft_s"), metavar="S",
                   help="serving: time-to-first-token target")
    s.add_argument("--tpot", type=_limit("--tpot", 3600, "tpot_s"), metavar="S",
                   help="serving: time-per-output-token target")
    s.add_argument("--requests-per-s", type=_limit("--requests-per-s", 1e9, "requests_per_s"), metavar="RPS",
                   help="serving: requests per second to sustain")
    s.add_argument("--tokens-per-s", type=_limit("--tokens-per-s", 1e12, "tokens_per_s"),
                   help="serving: output tokens/s to sustain")
    s.add_argument("--headroom", type=_limit("--headroom", 1, "min_headroom", low_open=False, high_open=True),
                   help="share of GPU memory to keep free, from 0 to below 1 (0.1 = 10%%)")
    s.add_argument("--preset", default=None, choices=sorted(PRESETS), help="use-case preset (overridable)")
    s.add_argument("--top", type=positive_int("--top", 1000), default=10, help="plans to show (1 to 1,000)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--plot", metavar="FILE", help="write the cost/time Pareto chart (.svg, or .png with matplotlib)")
    s.set_defaults(func=run_recommend)

    s = sub.add_parser("compare", help="several GPUs side by side for one workload")
    add_scenario_args(s)
    s.add_argument("--gpus", required=True, help="comma-separated GPU ids")
    s.add_argument("--steps", type=positive_int("--steps", 10_000_000), default=DEFAULT_STEPS,
                   help="RL objectives (grpo, ppo, rloo): steps to price each GPU's cheapest placement for "
                        "(default 1000)")
    s.add_argument("--sync-only", action="store_true", help="RL objectives: leave out off-policy (async) split "
                                                            "placements")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_compare)

    s = sub.add_parser("whatif", help="memory saved and time cost of each memory-saving technique")
    add_scenario_args(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_whatif)

    s = sub.add_parser("rl-plan", help="RL (grpo/ppo/rloo): colocated or split rollout/training GPUs, cheapest "
                       "for N steps, and what group size, response length and the reference cost")
    add_scenario_args(s)
    s.add_argument("--steps", type=positive_int("--steps", 10_000_000), default=DEFAULT_STEPS,
                   help="RL steps to price (default 1000)")
    s.add_argument("--sync-only", action="store_true", help="leave out off-policy (async) split placements")
    s.add_argument("--top", type=positive_int("--top", 1000), default=10, help="plans to show (1 to 1,000)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_rl_plan)


def _split(text: str | None) -> list[str] | None:
    from ..cliargs import split_list
    return split_list(text)


def _owned(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    import argparse
    from ..cliargs import MAX_GPUS, positive_int
    from ..errors import InputError
    out = {}
    for part in _split(text) or []:
        name, _, n = part.partition("=")
        try:
            out[name.strip()] = positive_int(f"--owned {name.strip()}=N", MAX_GPUS)(n)
        except argparse.ArgumentTypeError as err:
            raise InputError(f"--owned '{part[:40]}'", f"is not gpu=count: {err}", "write e.g. --owned rtx-4090=4") from None
    return out


def partial_from_args(args: argparse.Namespace) -> dict:
    from ..cliargs import partial_from_args as build
    return build(args)


def run_recommend(args: argparse.Namespace) -> int:
    from ..cliargs import NO_PLAN, OK, print_result
    from ..plot import plot_path
    from . import recommend
    target = plot_path(args.plot, "recommend") if args.plot else None
    data = partial_from_args(args)
    from .recommend import is_rl
    if is_rl(data):     # an RL job's plans are rollout/training placements (rl_search.py)
        from .rl_search import DEFAULT_STEPS
        _check_rl_recommend(args, data)
        args.steps, args.sync_only = getattr(args, "steps", DEFAULT_STEPS), getattr(args, "sync_only", False)
        if not args.json:      # --json prints the record alone
            emit("RL objective: the plans are placements of rollout and training on the scenario's GPUs "
                 "(the same search as `gpuplan rl-plan`, cheapest for 1,000 steps; set --steps there).", info=True)
        return run_rl_plan(args)
    rec = recommend(data, objective=args.objective, top=args.top, gpus=_split(args.gpus),
                    preset=args.preset, budget_usd=args.budget, budget_usd_per_hour=args.budget_per_hour,
                    deadline_days=args.deadline, max_gpus=args.max_gpus, owned=_owned(args.owned),
                    providers=_split(args.providers), spot=args.spot, ttft_s=args.ttft, tpot_s=args.tpot,
                    requests_per_s=args.requests_per_s, tokens_per_s=args.tokens_per_s,
                    min_headroom=args.headroom, progress=settings().progress)
    if target is not None:
        write_plot(rec, str(target.path))
    if args.json:
        print_result("recommend", rec.to_json())
    else:
        emit(recommendation_text(rec))
        if target is not None:
            emit(f"\nPareto chart written to {target.path}", info=True)
    return OK if rec.plans else NO_PLAN


def _fmt_time(s: float | None, metric: str) -> str:
    if s is None:
        return "-"
    if metric == "request_latency_s":
        return f"{s:.2f} s"
    if metric == "s_per_billion_tokens":
        return f"{s / 3600:.1f} h/Btok"
    if s >= 2 * DAY_S:
        return f"{s / DAY_S:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def _fmt_usd(x: float | None) -> str:
    if x is None:
        return "-"
    return f"${x:,.0f}" if x >= 1000 else f"${x:,.2f}"


# a fitting plan whose peak is exactly the capacity: the allocator's elastic reserve was capped there
# (estimate/memory.py _finish), which the table marks so that 100 % does not read as an OOM
FULL_MARK = "*"
FULL_NOTE = (f"{FULL_MARK} the peak reaches the capacity only because the caching allocator's stranded segments are "
             "capped at the room left: that reserve is elastic (freed before an OOM), so the plan fits")


def memory_cell(peak: float, capacity: float) -> str:
    """'peak/capacity' in GiB with enough decimals that a plan with headroom never reads as full."""
    if peak == capacity:
        return f"{peak / GiB:.1f}{FULL_MARK}/{capacity / GiB:.1f}"
    for digits in (1, 2):
        a, b = f"{peak / GiB:.{digits}f}", f"{capacity / GiB:.{digits}f}"
        if a != b or peak >= capacity:
            return f"{a}/{b}"
    return f"<{b}/{b}"


def _per_gpu_hour(cost: dict) -> float | None:
    """The rented price per GPU-hour of a plan (its offering's price over the GPUs it bills)."""
    rent = (cost.get("details") or {}).get("rent")
    if rent and rent.get("gpus_billed"):
        return rent["usd_per_hour"] / rent["gpus_billed"]
    return None


def offering_notes(plans: list) -> list[str]:
    """A note for each GPU type whose per-GPU hourly price differs between plan sizes: the cheapest offering
    is picked per GPU count, so a different instance (often another provider) prices each size."""
    by_gpu: dict[str, dict[float, tuple[int, str]]] = {}
    for p in plans:
        cost = p.estimate["cost"]
        rent = (cost.get("details") or {}).get("rent")
        price = _per_gpu_hour(cost)
        if price is None or not rent:
            continue
        gpu, count = p.scenario.hardware.gpu, p.scenario.hardware.count
        by_gpu.setdefault(gpu, {}).setdefault(round(price, 4),
                                              (count, f"{rent['provider']} {rent['instance_type']}"))
    notes = []
    for gpu, prices in by_gpu.items():
        if len(prices) > 1:
            shown = "; ".join(f"${price:,.2f}/GPU-h at {count} GPUs ({offer})"
                              for price, (count, offer) in sorted(prices.items(), key=lambda kv: kv[1][0]))
            notes.append(f"note: {gpu}'s price per GPU-hour differs by plan size because a different offering is "
                         f"the cheapest at each GPU count: {shown}.")
    return notes


def recommendation_text(rec: Any) -> str:
    lines = []
    if rec.preset:
        lines.append(f"Preset {rec.preset.name}: {rec.preset.summary}")
        lines += [f"  - {w}" for w in rec.preset.why]
        lines.append("")
    lines.append(f"Objective: {rec.objective}" + (f" {dict(rec.objective_weights)}" if rec.objective_weights else "")
                 + f"   (cost = {rec.cost_metric}, time = {rec.time_metric})")
    if rec.constraints.to_json():
        lines.append("Constraints: " + ", ".join(f"{k}={v}" for k, v in rec.constraints.to_json().items()))
    lines.append("")
    if not rec.plans:
        lines.append("No feasible plan." if not rec.beyond_default_limits else
                     "No feasible plan within the default limits: "
                     + ", ".join(x.replace(" (default)", "") for x in rec.relaxed_limits) + ".")
        if rec.beyond_default_limits:
            lines.append("Best plans beyond them (outside the default limits, not within your constraints):")
            for p in rec.beyond_default_limits:
                lines.append(f"  {p.rank:>2}. {p.summary}: {_fmt_usd(p.cost_value)}, "
                             f"{_fmt_time(p.time_value, rec.time_metric)}")
                lines += [f"      ! {w}" for w in p.warnings if w.startswith("outside the default limit")]
    else:
        from ..report import table
        per_m = "$/M out" if rec.task == "infer" else "$/M tok"
        rows = []
        for p in rec.plans:
            m, c = p.estimate["memory"], p.estimate["cost"]
            upm = c.get("usd_per_million_tokens")
            mark = " †" if p.rank_factor != 1.0 else ""
            rows.append((p.rank, p.summary[:62 - len(mark)] + mark, memory_cell(m["peak_bytes_per_gpu"], m["capacity_bytes_per_gpu"]),
                         _fmt_usd(_per_gpu_hour(c)), _fmt_usd(c.get("usd_per_hour")),
                         _fmt_usd(p.cost_value) if rec.cost_metric != "usd_per_million_tokens" else _fmt_usd(upm),
                         _fmt_time(p.time_value, rec.time_metric), "-" if upm is None else f"{upm:.3f}"))
        lines.append(table(rows, ["#", "plan", "peak/cap GiB", "$/GPU-h", "$/h", "cost", "time", per_m], "rlrrrrrr"))
        lines.append(("$/M out: the plan's whole hourly cost over its output tokens (input and blended prices: "
                      "`gpuplan estimate`)") if rec.task == "infer" else "$/M tok: per million trained tokens")
        if any(FULL_MARK in r[2] for r in rows):
            lines.append(FULL_NOTE)
        factors = sorted({f"x{p.rank_factor:.2f}" for p in rec.plans if p.rank_factor != 1.0})
        if factors:
            from ..term import wrap
            lines.append(wrap(f"† ranked as if its figure were {' or '.join(factors)} (limited software support or the "
                              "preset's preference), so it can sit below a plan with a worse figure (--json: warnings)"))
        lines += offering_notes(list(rec.plans) + [p for p in rec.pareto if p not in rec.plans])
        best = rec.plans[0]
        lines.append("")
        lines.append(f"Why #1 ({best.summary}):")
        lines += [f"  - {w}" for w in best.why]
        if best.warnings:
            lines += [f"  ! {w}" for w in best.warnings[:4]]
    if rec.pareto:
        lines.append("")
        lines.append(f"Cost/time Pareto front ({len(rec.pareto)} plans): " + "; ".join(
            f"{p.summary.split(' (')[0]} {_fmt_usd(p.cost_value)} / {_fmt_time(p.time_value, rec.time_metric)}"
            for p in rec.pareto[:8]) + (" ..." if len(rec.pareto) > 8 else ""))
    if rec.rejected:
        lines.append("")
        lines.append(f"Rejected ({len(rec.rejected)}):")
        unpriced = [r for r in rec.rejected if r.kind == "price"]
        shown = [r for r in rec.rejected if r.kind != "price"]
        for r in shown[:25]:
            lines.append(f"  - {r.option}: {r.reason}" + (f" ({r.alternative})" if r.alternative else ""))
        if len(shown) > 25:
            lines.append(f"  ... {len(shown) - 25} more (--json lists all)")
        if unpriced:
            lines.append(f"  - no rental price in the catalog for {', '.join(r.option for r in unpriced)} "
                         f"({unpriced[0].alternative})")
    if rec.assumptions:
        lines.append("")
        lines.append("Assumptions: " + "; ".join(rec.assumptions))
    st = rec.stats
    lines.append(f"Searched {st['gpus_searched']} GPU types, {st['layouts']:,} layouts, "
                 f"{st['memory_evaluations'] + st['speed_evaluations']:,} evaluations in {st['seconds']:.2f} s.")
    return "\n".join(lines)


def write_plot(rec: Any, path: str) -> None:
    """Pareto chart: every plan shown (top N and front), log cost vs log time. SVG written by hand;
    PNG through matplotlib when it is installed."""
    pts = [(p.cost_value, p.time_value, p.summary.split(" (")[0], p in rec.pareto) for p in
           list(rec.pareto) + [p for p in rec.plans if p not in rec.pareto] if p.cost_value and p.time_value]
    if path.lower().endswith(".png"):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            from ..errors import MissingExtraError
            raise MissingExtraError("PNG charts", "plot", "matplotlib") from None
        fig, ax = plt.subplots(figsize=(8, 5))
        for c, t, label, front in pts:
            ax.scatter(c, t, color="tab:red" if front else "tab:gray")
            ax.annotate(label, (c, t), fontsize=7)
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel(rec.cost_metric), ax.set_ylabel(rec.time_metric)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(pareto_svg(pts, rec.cost_metric, rec.time_metric))


def pareto_svg(pts: list, xlabel: str, ylabel: str) -> str:
    import math
    from html import escape
    W, H, L, B = 720, 460, 80, 50
    if not pts:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}"><text x="20" y="40">no plans</text></svg>'
    xs = [math.log10(p[0]) for p in pts]
    ys = [math.log10(p[1]) for p in pts]
    x0, x1 = min(xs) - 0.05, max(xs) + 0.05
    y0, y1 = min(ys) - 0.05, max(ys) + 0.05

    def X(v):
        return L + (math.log10(v) - x0) / (x1 - x0) * (W - L - 20)

    def Y(v):
        return H - B - (math.log10(v) - y0) / (y1 - y0) * (H - B - 20)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - 20}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="20" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(W + L) / 2}" y="{H - 12}" text-anchor="middle">{escape(xlabel)} (log)</text>',
           f'<text x="16" y="{(H - B) / 2}" transform="rotate(-90 16 {(H - B) / 2})" text-anchor="middle">'
           f'{escape(ylabel)} (log)</text>']
    from ..plot import log_ticks
    for v in log_ticks(10 ** x0, 10 ** x1):         # 1-2-5 ticks; the ends when the range is narrower
        out.append(f'<line class="tick-x" x1="{X(v):.1f}" y1="{H - B}" x2="{X(v):.1f}" y2="{H - B + 4}" stroke="black"/>')
        out.append(f'<text class="tick-x" x="{X(v):.1f}" y="{H - B + 15}" text-anchor="middle">{v:,.4g}</text>')
    for v in log_ticks(10 ** y0, 10 ** y1):
        out.append(f'<text class="tick-y" x="{L - 6}" y="{Y(v):.1f}" text-anchor="end">{v:,.4g}</text>')
    front = sorted([p for p in pts if p[3]], key=lambda p: p[0])
    if len(front) > 1:
        out.append('<polyline fill="none" stroke="#c0392b" stroke-width="1.5" points="'
                   + " ".join(f"{X(c):.1f},{Y(t):.1f}" for c, t, _, _ in front) + '"/>')
    for c, t, label, is_front in pts:
        color = "#c0392b" if is_front else "#7f8c8d"
        out.append(f'<circle cx="{X(c):.1f}" cy="{Y(t):.1f}" r="4" fill="{color}"><title>{escape(label)}</title></circle>')
        out.append(f'<text x="{X(c) + 6:.1f}" y="{Y(t) - 5:.1f}" fill="{color}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


# recommend flags (and scenario constraints) the RL placement search does not apply: it places rollout and training on
# the scenario's GPU type and count and ranks the placements cheapest for --steps (rl_search.recommend_rl)
_RL_UNAPPLIED = (("gpus", "--gpus"), ("budget", "--budget"), ("budget_per_hour", "--budget-per-hour"),
                 ("deadline", "--deadline"), ("max_gpus", "--max-gpus"), ("owned", "--owned"),
                 ("providers", "--providers"), ("spot", "--spot"), ("ttft", "--ttft"), ("tpot", "--tpot"),
                 ("requests_per_s", "--requests-per-s"), ("tokens_per_s", "--tokens-per-s"),
                 ("headroom", "--headroom"), ("preset", "--preset"), ("plot", "--plot"))


def _check_rl_recommend(args: argparse.Namespace, data: dict) -> None:
    """recommend's RL branch refuses the flags its placement search would not apply (rl_search.refuse_unapplied)."""
    from .rl_search import refuse_unapplied
    unapplied = [flag for dest, flag in _RL_UNAPPLIED if getattr(args, dest, None) not in (None, False)]
    if getattr(args, "objective", None) not in (None, "cheapest"):
        unapplied.append("--objective")
    refuse_unapplied("gpuplan recommend on an RL scenario", unapplied, data)


def rl_compare_table(rows: list[dict], steps: int, count: int) -> str:
    from ..report import table
    cells = []
    for r in rows:
        if not r["fits"]:
            cells.append((r["gpu"], "no", r["reason"] or "", "", "", ""))
            continue
        cells.append((r["gpu"], "yes", r["plan"], f"{r['step_time_s']:.2f} s", _fmt_usd(r["usd_per_hour"]),
                      _fmt_usd(r["usd_total"])))
    out = table(cells, ["gpu", "fits", "cheapest placement", "step", "$/h", f"$ for {steps:,} steps"], "lllrrr")
    if any("off-policy" in (r["plan"] or "") for r in rows):
        out += ("\nOff-policy placements run rollouts a step ahead of training (a change to the algorithm); "
                "--sync-only leaves them out.")
    told = "hardware.count" if count else "hardware.count not set: 1"
    count = count or 1
    return (out + f"\nEach GPU type at {count} GPU{'s' if count > 1 else ''} ({told}); `gpuplan rl-plan SCENARIO "
            "--gpu ID` lists every placement, the rejected ones and what group size, response length and the "
            "reference cost; where none fits, `gpuplan memory SCENARIO --gpu ID` lists what to change.")


def run_compare(args: argparse.Namespace) -> int:
    from ..cliargs import NO_PLAN, OK, print_result
    from . import compare
    partial = partial_from_args(args)
    task = partial.get("task") or "train"
    from .recommend import is_rl
    if is_rl(partial):      # an RL job: each GPU's cheapest rollout/training placement (rl_search.py)
        steps = args.steps
        rows = compare(partial, _split(args.gpus) or [], steps=steps, allow_async=not getattr(args, "sync_only", False))
        code = OK if any(r["fits"] for r in rows) else NO_PLAN
        if args.json:
            print_result("compare", {"task": task, "steps": steps, "rows": rows})
        else:
            emit(rl_compare_table(rows, steps, (partial.get("hardware") or {}).get("count") or 0))
        return code
    rows = compare(partial, _split(args.gpus) or [])
    code = OK if any(r["fits"] for r in rows) else NO_PLAN
    if args.json:
        print_result("compare", {"task": task, "rows": [compare_record(r, task) for r in rows]})
        return code
    emit(compare_table(rows, task))
    return code


def compare_table(rows: list[dict], task: str) -> str:
    """compare's rows as a table; a GPU that cannot run the workload gets its reason in the plan column."""
    from ..report import table
    speed = "output tok/s" if task == "infer" else "train tok/s"
    per_m = "$/M out" if task == "infer" else "$/M tok"
    cells = []
    for r in rows:
        if not r["fits"]:
            cells.append((r["gpu"], "no", r["reason"], "", "", "", ""))
            continue
        cells.append((r["gpu"], "yes", r["plan"][:48], f"{r['tokens_per_s'] or 0:,.0f}", _fmt_usd(r["usd_per_hour"]),
                      "-" if r["usd_per_million_tokens"] is None else format(r["usd_per_million_tokens"], ".3f"),
                      "-" if r["tokens_per_s_per_watt"] is None else format(r["tokens_per_s_per_watt"], ".2f")))
    out = table(cells, ["gpu", "fits", "plan", speed, "$/h", per_m, "tok/s/W"], "lrlrrrr")
    bars = []
    for r in rows:
        for what, u in ((("memory", (r.get("uncertainty") or {}).get("memory")),
                         ("speed and cost", (r.get("uncertainty") or {}).get("speed")))):
            if u and u.get("relative_typical") is not None:
                line = (f"{what} ±{100 * u['relative_typical']:.0f} % typical, ±{100 * u['relative_p90']:.0f} % P90 "
                        f"({u['category']})")
            elif u:
                line = f"{what}: no error bar ({u.get('category')})"
            else:
                continue
            if line not in bars:
                bars.append(line)
    from ..term import wrap
    return out + ("\n" + wrap("error bars: " + "; ".join(bars)) if bars else "")


def compare_record(row: dict, task: str) -> dict:
    from . import compare_record as record
    return record(row, task)


def run_whatif(args: argparse.Namespace) -> int:
    from ..cliargs import print_result, scenario_from_args
    from .whatif import whatif
    scn = scenario_from_args(args)
    rows = whatif(scn)
    if args.json:
        print_result("whatif", {"task": scn.task, "techniques": rows})
    else:
        emit(whatif_table(rows, scn.is_training))
    return 0


def whatif_table(rows: list[dict[str, Any]], training: bool = True) -> str:
    """Each technique's peak, memory saved, whether it fits and its time cost, as a table."""
    from ..report import table
    cells = []
    for r in rows:
        if r["error"]:
            cells.append((r["technique"], "-", "-", "-", "-", "-", r["error"]))
            continue
        t = r["time_s"]
        tt = "-" if t is None else (f"{t:.3g} s" if t >= 0.1 else f"{t * 1e3:.3g} ms")
        ch = "-" if r["time_change"] is None else f"{r['time_change']:+.0%}"
        cells.append((r["technique"], f"{r['peak_bytes_per_gpu'] / GiB:.1f}", f"{r['saved_bytes'] / GiB:.1f}",
                      "yes" if r["fits"] else "NO", tt, ch, r["note"]))
    unit = "step" if training else "token"
    return (table(cells, ["technique", "peak GiB", "saved GiB", "fits", "time", "change", "note"], "lrrrrrl") + "\n"
            + (f"time = per optimizer {unit}" if training else "time = per output token (TPOT)"))


def rl_plan_text(rec: Any, rows: list[dict]) -> str:
    from ..units import GiB as _G
    lines = [f"RL placements, cheapest for {rec.steps:,} steps first:"]
    for p in rec.plans:
        usd = _fmt_usd(p.usd_total)
        lines.append(f"  {p.label:62} step {p.step_time_s:8.2f} s  {usd:>10}  peak {p.peak_bytes_per_gpu / _G:5.1f} GiB"
                     f"  bound by {p.bound_by}")
    if not rec.plans:
        lines.append("  (no placement fits)")
    if any(p.async_steps for p in rec.plans):
        lines.append("  (off-policy: rollouts run a step ahead of training, so the policy learns from responses of "
                     "the previous weights, a change to the algorithm as well as to the time; --sync-only leaves "
                     "these out)")
    if rec.rejections:
        lines.append("Rejected:")
        lines += [f"  {r.what}: {r.why}" for r in rec.rejections]
    lines.append("What the workload costs (against the scenario as given):")
    for r in rows:
        if "error" in r:
            lines.append(f"  {r['change']:44} {r['error']}")
            continue
        step = "       - s" if r["step_time_s"] is None else f"{r['step_time_s']:8.2f} s"
        change = "      -" if r["step_time_change"] is None else f"{r['step_time_change']:+6.1%}"
        peak = ("peak " + f"{r['peak_change_bytes'] / _G:+6.2f} GiB" if r["peak_change_bytes"] is not None
                else f"peak {r['peak_bytes_per_gpu'] / _G:6.2f} GiB")
        lines.append(f"  {r['change']:44} step {step} ({change})  {peak}  bound by {r['bound_by']}")
    return "\n".join(lines)


def run_rl_plan(args: argparse.Namespace) -> int:
    from ..cliargs import NO_PLAN, OK, print_result, scenario_from_args
    from .rl_search import plan_record, rl_plan, to_fit
    scn = scenario_from_args(args)
    rec, rows = rl_plan(scn, steps=args.steps, allow_async=not args.sync_only, top=args.top)
    est, alternatives = to_fit(rec, scn)      # issue 20: the rejections named the phase, nothing said what to change
    if args.json:
        print_result("rl-plan", plan_record(rec, rows, alternatives))
    else:
        print(rl_plan_text(rec, rows))
        if alternatives:
            from .whatif import fit_advice
            emit(f"\nNo placement fits. The scenario as given ({scn.train.rl.placement} on {scn.hardware.count}x "
                 f"{scn.hardware.gpu}):\n" + fit_advice(est, alternatives))
    return OK if rec.plans else NO_PLAN

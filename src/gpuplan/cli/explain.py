"""`gpuplan explain [SCENARIO] QUANTITY [flags]`: walk through one number of a plan (gpuplan/explain.py)."""
from __future__ import annotations

import argparse

from ..cliargs import NO_PLAN, OK, add_scenario_args, print_result, scenario_from_args


def add_parser(sub) -> None:
    from ..explain import QUANTITIES
    s = sub.add_parser("explain", help="walk through one number of a scenario: formula, inputs, sources, error bar",
                       description="Explain one number of a plan: the formula behind it with this scenario's "
                                   "inputs, where each input comes from, the formula replayed beside the "
                                   "pipeline's figure, and the error bar. The number is the one `gpuplan estimate` "
                                   "prints (the same pipeline).",
                       epilog="quantities: " + ", ".join(QUANTITIES) + ". Example: gpuplan explain --model "
                              "llama-2-7b --task train --gpu h100-sxm --count 8 --zero 3 memory.optimizer_states")
    add_scenario_args(s)
    s.add_argument("quantity", nargs="?", metavar="QUANTITY",
                   help="the number to explain, e.g. memory.activations, speed.step_time, speed.tpot, "
                        "cost.usd_per_hour (--list shows all)")
    s.add_argument("--list", action="store_true", help="list the quantities explain knows and exit")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_explain)


def _split_positionals(args: argparse.Namespace) -> None:
    """`explain memory.weights --model X` puts the quantity in `scenario`: a word naming a quantity (not a
    file) is the quantity."""
    from pathlib import Path
    if args.quantity is None and args.scenario is not None and not Path(args.scenario).exists():
        args.quantity, args.scenario = args.scenario, None


def cmd_explain(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..explain import ALIASES, QUANTITIES, explain_estimate, quantity_name
    if args.list:
        if args.json:
            print_result("explain", {"quantities": list(QUANTITIES), "aliases": dict(ALIASES)})
        else:
            from ..term import emit
            emit("\n".join(QUANTITIES))
        return OK
    _split_positionals(args)
    if not args.quantity:
        raise InputError("gpuplan explain", "needs the quantity to explain.",
                         "add one, e.g. memory.activations (gpuplan explain --list shows all).")
    name = quantity_name(args.quantity)             # a misspelt quantity fails before the evaluation
    from ..pipeline import evaluate
    est = evaluate(scenario_from_args(args))
    ex = explain_estimate(est, name)
    if args.json:
        print_result("explain", ex.to_json())
    else:
        from ..term import emit
        emit(explanation_text(ex))
    return OK if est.memory.fits else NO_PLAN


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-12) or abs(a - b) < 1024 and max(abs(a), abs(b)) > 1e6


def explanation_text(ex) -> str:
    from ..report import table
    lines = [f"{ex.title} ({ex.quantity}) = {ex.shown}", ex.scenario]
    if ex.value is None:
        lines.append("No figure: the pipeline gives none for this plan (it does not fit in memory, or has no price "
                     "or speed for it); `gpuplan explain ... memory.peak` shows the memory.")
    lines += ["", "Formula:"]
    lines += [f"  {f}" for f in ex.formula]
    if ex.inputs:
        # sources as numbered notes under the table (one number per distinct source), so the table stays narrow
        sources: list[str] = []
        rows = []
        for i in ex.inputs:
            if i.source not in sources:
                sources.append(i.source)
            rows.append((i.name, i.value, f"[{sources.index(i.source) + 1}]"))
        lines += ["", table(rows, ["input", "value", "source"], "lll"), "",
                  "Sources:", *(f"  [{n}] {src}" for n, src in enumerate(sources, 1))]
    if ex.replayed is not None and ex.value is not None:
        shown = _as_value(ex, ex.replayed)
        if _close(ex.replayed, ex.value) and not ex.gap_note:
            lines += ["", f"The formula on these inputs gives {shown}: the pipeline's figure."]
        else:
            lines += ["", f"The formula on these inputs gives {shown}; the pipeline's figure is {ex.shown}."]
    if ex.gap_note:
        lines.append(f"Why they differ: {ex.gap_note}" if ex.replayed is not None else ex.gap_note)
    if ex.error_bar is not None:
        lines += ["", f"error bar: {ex.error_bar.text()}"]
    lines += [f"note: {n}" for n in ex.notes if n]
    lines.append("computed by gpuplan.pipeline.evaluate (the figure `gpuplan estimate` prints); equations and sources: "
                 "docs/model.md")
    return "\n".join(lines)


def _as_value(ex, v: float) -> str:
    from ..units import fmt_bytes, fmt_seconds
    q = ex.quantity
    if q.startswith("memory."):
        return fmt_bytes(v)
    if q in ("speed.step_time", "speed.tpot", "speed.ttft"):
        return fmt_seconds(v)
    if q == "speed.mfu":
        return f"{100 * v:.1f} %"
    if q.startswith("cost."):
        return f"${v:,.2f}" if v >= 0.1 else f"${v:,.4f}"
    return f"{v:,.0f}"

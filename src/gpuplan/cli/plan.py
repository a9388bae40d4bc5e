"""`gpuplan estimate | memory | train | serve`: one plan, evaluated through `gpuplan.pipeline`.

Exit code 1 when the plan does not fit in memory (the answer is still printed)."""
from __future__ import annotations

import argparse

from ..cliargs import NO_PLAN, OK, add_scenario_args, print_result, scenario_from_args
from ..errors import InputError

SERVING_CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def add_parsers(sub) -> None:
    for name, func, helptext in (("estimate", cmd_estimate, "memory, speed and cost of a scenario"),
                                 ("memory", cmd_memory, "per-GPU memory breakdown and what fits"),
                                 ("train", cmd_speed, "training step time breakdown"),
                                 ("serve", cmd_speed, "serving latency/throughput vs concurrency")):
        s = sub.add_parser(name, help=helptext)
        add_scenario_args(s)
        s.add_argument("--json", action="store_true")
        if name in ("train", "serve"):
            s.add_argument("--plot", metavar="FILE", help="write a chart (.svg, .png or .html); a folder: "
                                                          f"{name}.svg in it, never overwriting")
        if name == "serve":
            g = s.add_argument_group("serving under load (request-level simulation, docs/serving-load.md)")
            g.add_argument("--rate", type=float, metavar="R", help="requests per second arriving (infer.load.rate_per_s)")
            g.add_argument("--requests", type=int, metavar="N", help="requests to simulate (default 1000)")
            g.add_argument("--arrival", metavar="KIND", help="poisson (default) | server | offline | gamma:CV | "
                                                             "closed:N | trace:FILE")
            g.add_argument("--slo-ttft", type=float, metavar="S", help="time-to-first-token objective (s)")
            g.add_argument("--slo-tpot", type=float, metavar="S", help="time-per-output-token objective (s)")
            g.add_argument("--slo-percentile", type=float, metavar="P", help="percentile the objectives hold at "
                                                                            "(default 99)")
            g.add_argument("--prefix-cache-hit", type=float, metavar="F", help="share of each prompt served from "
                                                                              "the prefix cache (0-1)")
            g.add_argument("--seed", type=int, help="random seed of the simulated workload (default 0)")
        s.set_defaults(func=func)


def _fit_code(mem) -> int:
    return OK if mem.fits else NO_PLAN


def cmd_estimate(args: argparse.Namespace) -> int:
    from ..pipeline import evaluate
    from ..report import estimate_report
    est = evaluate(scenario_from_args(args))
    if args.json:
        print_result("estimate", est.to_json())
    else:
        print(estimate_report(est))
    return _fit_code(est.memory)


def cmd_memory(args: argparse.Namespace) -> int:
    from ..estimate.fit import fit_limits
    from ..pipeline import evaluate
    from ..report import memory_report
    est = evaluate(scenario_from_args(args))
    mem, warnings = est.memory, est.warnings
    limits = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
    if args.json:
        print_result("memory", {"memory": mem.to_json(), "fit_limits": limits, "warnings": list(warnings)})
        return _fit_code(mem)
    print(memory_report(mem, f"{est.model.name} on {est.scenario.hardware.count}x {est.gpu.id} ({est.scenario.task})"))
    if limits:
        shown = [f"{k} = {v:,}" if v is not None else f"{k}: nothing fits" for k, v in limits.items()]
        print("\nWhat fits on this hardware (everything else as in the scenario): " + ", ".join(shown))
    if not mem.fits:
        print("\n" + fit_advice(est))
    for w in warnings:
        print(f"warning: {w}")
    return _fit_code(mem)


def fit_advice(r) -> str:
    """What to change so it fits: the fewest technique changes on this hardware, else more GPUs."""
    from ..estimate.fit import fewest_gpus
    from ..search.whatif import path_to_fit
    from ..units import fmt_bytes
    lines = ["To make it fit on this hardware:"]
    steps = path_to_fit(r.scenario)
    done = [s for s in steps if s.get("technique")]
    for i, s in enumerate(done, 1):
        lines.append(f"  {i}. {s['technique']}: peak {fmt_bytes(s['peak_bytes_per_gpu'])} "
                     f"({'fits' if s['fits'] else 'not yet'}; time vs as given {s['time_change']:+.0%}) - {s['note']}")
    if not done or not done[-1]["fits"]:
        lines.append("  no combination of memory-saving techniques makes it fit on this many GPUs.")
        n = fewest_gpus(r.scenario, r.model, r.gpu.usable_memory_bytes)
        lines.append(f"  With the same settings it fits on {n} x {r.gpu.id}" + (" (scaling ZeRO-3 data parallel)"
                     if r.scenario.is_training else " (tensor parallel)") + "." if n else
                     "  Even 4096 GPUs of this type do not fit it as configured; try `gpuplan recommend`.")
    lines.append("`gpuplan whatif` lists every single change; `gpuplan recommend` searches GPUs and layouts.")
    return "\n".join(lines)


def _check_task(command: str, scn) -> None:
    if command == "serve" and scn.task != "infer":
        raise InputError("gpuplan serve", "needs task: infer.", "add --task infer or set `task: infer`.")
    if command != "serve" and scn.task == "infer":
        raise InputError("gpuplan train", "needs task: train or finetune.", "use `gpuplan serve` for inference.")


def cmd_speed(args: argparse.Namespace) -> int:
    from .. import pipeline
    from ..plot import plot_path, write_plot
    scn = scenario_from_args(args)
    _check_task(args.command, scn)
    if args.command == "serve":
        scn = _with_load(args, scn)
    # the chart's path is checked before any work, so a bad folder fails fast
    target = plot_path(args.plot, args.command) if getattr(args, "plot", None) else None
    r = pipeline.resolve(scn)
    est = pipeline.evaluate(r)
    curve = pipeline.serving_curve(r, est.memory, SERVING_CONCURRENCIES) if args.command == "serve" else None
    load = None
    if args.command == "serve" and scn.infer is not None and scn.infer.load is not None and est.memory.fits:
        load = pipeline.serving_load(r, est.memory, sweep=target is not None)
    if args.json:
        out = {"performance": est.performance.to_json(), "curve": curve,
               "memory": est.memory.to_json(), "warnings": list(est.warnings)}
        if args.command == "serve":
            out["load"] = load
        print_result(args.command, out)
    else:
        _print_speed(est, curve)
        if load is not None:
            from ..report import load_report
            print("\n" + load_report(load))
    if target is not None:
        if load is not None and load.get("sweep"):    # under load: latency and goodput versus rate
            path = write_plot(target.path, load=load, overwrite=target.named)
        else:
            path = write_plot(target.path, curve=curve, perf=est.performance, overwrite=target.named)
        if not args.json:
            print(f"\nplot written to {path}")
    return _fit_code(est.memory)


def _with_load(args: argparse.Namespace, scn):
    """The scenario with the serve command's load flags (--rate, --arrival, --slo-*) in infer.load."""
    from ..cliargs import load_from_args
    from ..scenario import scenario_from_dict
    cur = scn.infer.load.model_dump() if scn.infer.load is not None else None
    new = load_from_args(args, cur)
    if new is cur:
        return scn
    data = scn.model_dump(exclude_none=True)
    data["infer"]["load"] = new
    return scenario_from_dict(data, "(with --rate/--arrival/--slo flags)")


def _print_speed(est, curve) -> None:
    from ..report import performance_report, table
    from ..units import fmt_bytes, fmt_count, fmt_seconds
    print(performance_report(est.performance))
    if not est.memory.fits:
        print(f"\nDOES NOT FIT: peak {fmt_bytes(est.memory.peak_bytes_per_gpu)} per GPU > capacity "
              f"{fmt_bytes(est.memory.capacity_bytes_per_gpu)} (`gpuplan memory` shows the breakdown and what to change).")
    for w in est.warnings:
        print(f"warning: {w}")
    if curve:
        rows = [(c.get("concurrency"), fmt_count(c.get("output_tokens_per_s")), fmt_seconds(c.get("ttft_s")),
                 fmt_seconds(c.get("tpot_s")), "yes" if c.get("fits", True) else "no") for c in curve]
        print("\n" + table(rows, ["concurrency", "output tok/s", "TTFT", "TPOT", "fits"]))

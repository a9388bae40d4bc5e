"""`gpuplan estimate | memory | train | serve`: one plan, evaluated through `gpuplan.pipeline`.

Exit code 1 when the plan does not fit in memory (the answer is still printed)."""
from __future__ import annotations

import argparse

from ..cliargs import NO_PLAN, OK, add_scenario_args, print_result, scenario_from_args
from ..errors import InputError
from ..term import emit

SERVING_CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def add_parsers(sub) -> None:
    for name, func, helptext in (("estimate", cmd_estimate, "memory, speed and cost of a scenario"),
                                 ("memory", cmd_memory, "per-GPU memory breakdown and what fits"),
                                 ("train", cmd_speed, "training step time breakdown"),
                                 ("serve", cmd_speed, "serving latency/throughput vs concurrency")):
        s = sub.add_parser(name, help=helptext)
        add_scenario_args(s)
        s.add_argument("--json", action="store_true")
        if name == "estimate":
            s.add_argument("--why", metavar="QUANTITY", help="also walk through one number, e.g. memory.activations "
                                                              "(what `gpuplan explain` prints; --why list shows all)")
        if name in ("train", "serve"):
            s.add_argument("--plot", metavar="FILE", help="write a chart (.svg, .png or .html); a folder: "
                                                          f"{name}.svg in it, never overwriting")
        if name == "serve":
            g = s.add_argument_group("serving under load (request-level simulation, docs/serving-load.md)")
            g.add_argument("--rate", type=float, metavar="R", help="requests per second arriving at the whole plan, "
                           "shared by its replicas (infer.load.rate_per_s)")
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
            g.add_argument("--disaggregate", metavar="N:M", help="prefill/decode disaggregation: N prefill and M "
                                                                  "decode instances (infer.load.disaggregation)")
            sp = s.add_argument_group("speculative decoding (infer.speculative)")
            sp.add_argument("--speculative", metavar="METHOD", help="draft | ngram | eagle | mtp")
            sp.add_argument("--spec-tokens", type=int, metavar="K", help="tokens proposed per step (default 3)")
            sp.add_argument("--spec-acceptance", type=float, metavar="A", help="acceptance rate per proposed token "
                                                                              "(default: the method's cited one)")
            sp.add_argument("--draft-model", metavar="NAME", help="draft model of method draft")
        s.set_defaults(func=func)


def _fit_code(mem) -> int:
    return OK if mem.fits else NO_PLAN


def cmd_estimate(args: argparse.Namespace) -> int:
    from ..pipeline import evaluate
    from ..report import estimate_report
    why = None
    if args.why:
        from ..explain import QUANTITIES, quantity_name
        if args.why == "list":
            emit("\n".join(QUANTITIES))
            return OK
        why = quantity_name(args.why)             # a misspelt quantity fails before the evaluation
    est = evaluate(scenario_from_args(args))
    ex = None
    if why:
        from ..explain import explain_estimate
        ex = explain_estimate(est, why)
    from ..pipeline import load_not_simulated_note
    note = load_not_simulated_note(est.scenario, "`gpuplan serve` and sized for by `gpuplan recommend`")
    if args.json:
        out = est.to_json()
        if note:        # as POST /api/estimate says it (web/jobs.estimate_job)
            out["warnings"] = [*out.get("warnings", []), note]
        print_result("estimate", {**out, **({"why": ex.to_json()} if ex else {})})
    else:
        emit(estimate_report(est))
        if note:
            emit(f"note: {note}", info=True)
        if not est.memory.fits:       # issue 20: the speed and cost above read like a plan's
            rl = est.scenario.train is not None and est.scenario.train.rl is not None
            search = ("`gpuplan rl-plan` tries the other rollout/training placements and `gpuplan compare --gpus` "
                      "other GPU types" if rl else "`gpuplan recommend` searches GPUs and layouts")
            emit(f"\nDoes NOT fit: the time and cost above are for a step that runs out of memory on "
                 f"{est.gpu.id}. `gpuplan memory` with the same scenario lists what to change; {search}.", info=True)
        if ex is not None:
            from .explain import explanation_text
            emit("\n" + explanation_text(ex))
    return _fit_code(est.memory)


def cmd_memory(args: argparse.Namespace) -> int:
    from ..estimate.fit import fit_limits
    from ..search.whatif import fit_advice, fit_alternatives
    from ..pipeline import evaluate
    from ..report import memory_report
    if _names_no_gpu(args):
        return memory_without_gpu(args)
    est = evaluate(scenario_from_args(args))
    mem, warnings = est.memory, est.warnings
    limits = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
    alternatives = [] if mem.fits else fit_alternatives(est)
    if args.json:
        print_result("memory", {"memory": mem.to_json(), "fit_limits": limits, "to_fit": alternatives,
                                "warnings": list(warnings)})
        return _fit_code(mem)
    emit(memory_report(mem, f"{est.model.name} on {est.scenario.hardware.count}x {est.gpu.id} ({est.scenario.task})"))
    if limits:
        shown = [f"{k} = {v:,}" if v is not None else f"{k}: nothing fits" for k, v in limits.items()]
        emit("\nWhat fits on this hardware (everything else as in the scenario): " + ", ".join(shown))
    if not mem.fits:
        emit("\n" + fit_advice(est, alternatives))
    for w in warnings:
        emit(f"warning: {w}")
    return _fit_code(mem)


# ---- memory with no GPU named: the usual layouts, and which catalog GPUs hold each ------------------------

# a stand-in GPU so the scenario validates; every catalog GPU is then evaluated in its place
_STAND_IN_GPU = "h100-sxm"
USUAL_COUNTS = (1, 2, 4, 8)


def _names_no_gpu(args: argparse.Namespace) -> bool:
    if getattr(args, "gpu", None):
        return False
    if not getattr(args, "scenario", None):
        return True
    from ..inputs import read_mapping_file
    data = read_mapping_file(args.scenario, "scenario file")
    if "hardware" not in data or data["hardware"] is None:
        return True
    # a malformed `hardware:` goes the usual way, to its one-paragraph error
    return isinstance(data["hardware"], dict) and data["hardware"].get("gpu") is None


def usual_layouts(scn) -> list[tuple[str, dict, dict]]:
    """(label, hardware update, parallel update) of the layouts people start from: one GPU, then 2, 4 and 8
    GPUs sharded the usual way - ZeRO-3 / FSDP full shard for training (weights, gradients and optimizer
    states split across the GPUs), tensor parallel for serving (weights and KV cache split). A shard group the
    scenario sets is dropped: the usual layouts shard over all their data-parallel ranks."""
    out = []
    for n in USUAL_COUNTS:
        if n == 1:
            out.append(("1 GPU", {"count": 1}, {"dp": None, "tp": 1, "pp": 1, "cp": 1, "zero": scn.parallel.zero,
                                             "shard_group": None}))
        elif scn.is_training:
            out.append((f"{n} GPUs, ZeRO-3 / FSDP", {"count": n}, {"dp": None, "tp": 1, "pp": 1, "cp": 1, "zero": 3,
                                                                   "shard_group": None}))
        else:
            out.append((f"{n} GPUs, tensor parallel", {"count": n}, {"dp": None, "tp": n, "pp": 1, "cp": 1,
                                                                        "shard_group": None}))
    return out


def layouts_without_gpu(scn) -> list[dict]:
    """For each usual layout: the per-GPU peak on every catalog GPU (lowest and highest: runtime overheads
    differ a little by GPU) and the GPUs it fits on, smallest memory first."""
    from ..errors import GpuplanError
    from ..hardware import list_gpus
    from ..models import get_model
    from ..pipeline import memory, resolve
    spec = get_model(scn.model)
    gpus = sorted((g for g in list_gpus() if g.usable_memory_bytes), key=lambda g: (g.usable_memory_bytes, g.id))
    rows = []
    for label, hardware, parallel in usual_layouts(scn):
        peaks, fits_on, refused = [], [], None
        for g in gpus:
            try:
                cand = scn.replace(hardware={**hardware, "gpu": g.id, "gpus_per_node": None}, parallel=parallel)
                mem = memory(resolve(cand, model=spec, gpu=g))
            except GpuplanError as err:
                refused = refused or f"{err.what} {err.why}".rstrip(".")
                continue                     # this layout or engine does not run on that GPU
            peaks.append(mem.peak_bytes_per_gpu)
            if mem.fits:
                fits_on.append({"gpu": g.id, "usable_bytes": int(g.usable_memory_bytes)})
        rows.append({"layout": label, "count": hardware["count"], "parallel": parallel,
                     "peak_bytes_per_gpu_min": min(peaks) if peaks else None,
                     "peak_bytes_per_gpu_max": max(peaks) if peaks else None, "fits_on": fits_on,
                     "not_possible": None if peaks else refused})
    return rows


def _scenario_without_gpu(args: argparse.Namespace):
    from ..cliargs import check_file_values, scenario_data_from_args
    from ..inputs import read_mapping_file, short_path
    from ..scenario import scenario_from_dict
    base = {}
    if getattr(args, "scenario", None):
        base = read_mapping_file(args.scenario, "scenario file")
        check_file_values(base, f"file '{short_path(args.scenario)}'")
    data = scenario_data_from_args(args, base)
    hardware = dict(data.get("hardware") or {})
    hardware["gpu"] = _STAND_IN_GPU
    return scenario_from_dict({**data, "hardware": hardware},
                              "(flags)" if not base else f"file '{short_path(args.scenario)}' with flags")


def memory_without_gpu(args: argparse.Namespace) -> int:
    from ..report import table
    from ..units import fmt_bytes
    scn = _scenario_without_gpu(args)
    rows = layouts_without_gpu(scn)
    if args.json:
        print_result("memory", {"gpu": None, "task": scn.task, "layouts": rows, "warnings": []})
        return OK
    from ..explain import train_settings
    what = (train_settings(scn.train) if scn.is_training and scn.train
            else f"{scn.infer.engine}, weights {scn.infer.weights}, {scn.infer.concurrency} x "
                 f"({scn.infer.prompt_len} + {scn.infer.output_len}) tokens" if scn.infer else "")
    emit(f"{scn.model} · task {scn.task} ({what}) · no GPU named: per-GPU memory of the usual layouts\n")
    shown = []
    for r in rows:
        lo, hi = r["peak_bytes_per_gpu_min"], r["peak_bytes_per_gpu_max"]
        peak = "-" if lo is None else fmt_bytes(hi) if fmt_bytes(lo) == fmt_bytes(hi) else \
            f"{fmt_bytes(lo)} - {fmt_bytes(hi)}"
        fits = r["fits_on"]
        names = ", ".join(f["gpu"] for f in fits[:5]) + (f" and {len(fits) - 5} more" if len(fits) > 5 else "")
        if r.get("not_possible"):
            names = f"not possible: {r['not_possible'][:120]}"
        shown.append((r["layout"], peak, names or "none in the catalog"))
    emit(table(shown, ["layout", "peak per GPU", "fits on (smallest memory first)"], "lrl"))
    if scn.is_training and scn.train is not None and scn.train.rl is not None:
        rl = scn.train.rl
        why = (f"the rollout engine takes gpu_memory_utilization = {rl.gpu_memory_utilization:g} of each GPU's memory"
               if rl.placement == "colocated" else "the rollout GPUs' engine takes a share of each GPU's memory")
        emit(f"\nThe peak differs between GPUs: {why}. `gpuplan memory ... --gpu ID --count N` gives the breakdown "
             "on one, `gpuplan compare ... --gpus A,B --count N` adds speed and cost.", info=True)
    else:
        emit("\nThe peak differs a little between GPUs (runtime overheads); `gpuplan memory ... --gpu ID` gives the "
             "breakdown on one, `gpuplan recommend` adds speed and cost.", info=True)
    return OK


def _check_task(command: str, scn) -> None:
    if command == "serve" and scn.task != "infer":
        raise InputError("gpuplan serve", "needs task: infer.", "add --task infer or set `task: infer`.")
    if command != "serve" and scn.task == "infer":
        raise InputError("gpuplan train", "needs task: train or finetune.", "use `gpuplan serve` for inference.")


def cmd_speed(args: argparse.Namespace) -> int:
    from .. import pipeline
    from ..plot import plot_path, write_plot
    scn = scenario_from_args(args, default_task="infer" if args.command == "serve" else None)
    _check_task(args.command, scn)
    if args.command == "serve":
        scn = _with_load(args, scn)
        scn = _with_speculative(args, scn)
    # the chart's path is checked before any work, so a bad folder fails fast
    target = plot_path(args.plot, args.command) if getattr(args, "plot", None) else None
    r = pipeline.resolve(scn)
    est = pipeline.evaluate(r)
    curve = pipeline.serving_curve(r, est.memory, SERVING_CONCURRENCIES) if args.command == "serve" else None
    load = None
    if args.command == "serve" and scn.infer is not None and scn.infer.load is not None and est.memory.fits:
        from ..term import Progress
        with Progress("serve") as bar:      # many requests or an SLO search can take seconds
            load = pipeline.serving_load(r, est.memory, sweep=target is not None, progress=bar)
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
            emit("\n" + load_report(load))
    if target is not None:
        if load is not None and load.get("sweep"):    # under load: latency and goodput versus rate
            path = write_plot(target.path, load=load, overwrite=target.named)
        else:
            path = write_plot(target.path, curve=curve, perf=est.performance, overwrite=target.named)
        if not args.json:
            emit(f"\nplot written to {path}", info=True)
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


def _with_speculative(args: argparse.Namespace, scn):
    """The scenario with --speculative/--spec-tokens/--spec-acceptance/--draft-model in infer.speculative."""
    from ..scenario import scenario_from_dict
    flags = {"method": getattr(args, "speculative", None), "num_tokens": getattr(args, "spec_tokens", None),
             "acceptance_rate": getattr(args, "spec_acceptance", None),
             "draft_model": getattr(args, "draft_model", None)}
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return scn
    data = scn.model_dump(exclude_none=True)
    cur = data["infer"].get("speculative") or {}
    if "method" not in given and not cur:
        raise InputError("--spec-tokens / --spec-acceptance / --draft-model", "need a speculative method.",
                         "add --speculative eagle (or draft, ngram, mtp).")
    cur.update(given)
    data["infer"]["speculative"] = cur
    return scenario_from_dict(data, "(with --speculative flags)")


def _print_speed(est, curve) -> None:
    from ..explain import describe
    from ..report import performance_report, table
    from ..units import fmt_bytes, fmt_count, fmt_seconds
    emit(describe(est) + "\n")                  # which plan: flag-only commands fill most of it from defaults
    emit(performance_report(est.performance))
    if not est.memory.fits:
        emit(f"\nDOES NOT FIT: peak {fmt_bytes(est.memory.peak_bytes_per_gpu)} per GPU > capacity "
              f"{fmt_bytes(est.memory.capacity_bytes_per_gpu)} (`gpuplan memory` shows the breakdown and what to change).")
    for w in est.warnings:
        emit(f"warning: {w}")
    if curve:
        rows = [(c.get("concurrency"), fmt_count(c.get("output_tokens_per_s")), fmt_seconds(c.get("ttft_s")),
                 fmt_seconds(c.get("tpot_s")), "yes" if c.get("fits", True) else "no") for c in curve]
        emit("\n" + table(rows, ["concurrency", "output tok/s", "TTFT", "TPOT", "fits"]))

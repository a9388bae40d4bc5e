"""Command-line interface: one thin subcommand per library function, `--json` everywhere.

Errors from gpuplan (bad input, unknown names, unsupported combinations) print one paragraph and
exit with code 2; nothing prints a traceback unless GPUPLAN_DEBUG=1.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from . import __version__
from .errors import GpuplanError, InputError

# scenario flag -> (section, field, type)
SCENARIO_FLAGS: dict[str, tuple[str | None, str, Callable]] = {
    "model": (None, "model", str), "task": (None, "task", str), "framework": (None, "framework", str),
    "gpu": ("hardware", "gpu", str), "count": ("hardware", "count", int),
    "gpus_per_node": ("hardware", "gpus_per_node", int), "network": ("hardware", "network", str),
    "profile": ("hardware", "profile", str),
    "dp": ("parallel", "dp", int), "tp": ("parallel", "tp", int), "pp": ("parallel", "pp", int),
    "cp": ("parallel", "cp", int), "ep": ("parallel", "ep", int), "vpp": ("parallel", "vpp", int),
    "zero": ("parallel", "zero", int), "offload": ("parallel", "offload", str),
    "method": ("train", "method", str), "precision": ("train", "precision", str),
    "optimizer": ("train", "optimizer", str), "seq_len": ("train", "seq_len", int),
    "micro_batch": ("train", "micro_batch", int), "global_batch": ("train", "global_batch", int),
    "recompute": ("train", "recompute", str), "attention": ("train", "attention", str),
    "lora_rank": ("train", "lora_rank", int), "tokens": ("train", "tokens", float),
    "weights": ("infer", "weights", str), "kv_cache": ("infer", "kv_cache", str), "engine": ("infer", "engine", str),
    "prompt_len": ("infer", "prompt_len", int), "output_len": ("infer", "output_len", int),
    "concurrency": ("infer", "concurrency", int),
}


def _number(kind: Callable, flag: str) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            return kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{flag.replace('_', '-')} expects a {kind.__name__}, got '{text}'")
    return parse


def add_scenario_args(p: argparse.ArgumentParser, positional: bool = True, exclude: tuple[str, ...] = ()) -> None:
    if positional:
        p.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON); flags override its fields")
    g = p.add_argument_group("scenario fields (override the file)")
    p.set_defaults(_scenario_flags=tuple(f for f in SCENARIO_FLAGS if f not in exclude))
    for flag, (_, _, kind) in SCENARIO_FLAGS.items():
        if flag in exclude:
            continue
        g.add_argument("--" + flag.replace("_", "-"), dest=flag, type=_number(kind, flag) if kind is not str else str,
                       default=None, metavar=flag.upper())


def scenario_data_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scenario fields given as flags, laid over `base` (a file's contents), not yet validated."""
    data: dict[str, Any] = dict(base or {})
    changed_count = False
    registered = getattr(args, "_scenario_flags", tuple(SCENARIO_FLAGS))
    for flag, (section, field, _) in SCENARIO_FLAGS.items():
        value = getattr(args, flag, None) if flag in registered else None
        if value is None:
            continue
        if section is None:
            data[field] = value
        else:
            data.setdefault(section, {}) if data.get(section) is not None else data.__setitem__(section, {})
            data[section][field] = value
        if flag in ("count", "tp", "pp", "cp"):
            changed_count = True
    if changed_count and getattr(args, "dp", None) is None and isinstance(data.get("parallel"), dict):
        data["parallel"]["dp"] = None
    if "model" not in data:
        raise InputError("scenario", "names no model.", "pass a scenario file or --model NAME (see `gpuplan models`).")
    return data


def partial_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """A partial scenario (hardware/layout may be open) for recommend and compare."""
    base: dict[str, Any] = {}
    if getattr(args, "scenario", None):
        from .search.recommend import load_partial
        base = load_partial(args.scenario)
    return scenario_data_from_args(args, base)


def scenario_from_args(args: argparse.Namespace, *, require_gpu: bool = True):
    """A Scenario from the positional file plus flag overrides."""
    from .scenario import load_scenario, scenario_from_dict
    base: dict[str, Any] = {}
    source = "(flags)"
    if getattr(args, "scenario", None):
        base = load_scenario(args.scenario).model_dump(exclude_none=False)
        source = f"file '{args.scenario}' with flags"
    data = scenario_data_from_args(args, base)
    if "model" not in data:
        raise InputError("scenario", "names no model.", "pass a scenario file or --model NAME (see `gpuplan models`).")
    if require_gpu and not (data.get("hardware") or {}).get("gpu"):
        raise InputError("scenario", "names no GPU.", "add `hardware: {gpu: ...}` or --gpu ID (see `gpuplan gpus`).")
    data.setdefault("hardware", {})
    return scenario_from_dict(data, source)


def _print_json(obj: Any) -> None:
    from .report import dumps
    print(dumps(obj))


# ---- commands -------------------------------------------------------------------------------------------
def cmd_models(args) -> int:
    from .models import get_model, list_models
    from .report import table
    from .units import fmt_count
    entries = list_models(args.search)
    if args.json:
        out = []
        for e in entries:
            m = get_model(e.name)
            out.append({"name": e.name, "hf_id": e.hf_id, "aliases": list(e.aliases), "model_type": m.model_type,
                        "params_total": m.params_total, "params_active": m.params_active, "source": e.source})
        _print_json(out)
        return 0
    rows = []
    for e in entries:
        m = get_model(e.name)
        active = fmt_count(m.params_active) if m.is_moe else ""
        rows.append((e.name, e.hf_id, m.model_type, fmt_count(m.params_total), active,
                     f"{m.max_position:,}" if m.max_position else "-"))
    print(table(rows, ["name", "hf id", "type", "params", "active", "context"], "lllrrr"))
    print(f"\n{len(rows)} models. Also accepted: any HF repo id (online) or a path to a config.json.")
    return 0


def cmd_model(args) -> int:
    from .models import get_model
    from .report import table
    from .units import fmt_bytes, fmt_count
    m = get_model(args.name)
    d = m.to_dict(args.seq_len)
    if args.meta:
        from .models.meta import meta_param_count
        d["meta_device"] = meta_param_count(m.config)
    if args.json:
        _print_json(d)
        return 0
    rows = [(k, f"{v:,} ({fmt_count(v)})" if k.startswith("params") and v else
             f"{v:.4g}" if k.startswith("flops_per") else v) for k, v in d.items()]
    print(table(rows, ["field", "value"], "lr"))
    print(f"\nKV cache: {d['kv_cache_bytes_per_token']:,} bytes/token at 16-bit "
          f"({fmt_bytes(d['kv_cache_bytes_per_token'] * 8192)} per 8k-token sequence).")
    return 0


def cmd_gpus(args) -> int:
    from .hardware import list_gpus
    from .report import table
    gpus = list_gpus(args.filter)
    if args.json:
        _print_json([g.to_dict() for g in gpus])
        return 0
    rows = []
    for g in gpus:
        bf16 = g.peak_flops_per_s.get("bf16")
        train = g.peak_flops_per_s.get("fp16_fp32acc", bf16)
        rows.append((g.id, g.name, f"{g.usable_memory_bytes / 2**30:.1f}", f"{g.mem_bandwidth_bytes_per_s / 1e12:.2f}",
                     f"{bf16 / 1e12:.0f}" if bf16 else "-", f"{train / 1e12:.0f}" if train else "-",
                     g.scale_up, f"{g.tdp_w:.0f}"))
    print(table(rows, ["id", "name", "usable GiB", "TB/s", "bf16 TF", "train TF", "scale-up", "TDP W"], "llrrrrlr"))
    print(f"\n{len(rows)} accelerators. Dense peak rates; 'train TF' is the 16-bit rate with fp32 accumulate.")
    return 0


def cmd_gpu(args) -> int:
    from .hardware import get_gpu
    from .report import table
    g = get_gpu(args.id)
    d = g.to_dict()
    if args.json:
        _print_json(d)
        return 0
    print(table([(k, v) for k, v in d.items()], ["field", "value"], "ll"))
    return 0


def cmd_estimate(args) -> int:
    from .pipeline import evaluate
    from .report import estimate_report
    est = evaluate(scenario_from_args(args))
    if args.json:
        _print_json(est.to_json())
    else:
        print(estimate_report(est))
    return 0


def cmd_memory(args) -> int:
    from .estimate.fit import fit_limits
    from .pipeline import evaluate
    from .report import memory_report
    est = evaluate(scenario_from_args(args))
    mem, warnings = est.memory, est.warnings
    limits = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
    if args.json:
        _print_json({"memory": mem.to_json(), "fit_limits": limits, "warnings": list(warnings)})
        return 0
    print(memory_report(mem, f"{est.model.name} on {est.scenario.hardware.count}x {est.gpu.id} ({est.scenario.task})"))
    if limits:
        shown = [f"{k} = {v:,}" if v is not None else f"{k}: nothing fits" for k, v in limits.items()]
        print("\nWhat fits on this hardware (everything else as in the scenario): " + ", ".join(shown))
    if not mem.fits:
        print("\n" + _fit_advice(est))
    for w in warnings:
        print(f"warning: {w}")
    return 0


def _fit_advice(r) -> str:
    """What to change so it fits: the fewest technique changes on this hardware, else more GPUs."""
    from .estimate.fit import fewest_gpus
    from .search.whatif import path_to_fit
    from .units import fmt_bytes
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


def cmd_speed(args) -> int:
    from . import pipeline
    from .report import performance_report, table
    from .units import fmt_count, fmt_seconds
    scn = scenario_from_args(args)
    if args.command == "serve" and scn.task != "infer":
        raise InputError("gpuplan serve", "needs task: infer.", "add --task infer or set `task: infer`.")
    if args.command != "serve" and scn.task == "infer":
        raise InputError("gpuplan train", "needs task: train or finetune.", "use `gpuplan serve` for inference.")
    r = pipeline.resolve(scn)
    est = pipeline.evaluate(r)
    perf, curve = est.performance, None
    if args.command == "serve":
        conc = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        curve = pipeline.serving_curve(r, est.memory, conc)
    if args.json:
        _print_json({"performance": perf.to_json(), "curve": curve, "memory": est.memory.to_json(),
                     "warnings": list(est.warnings)})
        return 0
    print(performance_report(perf))
    if not est.memory.fits:
        from .units import fmt_bytes
        print(f"\nDOES NOT FIT: peak {fmt_bytes(est.memory.peak_bytes_per_gpu)} per GPU > capacity "
              f"{fmt_bytes(est.memory.capacity_bytes_per_gpu)} (`gpuplan memory` shows the breakdown and what to change).")
    for w in est.warnings:
        print(f"warning: {w}")
    if curve:
        rows = [(c.get("concurrency"), fmt_count(c.get("output_tokens_per_s")), fmt_seconds(c.get("ttft_s")),
                 fmt_seconds(c.get("tpot_s")), "yes" if c.get("fits", True) else "no") for c in curve]
        print("\n" + table(rows, ["concurrency", "output tok/s", "TTFT", "TPOT", "fits"]))
    if getattr(args, "plot", None):
        from .plot import write_plot
        path = write_plot(args.plot, curve=curve, perf=perf)
        print(f"\nplot written to {path}")
    return 0


def cmd_schema(args) -> int:
    from .scenario import Scenario
    _print_json(Scenario.model_json_schema())
    return 0


# ---- parser ---------------------------------------------------------------------------------------------
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuplan", description="Plan LLM hardware: memory, speed, cost, and what to choose.")
    p.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("models", help="list bundled models")
    s.add_argument("search", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("model", help="parameters, KV cache and FLOPs of one model")
    s.add_argument("name", help="registry name, HF repo id, or path to config.json")
    s.add_argument("--seq-len", type=int, default=2048, help="context for the FLOPs figure")
    s.add_argument("--meta", action="store_true", help="also count on the meta device (needs gpuplan[trace])")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_model)

    s = sub.add_parser("gpus", help="list accelerators in the catalog")
    s.add_argument("filter", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_gpus)

    s = sub.add_parser("gpu", help="one accelerator's facts")
    s.add_argument("id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_gpu)

    for name, func, helptext in (("estimate", cmd_estimate, "memory, speed and cost of a scenario"),
                                 ("memory", cmd_memory, "per-GPU memory breakdown and what fits"),
                                 ("train", cmd_speed, "training step time breakdown"),
                                 ("serve", cmd_speed, "serving latency/throughput vs concurrency")):
        s = sub.add_parser(name, help=helptext)
        add_scenario_args(s)
        s.add_argument("--json", action="store_true")
        if name in ("train", "serve"):
            s.add_argument("--plot", metavar="FILE", help="write a chart (.svg, .png or .html)")
        s.set_defaults(func=func)

    s = sub.add_parser("schema", help="JSON schema of the scenario file")
    s.set_defaults(func=cmd_schema)

    _optional_commands(sub, command)
    return p


# Commands whose modules live in their own packages. Their parsers are built only when that
# command runs, so `gpuplan --help` and the core commands start without importing them.
OPTIONAL_COMMANDS: dict[str, tuple[str, str, str]] = {
    "recommend": ("gpuplan.search.cli", "add_parsers", "which GPUs, how many, configured how: ranked plans with reasons"),
    "compare": ("gpuplan.search.cli", "add_parsers", "several GPUs side by side for one workload"),
    "whatif": ("gpuplan.search.cli", "add_parsers", "memory saved and time cost of each memory-saving technique"),
    "launch": ("gpuplan.launch.cli", "add_parser", "write runnable launch configuration for a plan"),
    "trace": ("gpuplan.trace.cli", "add_parser", "measure per-GPU memory with PyTorch fake tensors (gpuplan[trace])"),
    "doctor": ("gpuplan.local.cli", "add_parsers", "your GPUs: what is here, what runs, why it ran out of memory"),
    "calibrate": ("gpuplan.local.cli", "add_parsers", "benchmark the local GPU(s) and write a hardware profile"),
    "measure": ("gpuplan.local.cli", "add_parsers", "run a scenario for a few steps on the local GPU"),
    "web": ("gpuplan.web.cli", "add_parser", "serve the web page and HTTP API"),
}


def _optional_commands(sub, command: str | None) -> None:
    import importlib
    chosen = OPTIONAL_COMMANDS.get(command or "")
    if chosen:
        getattr(importlib.import_module(chosen[0]), chosen[1])(sub)
    for name, (module, _, helptext) in OPTIONAL_COMMANDS.items():
        if not chosen or module != chosen[0]:
            sub.add_parser(name, help=helptext, add_help=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except GpuplanError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # an unexpected failure is still reported as one paragraph
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        print(f"error: internal error {type(err).__name__}: {err}. This is a gpuplan bug; rerun with "
              "GPUPLAN_DEBUG=1 for the traceback and report it.", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

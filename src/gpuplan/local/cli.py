"""CLI glue for `gpuplan doctor`, `gpuplan calibrate` and `gpuplan measure` (wired in by gpuplan.cli).

Exit codes: 0 done; 1 no usable GPU here, or the scenario does not fit (a one-paragraph message, no
traceback); 2 bad input (GpuplanError, reported by gpuplan.cliargs.report).
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..cliargs import MAX_GPUS, NO_PLAN, OK, add_scenario_args, positive_int, print_result
from ..errors import GpuplanError, InputError, MissingExtraError
from ..term import emit


def add_parsers(subparsers) -> None:
    s = subparsers.add_parser("doctor", help="your GPUs: what is here, what runs, and why it ran out of memory",
                              description="Detect local GPUs and say which models and tasks fit; or explain a "
                                          "PyTorch out-of-memory message (--oom).")
    s.add_argument("--oom", metavar="FILE", help="explain a PyTorch OOM message from FILE ('-' reads stdin)")
    s.add_argument("--scenario", metavar="FILE", help="with --oom: which knobs free how much for this scenario; "
                                                      "alone: does it fit on the local GPU")
    s.add_argument("--gpu", metavar="ID", help="answer for this catalog GPU instead of the detected one")
    s.add_argument("--count", type=positive_int("--count", MAX_GPUS), default=None,
                   help="number of GPUs (with --gpu; default 1)")
    s.add_argument("--models", metavar="A,B", help="only these models (default: every bundled model)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_doctor)

    s = subparsers.add_parser("calibrate", help="benchmark the local GPU(s) and write a hardware profile",
                              description="GEMM TFLOP/s per dtype and size, HBM bandwidth, NCCL bus bandwidth "
                                          "(all local GPUs, or all ranks under torchrun).")
    s.add_argument("--out", metavar="FILE", help="profile path (default: gpuplan-profile-<gpu>-<date>.json)")
    s.add_argument("--quick", action="store_true", help="fewer sizes and iterations (about a minute)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_calibrate)

    s = subparsers.add_parser("measure", help="run a scenario for a few steps on the local GPU, beside the prediction")
    add_scenario_args(s)
    s.add_argument("--steps", type=positive_int("--steps", 10000), default=3,
                   help="measured steps after one warm-up step (default 3)")
    s.add_argument("--ops", type=positive_int("--ops", 200), default=None, metavar="N",
                   help="profile one more step: GPU-busy time beside wall time and the N operators with the most "
                        "GPU time (where a step's time goes; wall well above busy = host-bound)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_measure)


MAX_OOM_LOG_BYTES = 16 << 20


def _no_gpu(msg: str, as_json: bool = False, command: str = "") -> int:
    """Exit 1 with the reason on stderr; under --json also the envelope (it did not run: no result numbers)."""
    print(msg, file=sys.stderr)
    if as_json:
        print_result(command, {"ran": False, "message": msg})
    return 1


def _unusable(err: GpuplanError, command: str) -> str:
    """One paragraph: why PyTorch cannot run here, and what the driver says."""
    from .detect import detect, no_gpu_message
    system = detect()
    if system.has_gpu:
        names = ", ".join(sorted({g.name for g in system.gpus}))
        return (f"{err.message} The driver does report {len(system.gpus)} GPU(s) ({names}; driver "
                f"{system.driver_version or '?'}, CUDA {system.cuda_version or '?'}): install a PyTorch build for that "
                "CUDA version, or check CUDA_VISIBLE_DEVICES.")
    return f"{err.message} {no_gpu_message(system, command)}"


def _read_oom(arg: str) -> str:
    if arg == "-":
        return sys.stdin.read()
    p = Path(arg)
    if not p.exists():
        raise InputError(f"--oom '{arg}'", "file does not exist.", "pass the log file, or '-' and paste the message on stdin.")
    if not p.is_file():
        raise InputError(f"--oom '{arg}'", "is not a regular file.", "pass the log file, or '-' and paste the message.")
    with p.open("rb") as fh:        # an OOM message is a few KB; a huge log is cut to its first MAX bytes
        return fh.read(MAX_OOM_LOG_BYTES).decode("utf-8", errors="replace")


def _print(obj, as_json: bool, command: str) -> None:
    if as_json:
        print_result(command, obj.to_json())
    else:
        emit(obj.render())


def run_doctor(args) -> int:
    from ..scenario import load_scenario
    from .detect import detect, no_gpu_message
    from .doctor import local_gpu_choice, render_system, what_runs
    from .oom import explain_oom

    scn = load_scenario(args.scenario) if args.scenario else None
    if args.oom:
        _print(explain_oom(_read_oom(args.oom), scn), args.json, "doctor")
        return 0
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    if args.gpu:
        if scn is not None:
            return _scenario_check(scn.replace(hardware={"gpu": args.gpu, "count": args.count or scn.hardware.count}),
                                   None, args.json)
        _print(what_runs(args.gpu, args.count or 1, models=models), args.json, "doctor")
        return 0
    if args.count is not None:
        raise InputError("--count", "only applies together with --gpu.", "add --gpu ID, e.g. --gpu h100-sxm --count 8.")
    system = detect()
    if not system.has_gpu:
        if args.json:
            print_result("doctor", {"system": system.to_json(), "message": no_gpu_message(system)})
        return _no_gpu(no_gpu_message(system))
    gid, n = local_gpu_choice(system)
    if gid is None:
        msg = (f"{render_system(system)}\n\nThe detected GPU ('{system.gpus[0].name}') is not in gpuplan's hardware "
               "catalog, so what fits cannot be estimated. Pass the closest catalog GPU with --gpu ID "
               "(`gpuplan gpus` lists them), or add yours with a user catalog CSV.")
        if args.json:
            print_result("doctor", {"system": system.to_json(), "message": msg})
        else:
            emit(msg)
        return 1
    if scn is not None:
        return _scenario_check(scn.replace(hardware={"gpu": gid, "count": n}), system, args.json)
    _print(what_runs(gid, n, models=models, system=system), args.json, "doctor")
    return 0


def _scenario_check(scn, system, as_json: bool) -> int:
    from .doctor import render_system
    from .oom import evaluate_knobs, fmt_bytes
    peak, cap, knobs = evaluate_knobs(scn)
    code = OK if peak <= cap else NO_PLAN
    if as_json:
        print_result("doctor", {"system": system.to_json() if system else None, "gpu": scn.hardware.gpu,
                                "count": scn.hardware.count, "peak_bytes_per_gpu": peak, "capacity_bytes_per_gpu": cap,
                                "fits": peak <= cap, "knobs": [k.to_json() for k in knobs]})
        return code
    if system is not None:
        emit(render_system(system) + "\n")
    verdict = "fits" if peak <= cap else f"does not fit (short by {fmt_bytes(peak - cap)})"
    emit(f"Scenario on {scn.hardware.count} x {scn.hardware.gpu}: predicted peak {fmt_bytes(peak)} per GPU of "
          f"{fmt_bytes(cap)}: {verdict}.")
    if knobs:
        from ..report import table
        rows = [(k.name, "-", "-", "not evaluated", k.error) if k.error else
                (k.name, fmt_bytes(k.bytes_freed), fmt_bytes(k.peak_bytes), "fits" if k.fits else "still short",
                 k.tradeoff) for k in knobs]
        emit("Knobs, most memory freed first:\n" + table(rows, ["knob", "frees", "peak after", "fits", "trade-off"],
                                                        "lrrll"))
    return code


def run_calibrate(args) -> int:
    from .calibrate import NoLocalGpuError, calibrate, is_rank0, save_profile
    try:
        from ..term import Progress
        with Progress("calibrate") as bar:
            profile = calibrate(quick=args.quick, progress=bar)
    except (NoLocalGpuError, MissingExtraError) as err:
        return _no_gpu(_unusable(err, "calibrate"), args.json, "calibrate")
    if not is_rank0():
        return 0
    import datetime as dt
    out = args.out or f"gpuplan-profile-{profile.gpu_id or 'gpu'}-{dt.date.today().isoformat()}.json"
    path = save_profile(profile, out)
    if args.json:
        print_result("calibrate", profile.to_json())
        return 0
    emit(f"{profile.gpu_count} x {profile.gpu_name} [{profile.gpu_id or 'not in catalog'}], world {profile.world_size}, "
          f"torch {profile.torch_version}, CUDA {profile.cuda_version}")
    for dtype, rate in profile.matmul_flops_per_s.items():
        emit(f"  GEMM {dtype:<5} best {rate / 1e12:8.1f} TFLOP/s")
    if profile.memory_bandwidth_bytes_per_s:
        emit(f"  HBM copy        {profile.memory_bandwidth_bytes_per_s / 1e9:8.0f} GB/s")
    for op, bw in profile.comm_bus_bandwidth_bytes_per_s.items():
        emit(f"  {op:<14}  {bw / 1e9:8.0f} GB/s bus bandwidth (best size)")
    emit(f"Profile written to {path}")
    return 0


def run_measure(args) -> int:
    from ..cliargs import scenario_from_args
    from .calibrate import NoLocalGpuError
    from .measure import measure
    scn = scenario_from_args(args)
    try:
        res = measure(scn, steps=args.steps, ops=args.ops or 0)
    except (NoLocalGpuError, MissingExtraError) as err:
        return _no_gpu(_unusable(err, "measure"), args.json, "measure")
    _print(res, args.json, "measure")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m gpuplan.local.cli doctor ...`) with gpuplan.cli's error handling."""
    from ..cliargs import Parser, report
    argv = list(sys.argv[1:] if argv is None else argv)

    def go() -> int:
        p = Parser(prog="gpuplan")
        add_parsers(p.add_subparsers(dest="command", required=True))
        args = p.parse_args(argv)
        return args.func(args)
    return report(next((a for a in argv if not a.startswith("-")), None), "--json" in argv, go)


if __name__ == "__main__":
    sys.exit(main())

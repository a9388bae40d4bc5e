"""`gpuplan trace SCENARIO [--json] [--compare]` — wired into gpuplan.cli by `add_parser`."""
from __future__ import annotations

import sys

from ..errors import GpuplanError

_COMPONENTS = ("weights", "gradients", "optimizer_states", "activations", "logits", "kv_cache",
               "temporary", "runtime_overhead")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "trace", help="measure per-GPU memory with PyTorch fake tensors (needs the trace extra)",
        description="Run the scenario's model for real on fake tensors (no GPU, no weights) and report the "
                    "peak allocated bytes per GPU, its breakdown and the phase where it happens.")
    from ..cliargs import add_scenario_args, positive_int
    add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--compare", action="store_true", help="show `gpuplan estimate` next to the trace")
    p.add_argument("--iterations", type=positive_int("--iterations", 100), default=2,
                   help="training iterations (default 2)")
    p.add_argument("--decode-steps", type=positive_int("--decode-steps", 10000), default=4,
                   help="inference decode steps (default 4)")
    p.set_defaults(func=run)
    return p


def _gib(n) -> str:
    return "-" if n is None else f"{n / 2**30:8.2f}"


def run(args) -> int:
    from ..cliargs import print_result, scenario_from_args
    from . import trace
    from ..term import Progress
    scenario = scenario_from_args(args)
    # a status line on stderr once the trace has run for a second (terminal only; never --quiet/--json);
    # it is cleared before the result or an error is printed
    with Progress("trace") as bar:
        result = trace(scenario, iterations=args.iterations, decode_steps=args.decode_steps, progress=bar)
    estimate, est_msg = None, None
    if args.compare:
        estimate, est_msg = _estimate(scenario)
    if args.json:
        out = {"trace": result.to_json()}
        if args.compare:
            out["estimate"] = estimate
            if est_msg:
                out["compare_message"] = est_msg
        print_result("trace", out)
        return 0
    from ..report import table
    from ..term import emit
    r = result
    emit(f"{r.model} {r.task}: peak {_gib(r.peak_bytes).strip()} GiB per GPU ({r.peak_bytes:,} bytes) "
         f"in {r.phase}; world size {r.world_size}; traced in {r.seconds:.1f} s")
    est_c = (estimate or {}).get("components", {}) if estimate else {}
    rows = []
    for k in list(_COMPONENTS) + ["total"]:
        t = r.peak_bytes if k == "total" else r.components.get(k, 0)
        row = [k, _gib(t).strip()]
        if estimate:
            e = estimate.get("peak_bytes_per_gpu") if k == "total" else est_c.get(k)
            row += [_gib(e).strip(), _gib(None if e is None else e - t).strip()]
        rows.append(row)
    emit(table(rows, ["component", "trace GiB"] + (["estimate GiB", "diff GiB"] if estimate else [])))
    if r.kv_cache_bytes is not None:
        emit(f"KV cache held: {r.kv_cache_bytes:,} bytes")
    if est_msg:
        emit(est_msg)
    emit("How it was measured:\n" + "\n".join(f"  - {n}" for n in r.method_notes), info=True)
    return 0


def _estimate(scenario):
    """The memory estimate of the traced plan, through the one pipeline (its failure is shown, not fatal:
    the trace itself is the answer)."""
    from .. import pipeline
    try:
        est = pipeline.memory(pipeline.resolve(scenario))
    except GpuplanError as err:
        return None, f"--compare: the estimate failed: {err}"
    t = getattr(scenario, "train", None)
    if t is not None and getattr(t, "objective", "sft") in ("grpo", "ppo", "rloo"):
        # the trace runs the training GPU's passes only (no rollout engine): name the estimate's phases
        phases = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in est.phases.items())
        return est.to_json(), ("--compare: an RL estimate's peak includes the rollout engine's reservation, which "
                               f"the trace does not run; compare the training phases: {phases} (each with the "
                               "estimate's runtime overhead)")
    return est.to_json(), None


def main(argv=None) -> int:     # standalone: python -m gpuplan.trace.cli SCENARIO
    from ..cliargs import Parser, report
    argv = list(argv if argv is not None else sys.argv[1:])

    def go() -> int:
        ap = Parser(prog="gpuplan")
        add_parser(ap.add_subparsers(dest="command", required=True))
        args = ap.parse_args(["trace", *argv])
        return args.func(args)
    return report("trace", "--json" in argv, go)


if __name__ == "__main__":
    raise SystemExit(main())

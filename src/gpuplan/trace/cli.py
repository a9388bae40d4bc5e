"""`gpuplan trace SCENARIO [--json] [--compare]` — wired into gpuplan.cli by `add_parser`."""
from __future__ import annotations

import sys
import time

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


class _Spinner:
    def __init__(self, stream=sys.stderr):
        self.stream, self.t0, self.last = stream, time.monotonic(), ""

    def __call__(self, msg: str) -> None:
        self.last = msg
        self.stream.write(f"\r[trace {time.monotonic() - self.t0:5.1f}s] {msg:<60}")
        self.stream.flush()

    def done(self):
        if self.last:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()


def _gib(n) -> str:
    return "-" if n is None else f"{n / 2**30:8.2f}"


def run(args) -> int:
    from ..cliargs import print_result, scenario_from_args
    from . import trace
    spinner = _Spinner()
    try:
        scenario = scenario_from_args(args)
        result = trace(scenario, iterations=args.iterations, decode_steps=args.decode_steps, progress=spinner)
    finally:        # errors are reported by gpuplan.cliargs.report, on a clean line
        spinner.done()
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
    r = result
    print(f"{r.model} {r.task}: peak {_gib(r.peak_bytes).strip()} GiB per GPU ({r.peak_bytes:,} bytes) "
          f"in {r.phase}; world size {r.world_size}; traced in {r.seconds:.1f} s")
    est_c = (estimate or {}).get("components", {}) if estimate else {}
    header = f"  {'component':<18}{'trace GiB':>10}"
    if estimate:
        header += f"{'estimate GiB':>14}{'diff GiB':>10}"
    print(header)
    rows = list(_COMPONENTS) + ["total"]
    for k in rows:
        t = r.peak_bytes if k == "total" else r.components.get(k, 0)
        line = f"  {k:<18}{_gib(t):>10}"
        if estimate:
            e = estimate.get("peak_bytes_per_gpu") if k == "total" else est_c.get(k)
            line += f"{_gib(e):>14}{_gib(None if e is None else e - t):>10}"
        print(line)
    if r.kv_cache_bytes is not None:
        print(f"  KV cache held: {r.kv_cache_bytes:,} bytes")
    if est_msg:
        print(est_msg)
    print("How it was measured:")
    for n in r.method_notes:
        print(f"  - {n}")
    return 0


def _estimate(scenario):
    """The memory estimate of the traced plan, through the one pipeline (its failure is shown, not fatal:
    the trace itself is the answer)."""
    from .. import pipeline
    try:
        est = pipeline.memory(pipeline.resolve(scenario))
    except GpuplanError as err:
        return None, f"--compare: the estimate failed: {err}"
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

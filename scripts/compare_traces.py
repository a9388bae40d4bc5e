"""Memory engine vs fake-tensor traces (validation/traces.json), component by component.

Prints one row per traced scenario: traced peak, estimated peak (runtime overhead excluded, since a
trace equals torch.cuda.max_memory_allocated), relative error, and the per-component differences.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.estimate.memory import estimate_memory  # noqa: E402
from gpuplan.estimate.results import MEMORY_COMPONENTS  # noqa: E402
from gpuplan.models import get_model  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402

GiB = 2 ** 30
CAPACITY = 10 ** 15   # no capacity limit for the comparison


def compare(traces: list[dict]) -> list[dict]:
    rows = []
    for t in traces:
        data = json.loads(json.dumps(t["scenario"]))
        if data.get("task") == "infer":
            # a trace runs HF prefill + a few decode steps, not a serving engine's reservation
            inf = data.setdefault("infer", {})
            inf.setdefault("engine", "hf")
            inf["output_len"] = t.get("decode_steps", 4)
        if (data.get("train") or {}).get("method") == "qlora":
            # the trace dequantizes NF4 and runs a frozen linear (torchao-style): no saved input
            data["train"]["qlora_backend"] = "torchao"
        scn = scenario_from_dict(data)
        est = estimate_memory(scn, get_model(scn.model), CAPACITY)
        allocated = est.peak_bytes_per_gpu - est.components["runtime_overhead"]
        traced = t["peak_bytes"]
        diffs = {k: est.components.get(k, 0) - t["components"].get(k, 0) for k in MEMORY_COMPONENTS
                 if k != "runtime_overhead"}
        rows.append(dict(name=t["name"], traced=traced, estimated=allocated, rel=(allocated - traced) / traced,
                         phase_trace=t["phase"], phase_est=est.phase, diffs=diffs))
    return rows


def main() -> None:
    traces = json.loads((ROOT / "validation" / "traces.json").read_text())
    rows = compare(traces)
    for r in rows:
        d = " ".join(f"{k[:5]}{v / GiB:+.2f}" for k, v in r["diffs"].items() if abs(v) > 0.01 * GiB)
        print(f"{r['name'][:40]:40} {r['traced'] / GiB:8.2f} {r['estimated'] / GiB:8.2f} {100 * r['rel']:+6.1f}% "
              f"{r['phase_trace'][:8]:>8}/{r['phase_est'][:8]:<8} {d}")
    errs = [abs(r["rel"]) for r in rows]
    print(f"\nmedian |error| {100 * statistics.median(errs):.1f} %, max {100 * max(errs):.1f} % over {len(rows)} traces")


if __name__ == "__main__":
    main()

"""Run a list of scenarios on the local GPU with `gpuplan measure` (random weights, HF transformers) and write one
JSON line per scenario: the scenario, what was measured (peak allocated / reserved / device-used bytes, step time,
TTFT, TPOT), gpuplan's prediction for the local catalog GPU, and the wall time of the run. A scenario that fails
(out of memory, missing package) writes its error instead and the suite goes on.

    PYTHONPATH=src python3 scripts/measure_suite.py scripts/sources/measure_suite_h200.yaml --out measure.jsonl

The suite file is YAML: `base` (fields every scenario shares) and `runs` (a list of {id, ...fields}). Nothing in the
package or its tests imports this; its rows become evidence only through validation/gathered with the run cited.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_suite(path: str) -> list[tuple[str, dict, int]]:
    """(id, scenario, ops) per run: `ops`, a suite-only field (in `base` or a run), profiles one more step with
    that many top kernels."""
    import yaml
    doc = yaml.safe_load(Path(path).read_text())
    base = doc.get("base", {})
    runs = []
    for r in doc["runs"]:
        data = _merge(base, r)
        rid, ops = data.pop("id"), int(data.pop("ops", 0))
        runs.append((rid, data, ops))
    return runs


def _free(torch) -> None:
    import gc
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_one(rid: str, data: dict, steps: int, ops: int) -> dict:
    from gpuplan.local.measure import measure
    from gpuplan.scenario import scenario_from_dict
    t0 = time.perf_counter()
    try:
        res = measure(scenario_from_dict(data, rid), steps=steps, ops=ops).to_json()
        row = {"id": rid, "ok": True, **res}
    except Exception as err:   # noqa: BLE001 - one failed scenario must not end the suite
        row = {"id": rid, "ok": False, "error": f"{type(err).__name__}: {err}"[:2000],
               "traceback": traceback.format_exc()[-3000:], "scenario": data}
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="run only these ids")
    ap.add_argument("--dry-run", action="store_true", help="validate the scenarios and predict; run nothing")
    a = ap.parse_args(argv)
    runs = [r for r in load_suite(a.suite) if not a.only or r[0] in a.only]
    if a.dry_run:
        from gpuplan.pipeline import evaluate
        from gpuplan.scenario import scenario_from_dict
        for rid, data, _ in runs:
            e = evaluate(scenario_from_dict(data, rid))
            p = e.performance
            print(f"{rid:<8} peak {e.memory.peak_bytes_per_gpu / 2**30:7.1f} GiB  step {p.step_time_s or 0:8.3f} s  "
                  f"ttft {p.ttft_s or 0:7.3f} s  tpot {(p.tpot_s or 0) * 1e3:7.2f} ms")
        return 0
    import torch
    with open(a.out, "a") as f:
        for rid, data, ops in runs:
            row = run_one(rid, data, a.steps, ops)
            f.write(json.dumps(row) + "\n")
            f.flush()
            m = row.get("measured") or {}
            print(f"{rid:<8} ok={row['ok']} wall {row['wall_s']:6.1f} s  "
                  f"{ {k: round(v, 4) for k, v in row.get('relative_error', {}).items()} }"
                  f"{'' if row['ok'] else ' ' + row['error'][:200]}  step={m.get('step_time_s')} tpot={m.get('tpot_s')}",
                  flush=True)
            _free(torch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

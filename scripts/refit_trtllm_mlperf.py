"""Diagnostic, writes nothing: what the TensorRT-LLM factors of scripts/calibrate_speed.py (stage 4: matmul.hopper.fp8,
matmul.blackwell.fp4, engines.trtllm.prefill_attention_scale, engines.trtllm.layer_overhead_s; stage 5:
matmul_rows_half) would be with the MLPerf Offline rows (validation/gathered/mlperf-offline.csv, scored rows) as a
second source beside the perf-overview page, and each source's rows predicted with the factors fitted without it
(leave-one-source-out).

The MLPerf rows are NOT a calibration source of the packaged factors. Their mean input length is now cited
(222.3 tokens: 5,463,976 / 24,576, the rows' lengths_basis), but its spread is not (min 48 and max 1021 only;
the simulator draws log-normal cv 1), and the predicted throughput still moves strongly with the input length
(validate_mlperf_offline.py --sensitivity). This script shows what the second source would do, for the record
(docs/speed.md §3.22).

Since 2026-12-04 none of those factors is fitted any more (each is a measured prior; the last, the per-layer step
cost, docs/speed.md §3.33), so the four fits below coincide and the factor table is empty: the script stays as the
record of §3.22's comparison and would show a second source's pull again if a TensorRT-LLM factor were fitted.

    PYTHONPATH=src python scripts/refit_trtllm_mlperf.py
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_speed as cs  # noqa: E402
import validate_mlperf_offline as mo  # noqa: E402

# calibrate_speed's stage 4 takes the rows whose source starts with "TensorRT" (and not Qwen3): the MLPerf rows
# join it under their own source key, so leave_one_source_out-style folds treat them as an independent source
MLPERF_SOURCE = "TensorRT-LLM in MLPerf Inference Offline (NVIDIA closed)"
PERF_OVERVIEW = "TensorRT-LLM perf-overview"
TRT_FACTORS = [path for path, stage in cs.FITTED if stage == "TensorRT-LLM"]


def mlperf_rows() -> list[cs.Row]:
    out = []
    for row in mo.load_rows():
        if row["scored"] != "yes":
            continue

        def f(P, row=row):
            return mo.predict(row, params=P)
        out.append(cs.Row(row["id"], MLPERF_SOURCE, "serve_throughput", "fit",
                          float(row["measured_output_tokens_per_s"]), f,
                          f"{row['model']} {row['gpu']} {row['gpus']}xTP{row['tp']} {row['weights']}"))
    return out


def without(rows: list[cs.Row], source: str) -> list[cs.Row]:
    return [cs.Row(r.id, r.source, r.category, "excluded" if r.source == source else r.split, r.measured, r.predict,
                   r.label) for r in rows]


def errors(rows: list[cs.Row], P: dict, split: str | None = None) -> list[float]:
    out = []
    for r in rows:
        if split and r.split != split:
            continue
        p = r.predict(P)
        out.append((p - r.measured) / r.measured if p and math.isfinite(p) else float("nan"))
    return out


def stat(errs: list[float]) -> str:
    e = [abs(x) for x in errs if math.isfinite(x)]
    if not e:
        return "n/a"
    return f"n={len(e)} MAPE {100 * statistics.fmean(e):.1f} % median {100 * statistics.median(e):.1f} %"


def main() -> None:
    trows = cs.train_rows(ROOT / "validation" / "public" / "train-throughput.csv")
    irows = cs.infer_rows(ROOT / "validation" / "public" / "inference.csv")
    ml = mlperf_rows()
    po = [r for r in irows if r.source == PERF_OVERVIEW]
    fits = {
        "perf-overview only (packaged)": cs.fit_all(trows, irows),
        "both sources": cs.fit_all(trows, irows + ml),
        "MLPerf only (perf-overview left out)": cs.fit_all(trows, without(irows, PERF_OVERVIEW) + ml),
        "neither (priors)": cs.fit_all(trows, without(irows, PERF_OVERVIEW)),
    }
    print("TensorRT-LLM factors by the sources they are fitted on")
    print(f"  {'factor':42s} " + " | ".join(f"{k:>22.22s}" for k in fits))
    for path in TRT_FACTORS:
        print(f"  {'.'.join(path):42s} " + " | ".join(f"{cs.get_path(P, path):>22.4g}" for P in fits.values()))
    print("\nperf-overview rows (fit / test split as calibrate_speed.py)")
    for name, P in fits.items():
        print(f"  {name:38s} fit {stat(errors(po, P, 'fit'))}   test {stat(errors(po, P, 'test'))}")
    print("\nMLPerf Offline rows")
    for name, P in fits.items():
        e = errors(ml, P)
        print(f"  {name:38s} {stat(e)}   per row " + " ".join(f"{r.id} {100 * x:+.1f}%" for r, x in zip(ml, e)))
    print("\nleave-one-source-out (each source's rows with the factors fitted without it):")
    lo_po = fits["MLPerf only (perf-overview left out)"]
    lo_ml = fits["perf-overview only (packaged)"]
    print(f"  perf-overview rows: before (priors) {stat(errors(po, fits['neither (priors)']))} -> "
          f"after (MLPerf-fitted) {stat(errors(po, lo_po))}")
    print(f"  MLPerf rows: perf-overview-fitted {stat(errors(ml, lo_ml))}")


if __name__ == "__main__":
    main()

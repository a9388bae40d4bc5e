"""Score gpuplan's serving simulator on MLPerf Inference *Offline* results (validation/gathered/mlperf-offline.csv):
NVIDIA's closed-division Llama-2-70B runs (v4.1: H100 SXM, H200 SXM, GH200 144GB, fp8; v5.1: B200, GB200, nvfp4),
each with the engine settings NVIDIA published beside it (batch, token budget, scheduler, KV fraction, TP).

MLPerf Offline hands the system every sample at t = 0 and reports output tokens over the run's wall time
(mlperf_log_summary.txt "Tokens per second"), a run of >= 2400 s (min_duration) over thousands of samples of
OpenOrca's varying lengths: a steady state at the engine's batch, not one finite wave of fixed lengths. So each
row is simulated as serve-load.csv's MLPerf rows are (scripts/validate_serving_load.py `offline_check`): one
replica (tp GPUs) runs OFFLINE_REQUESTS requests queued at t = 0 through the request-level simulator
(estimate/load: TensorRT-LLM's MAX_UTILIZATION scheduler, the row's max batch and token budget, the KV pool at
the row's memory fraction), lengths log-normal around the row's means (cv 1, clipped to 4-1024), the TensorRT
C++ executor (`trtllm_backend: tensorrt`, synchronous loop, no HTTP front end); the system's throughput is
replicas x the replica's. `trtllm_bench.offline_run_seconds` (the perf-overview path) is not used: it prices
trtllm-bench's finite run of identical requests under GUARANTEED_NO_EVICT, not this workload.

Held out: no factor is fitted on these rows (the packaged efficiency.json is used as shipped).

    PYTHONPATH=src python scripts/validate_mlperf_offline.py [--sensitivity]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from gpuplan import pipeline  # noqa: E402
import validate_serving_load as vsl  # noqa: E402

CSV = ROOT / "validation" / "gathered" / "mlperf-offline.csv"
OFFLINE_REQUESTS = vsl.OFFLINE_REQUESTS      # per replica: the fill-up and the drain are a small part of the run
SENSITIVITY_INPUTS = (150, 600)              # the rows' cited input mean is 222.3; their spread (cv) is not published


def load_rows(path: Path = CSV) -> list[dict]:
    return list(csv.DictReader(path.open(encoding="utf-8")))


def replicas(row: dict) -> int:
    return max(1, int(row["gpus"]) // (int(row["tp"]) * int(row["pp"] or 1)))


def as_load_row(row: dict) -> dict:
    """The row in serve-load.csv's shape, so that its scenario builder (lengths, engine flags, C++ executor,
    no front end) is the one used for the MLPerf Server rows."""
    return {"tp": row["tp"], "pp": row["pp"], "gpus": row["gpus"], "arrival": "offline", "requests": OFFLINE_REQUESTS,
            "rate_per_s": "", "clients": "", "input_mean_tokens": row["input_mean_tokens"],
            "output_mean_tokens": row["output_mean_tokens"], "dataset": row["dataset"], "engine": row["engine"],
            "engine_version": row["engine_version"], "weights": row["weights"], "kv_cache": row["kv_cache"],
            "max_num_seqs": row["max_num_seqs"], "gpu_memory_utilization": row["gpu_memory_utilization"],
            "max_num_batched_tokens": row["max_num_tokens"], "capacity_scheduler": row["capacity_scheduler"],
            "http_front_end": "no: in-process loadgen", "model": row["model"], "gpu": row["gpu"]}


def predict(row: dict, input_mean: float | None = None, params: dict | None = None) -> float:
    """Predicted system output tokens/s (all replicas) of the row's Offline run; `params`: speed factors
    (default: the packaged efficiency.json)."""
    scn = vsl.scenario(as_load_row(row), input_mean=input_mean)
    r = pipeline.resolve(scn, speed_params=params)
    out = pipeline.serving_load(r, pipeline.memory(r), search=False)
    return out["output_tokens_per_s"] * replicas(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sensitivity", action="store_true", help="also predict at input means 150 and 600 tokens")
    args = ap.parse_args()
    rows = load_rows()
    errs: dict[str, list[float]] = {}
    print("MLPerf Offline, NVIDIA closed (held out: nothing fitted on these rows)")
    for row in rows:
        meas = float(row["measured_output_tokens_per_s"])
        label = f"{row['id']} {row['gpu']:12s} {row['gpus']}x tp{row['tp']} {row['weights']:5s} batch {row['max_num_seqs'] or '?':>4}"
        if row["scored"] != "yes":
            print(f"  {label}  measured {meas:9.0f} tok/s  not scored ({row['notes'].split('NOT SCORED: ')[-1][:70]})")
            continue
        pred = predict(row)
        e = (pred - meas) / meas
        errs.setdefault(row["source"], []).append(e)
        line = f"  {label}  measured {meas:9.0f} tok/s  predicted {pred:9.0f}  {100 * e:+6.1f} %"
        if args.sensitivity:
            alt = [predict(row, x) for x in SENSITIVITY_INPUTS]
            line += "   at input " + " / ".join(f"{x}: {100 * (a - meas) / meas:+.0f} %" for x, a in zip(SENSITIVITY_INPUTS, alt))
        print(line)
    every = [e for v in errs.values() for e in v]
    for src, v in errs.items():
        print(f"  {src}: n={len(v)} median |err| {100 * statistics.median(map(abs, v)):.1f} %  "
              f"MAPE {100 * statistics.fmean(map(abs, v)):.1f} %  median signed {100 * statistics.median(v):+.1f} %")
    if every:
        print(f"  all scored: n={len(every)} median |err| {100 * statistics.median(map(abs, every)):.1f} %  "
              f"MAPE {100 * statistics.fmean(map(abs, every)):.1f} %")


if __name__ == "__main__":
    main()

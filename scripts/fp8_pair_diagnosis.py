"""Split measured bf16 -> FP8 training pairs into GEMM and non-GEMM time: a diagnosis, nothing here feeds the model.

FP8 training changes two things in a step: the decoder linears' GEMMs run R times faster and the FP8 casts add
memory-bound passes (ΔC). Everything else (attention, norms, loss, optimizer, hidden communication) is the same
in both runs. So a measured pair on the same machine, settings and software,
    t_bf16 = G + X        t_fp8 = G / R + ΔC + X,
gives the real GEMM time G = (t_bf16 − t_fp8 + ΔC) / (1 − 1/R) and the rest X = t_bf16 − G, where R and ΔC are
gpuplan's own (R: its bf16 over FP8 matmul time, with the FP8-vs-16-bit sustained ratio of
estimate/sustained_gemm.py; ΔC: the cast passes of estimate/fp8.py). Comparing G and X with gpuplan's matmul
and non-matmul time says which side of the step a wrong prediction lies on (docs/speed.md §2.11). It reads the
scored rows of validation/gathered/train.csv; no constant is derived from it.

    PYTHONPATH=src python scripts/fp8_pair_diagnosis.py
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from gpuplan import api  # noqa: E402
from validate_gathered import scenario  # noqa: E402

# what must match for two rows to be a pair (same run but the precision and recipe)
_SAME = ("source", "model", "gpu", "gpus", "framework", "fsdp", "tp", "pp", "cp", "micro_batch", "global_batch",
         "seq_len", "recompute", "compile", "compile_loss")


def split_pair(t_bf16: float, t_fp8: float, gemm_speedup: float, extra_cast_s: float) -> tuple[float, float]:
    """(GEMM seconds, other seconds) of the bf16 step, from the measured step times of a bf16/FP8 pair, the
    FP8 speed-up R of the GEMMs and the FP8 casts' added seconds ΔC."""
    if gemm_speedup <= 1.0:
        raise ValueError(f"gemm_speedup {gemm_speedup} must exceed 1: FP8 GEMMs that are not faster leave G undetermined")
    gemm = (t_bf16 - t_fp8 + extra_cast_s) / (1.0 - 1.0 / gemm_speedup)
    return gemm, t_bf16 - gemm


def pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(bf16 row, FP8 row) for every FP8 row with a bf16 sibling of the same source and settings."""
    base = {tuple(r[k] for k in _SAME): r for r in rows if r["precision"] == "bf16" and r["tokens_per_s_per_gpu"]}
    return [(base[key], r) for r in rows
            if r["precision"] == "fp8" and r["tokens_per_s_per_gpu"] and (key := tuple(r[k] for k in _SAME)) in base]


def diagnose(b16: dict, f8: dict) -> dict:
    """Measured and predicted step seconds per GPU of a pair and the split of each bf16 step."""
    eb, ef = api.estimate(scenario(b16)), api.estimate(scenario(f8))
    pb, pf = eb.performance, ef.performance
    tokens_gpu = pb.details["tokens_per_step"] / int(b16["gpus"])
    mb, mf = tokens_gpu / float(b16["tokens_per_s_per_gpu"]), tokens_gpu / float(f8["tokens_per_s_per_gpu"])
    r = pb.breakdown["compute_matmul"] / pf.breakdown["compute_matmul"]
    dc = pf.breakdown["compute_memory_bound"] - pb.breakdown["compute_memory_bound"]
    g, x = split_pair(mb, mf, r, dc)
    g_model = pb.breakdown["compute_matmul"]
    return {"pair": f"{b16['id']}->{f8['id']}", "gpu": b16["gpu"], "recipe": f8.get("fp8_recipe") or "tensorwise",
            "measured_s": (mb, mf), "predicted_s": (pb.step_time_s, pf.step_time_s), "R": r, "dC": dc,
            "gemm_s": (g, g_model), "other_s": (x, pb.step_time_s - g_model),
            # under TP, torchtitan's float8 linears also all-gather in FP8 (§2.10 item 3): the FP8 run changes
            # communication too, which the split charges to the GEMMs
            "caveat": "TP>1: FP8 also changes TP comm" if int(b16["tp"]) > 1 else ""}


def main() -> None:
    with open(ROOT / "validation/gathered/train.csv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["notes"].startswith("unscored:")]
    print(f"{'pair':14} {'gpu':20} {'recipe':14} {'meas bf16/fp8 s':>16} {'pred bf16/fp8 s':>16} {'R':>5} "
          f"{'dC s':>6}  {'GEMM s implied/model':>21}  {'other s implied/model':>22}")
    for b16, f8 in pairs(rows):
        d = diagnose(b16, f8)
        print(f"{d['pair']:14} {d['gpu']:20} {d['recipe']:14} {d['measured_s'][0]:7.3f}/{d['measured_s'][1]:<8.3f}"
              f" {d['predicted_s'][0]:7.3f}/{d['predicted_s'][1]:<8.3f} {d['R']:5.2f} {d['dC']:6.3f}"
              f"  {d['gemm_s'][0]:9.3f}/{d['gemm_s'][1]:<11.3f}  {d['other_s'][0]:10.3f}/{d['other_s'][1]:<11.3f}"
              f" {d['caveat']}")


if __name__ == "__main__":
    main()

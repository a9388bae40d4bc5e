"""Compare gpuplan's largest trainable context with Unsloth's published max-context tables
(validation/gathered/unsloth_context.csv): Unsloth rows through `tool: unsloth`, the table's HF + FA2 column
through the plain HF profile. Nothing is fitted on these rows. Prints each row and the error summary.

    PYTHONPATH=src python scripts/validate_unsloth_context.py [--csv]

A row's VRAM is taken as GiB of usable memory (a "24 GB" card has 24 GiB); the largest sequence whose whole
estimate (allocated peak + runtime overhead) fits is found by bisection on train.seq_len.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.errors import GpuplanError  # noqa: E402
from gpuplan.estimate.memory import estimate_memory  # noqa: E402
from gpuplan.models import get_model  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402

GiB = 1024 ** 3
CSV = ROOT / "validation" / "gathered" / "unsloth_context.csv"


def scenario(row: dict, seq_len: int):
    train = {"method": row["method"], "lora_rank": int(row["lora_rank"]), "lora_targets": row["lora_targets"],
             "micro_batch": int(row["micro_batch"]), "optimizer": row["optimizer"], "seq_len": seq_len,
             "allow_longer_context": True}
    data = {"model": row["model"], "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
            "train": train}
    if row["tool"]:
        data["tool"] = row["tool"]
        if row["tool"] == "unsloth" and row["published"] < "2025-03":
            # the table's software: Unsloth before 4f166026d7 (2025-03-01) added the LoRA path out of place
            train["unsloth_lora_addmm"] = False
            # its pyproject (d9ed4bef) installs xformers, not flash-attn: Unsloth's xformers path (K, V expanded)
            train["attention"] = "sdpa"
    else:
        train["recompute"] = "full"          # HF baseline with gradient checkpointing (assumed on)
    return scenario_from_dict(data)


def max_context(row: dict, hi: int = 4_000_000) -> int | None:
    model, cap = get_model(row["model"]), int(float(row["vram_gb"]) * GiB)

    def fits(s: int) -> bool:
        try:
            return estimate_memory(scenario(row, s), model, cap).fits
        except GpuplanError:
            return False
    lo = 16
    if not fits(lo):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", action="store_true", help="print rows as CSV")
    a = ap.parse_args()
    rows = list(csv.DictReader(CSV.open(newline="", encoding="utf-8")))
    errs: dict[str, list[float]] = {}
    if a.csv:
        print("id,tool,model,vram_gb,published,predicted,error")
    for r in rows:
        pred = max_context(r)
        pub = int(r["max_seq_len"])
        err = None if pred is None else (pred - pub) / pub
        group = r["tool"] or "hf+fa2"
        if err is not None:
            errs.setdefault(group, []).append(err)
        if a.csv:
            print(f"{r['id']},{group},{r['model']},{r['vram_gb']},{pub},{pred},{'' if err is None else f'{err:.4f}'}")
        else:
            e = "  (does not fit)" if err is None else f"{err:+7.1%}"
            print(f"{r['id']}  {group:8} {r['model']:14} {r['vram_gb']:>3} GB  published {pub:>8,}  "
                  f"gpuplan {pred or 0:>9,}  {e}")
    if not a.csv:
        for g, es in errs.items():
            print(f"{g:8} n={len(es):2}  median |err| {statistics.median(abs(e) for e in es):6.1%}  "
                  f"median signed {statistics.median(es):+6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

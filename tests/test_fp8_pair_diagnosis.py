"""scripts/fp8_pair_diagnosis.py: the split of a measured bf16/FP8 training pair into GEMM and other time."""
from __future__ import annotations

import csv

import pytest

from script_module import ROOT, load_script

diag = load_script("scripts/fp8_pair_diagnosis.py")


def test_split_recovers_a_step_built_by_hand():
    # bf16 step: GEMMs 0.6 s + other 0.9 s = 1.5 s; FP8 GEMMs 1.8x faster and casts +0.05 s:
    # 0.6/1.8 + 0.05 + 0.9 = 1.28333 s
    gemm, other = diag.split_pair(1.5, 0.6 / 1.8 + 0.05 + 0.9, 1.8, 0.05)
    assert gemm == pytest.approx(0.6) and other == pytest.approx(0.9)


def test_split_refuses_fp8_gemms_that_are_not_faster():
    with pytest.raises(ValueError, match="gemm_speedup"):
        diag.split_pair(1.5, 1.4, 1.0, 0.0)


def test_pairs_are_the_fp8_rows_with_a_bf16_sibling_of_the_same_source_and_settings():
    with open(ROOT / "validation/gathered/train.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    found = {(b["id"], f["id"]) for b, f in diag.pairs(rows)}
    # torchao's README tables: one bf16 row per machine, each FP8 recipe against it
    assert {("TA01", "TA02"), ("TA01", "TA03"), ("TA04", "TA05"), ("TA04", "TA06"), ("TA04", "TA07")} <= found
    # never across machines or sources
    assert ("TA01", "TA05") not in found and not any(b.startswith("TT") and f.startswith("TA") for b, f in found)

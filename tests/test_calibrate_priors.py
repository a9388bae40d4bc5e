"""scripts/calibrate_speed.py: a fitted factor's prior (its value in a leave-one-source-out fold that removes
every row it is fitted on) comes from a measurement, checked here against that measurement."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_speed as cs  # noqa: E402
from gpuplan.estimate import speed  # noqa: E402
from gpuplan.estimate.calibration import thaw  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402

MAF_CSV = ROOT / "src" / "gpuplan" / "estimate" / "data" / "max_achievable_gemm.csv"


def _mamf_h100_fp8() -> dict:
    with MAF_CSV.open(encoding="utf-8") as fh:
        return next(r for r in csv.DictReader(fh) if r["gpu"] == "h100-sxm" and r["dtype"] == "fp8")


def test_hopper_fp8_prior_reproduces_the_measured_mamf_rate():
    # with the prior as Hopper's FP8 efficiency, the speed model's own GEMM time at the MAMF finder's best shape
    # gives back the measured 1402.6 TFLOP/s (within the 1 % the cap at 1.0 costs)
    row = _mamf_h100_fp8()
    P = thaw(speed.load_efficiency())
    P["matmul"]["hopper"]["fp8"] = cs.hopper_fp8_prior(P)
    m, n, k = (float(row[c]) for c in ("m", "n", "k"))
    t = speed.gemm_time(P, get_gpu("h100-sxm"), "fp8", m, k, n, weight_bytes_per_el=1.0, act_bytes=1.0)
    assert 2 * m * k * n / t / 1e12 == pytest.approx(float(row["maf_tflops_per_s"]), rel=0.02)


def test_hopper_fp8_prior_is_a_fraction_and_follows_the_clock_model():
    P = thaw(speed.load_efficiency())
    assert 0.2 <= cs.hopper_fp8_prior(P) <= 1.0                # inside the fit's bounds
    fast_clock = thaw(speed.load_efficiency())
    fast_clock["power_flops_per_watt"]["hopper"] = P["power_flops_per_watt"]["hopper"] * 1.3   # a higher sustained clock
    # a faster modelled clock leaves less of the measured rate to the GEMM efficiency (or the same, at the cap)
    assert cs.hopper_fp8_prior(fast_clock) <= cs.hopper_fp8_prior(P)

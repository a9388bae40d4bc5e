"""Cost model: whole-instance renting, ownership, per-run and per-token prices, break-even."""
from __future__ import annotations

import math

import pytest

from gpuplan.estimate.cost import HOURS_PER_MONTH, HOURS_PER_YEAR, estimate_cost, own_quote, rent_quotes
from gpuplan.estimate.results import PerformanceEstimate
from gpuplan.hardware import get_gpu, offerings
from gpuplan.scenario import scenario_from_dict

TRAIN_PERF = PerformanceEstimate(step_time_s=10.0, tokens_per_s_per_gpu=1000.0, time_to_train_s=36_000.0)
SERVE_PERF = PerformanceEstimate(ttft_s=0.2, tpot_s=0.02, output_tokens_per_s=5000.0)


def _scn(gpu="h100-sxm", count=8, task="train", **cost):
    data = {"model": "llama-3.1-8b", "task": task, "hardware": {"gpu": gpu, "count": count}, "cost": cost}
    return scenario_from_dict(data)


def test_whole_instances_are_billed():
    # 3 GPUs on a provider that only sells 8-GPU boxes cost the whole box: billed GPUs >= requested,
    # and the price is instances x instance price (never 3/8 of it).
    for q in rent_quotes("h100-sxm", 3, ("lambda",) if any(o.provider == "lambda" for o in offerings("h100-sxm")) else None):
        assert q.gpus_billed >= 3
        assert q.gpus_billed == q.instances * q.gpus_per_instance
        assert q.usd_per_hour == pytest.approx(q.instances * q.usd_per_instance_hour)
    eight_only = [o for o in offerings("h100-sxm") if o.gpus_per_instance == 8 and o.usd_per_hour_on_demand]
    assert eight_only
    o = eight_only[0]
    quotes = rent_quotes("h100-sxm", 3, (o.provider,))
    if all(x.gpus_per_instance == 8 for x in quotes):
        assert quotes[0].usd_per_hour >= min(x.usd_per_hour_on_demand for x in eight_only if x.provider == o.provider)


def test_multi_node_uses_the_largest_instance_shape():
    # 64 GPUs for one job must come as big nodes (the interconnect the speed model assumes),
    # not as 64 single-GPU rentals.
    biggest = max(o.gpus_per_instance for o in offerings("h100-sxm"))
    for q in rent_quotes("h100-sxm", 64):
        assert q.gpus_per_instance == biggest
        assert q.instances == math.ceil(64 / biggest)


def test_cheapest_offering_first_and_user_price_wins():
    quotes = rent_quotes("a100-sxm-80gb", 8)
    assert [q.usd_per_hour for q in quotes] == sorted(q.usd_per_hour for q in quotes)
    est = estimate_cost(_scn("a100-sxm-80gb", 8, usd_per_gpu_hour=1.0), get_gpu("a100-sxm-80gb"), TRAIN_PERF)
    assert est.usd_per_hour == pytest.approx(8.0)
    assert "your price" in est.basis


def test_spot_is_cheaper_when_allowed():
    on = estimate_cost(_scn("h100-sxm", 8), get_gpu("h100-sxm"), TRAIN_PERF)
    spot = estimate_cost(_scn("h100-sxm", 8, spot=True), get_gpu("h100-sxm"), TRAIN_PERF)
    assert spot.usd_per_hour <= on.usd_per_hour


def test_providers_filter_and_basis_names_provider_and_date():
    est = estimate_cost(_scn("h100-sxm", 8, providers=["aws"]), get_gpu("h100-sxm"), TRAIN_PERF)
    assert est.details["rent"]["provider"] == "aws"
    assert "aws" in est.basis and est.details["rent"]["retrieved"] in est.basis
    assert est.details["rent"]["source_url"]


def test_run_cost_and_per_token_follow_the_hourly_price():
    # $ per run = $/h x hours; $/M tokens = $/h / (tokens/s x 3600) x 1e6 (training: trained tokens)
    est = estimate_cost(_scn("h100-sxm", 8, usd_per_gpu_hour=2.0), get_gpu("h100-sxm"), TRAIN_PERF)
    assert est.usd_per_hour == pytest.approx(16.0)
    assert est.usd_total == pytest.approx(16.0 * 10.0)
    assert est.usd_per_million_tokens == pytest.approx(16.0 / (8000 * 3600) * 1e6)


def test_serving_cost_per_output_token_and_no_run_total():
    # serving has no run length: usd_total is null, never a made-up 0
    est = estimate_cost(_scn("h100-sxm", 2, task="infer", usd_per_gpu_hour=2.0), get_gpu("h100-sxm"), SERVE_PERF)
    assert est.usd_total is None
    assert est.usd_per_million_tokens == pytest.approx(4.0 / (5000 * 3600) * 1e6)
    assert est.details["usd_per_million_tokens_of"].startswith("generated")


def test_ownership_equation():
    # capex x (1 + server share) x (1 - residual) / (years x 8766 h) + TDP x util x PUE x $/kWh
    gpu = get_gpu("h100-sxm")
    scn = _scn("h100-sxm", 8, capex_usd_per_gpu=20000, server_overhead_fraction=0.5, residual_fraction=0.2,
               years=4, electricity_usd_per_kwh=0.1, pue=1.5, utilization=0.5)
    q = own_quote(gpu, scn.cost)
    assert q.capex_usd_per_gpu == pytest.approx(30000)
    assert q.amortized_usd_per_gpu_hour == pytest.approx(30000 * 0.8 / (4 * HOURS_PER_YEAR))
    assert q.power_usd_per_gpu_hour == pytest.approx(gpu.tdp_w * 0.5 * 1.5 / 1000 * 0.1)
    own = estimate_cost(scn.replace(cost={"basis": "own"}), gpu, TRAIN_PERF)
    assert own.usd_per_hour == pytest.approx(8 * q.usd_per_gpu_hour)
    assert own.details["headline"] == "own"


def test_breakeven_months():
    # months of continuous use after which buying beats renting: capex / (rent - power) per month
    gpu = get_gpu("h100-sxm")
    scn = _scn("h100-sxm", 8, usd_per_gpu_hour=2.0, capex_usd_per_gpu=25000)
    est = estimate_cost(scn, gpu, TRAIN_PERF)
    q = own_quote(gpu, scn.cost)
    expect = 8 * q.capex_usd_per_gpu / ((16.0 - 8 * q.power_usd_per_gpu_hour) * HOURS_PER_MONTH)
    assert est.details["breakeven_months"] == pytest.approx(expect)
    # renting for less than the electricity: buying never pays off
    cheap = estimate_cost(_scn("h100-sxm", 8, usd_per_gpu_hour=0.01), gpu, TRAIN_PERF)
    assert cheap.details["breakeven_months"] is None


def test_no_price_is_null_not_zero():
    gpu = get_gpu("h800-sxm")            # no rental offering and no launch price in the catalog
    est = estimate_cost(_scn("h800-sxm", 8), gpu, TRAIN_PERF)
    assert est.usd_per_hour is None and est.usd_total is None and est.usd_per_million_tokens is None
    assert "cost.usd_per_gpu_hour" in est.basis

"""Cost arithmetic checked against hand calculations from prices.csv / gpus.csv rows and the
scenario's `cost:` fields (defaults: 0.15 $/kWh, PUE 1.3, utilization 0.8, 3 years, 30 % residual,
25 % server share). Rows used (prices.csv, h100-sxm, retrieved 2026-12-02):
    runpod 1x 2.99 (spot 2.69) | 2x 5.98 | 4x 11.96 (spot 10.76) | 8x 23.92 (spot 21.52)
    lambda 1x 4.29 | 8x 31.92 (no spot) | aws p5.4xlarge 6.88 (spot 2.1102) | p5.48xlarge 55.04 (spot 9.3722)
gpus.csv h100-sxm: tdp_w 700, launch_price_usd 30000; h800-sxm: tdp_w 700, no launch price.
"""
from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from gpuplan.estimate.cost import estimate_cost, own_quote, rent_quotes
from gpuplan.estimate.results import PerformanceEstimate
from gpuplan.hardware import get_gpu
from gpuplan.hardware._csv import data_path
from gpuplan.scenario import scenario_from_dict

H = 8766.0            # hours per year (365.25 d)
MONTH = H / 12


def _scn(gpu="h100-sxm", count=8, task="train", **cost):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": task,
                               "hardware": {"gpu": gpu, "count": count}, "cost": cost})


def _train(tps_per_gpu=500.0, seconds=5400.0):
    return PerformanceEstimate(step_time_s=1.0, tokens_per_s_per_gpu=tps_per_gpu, time_to_train_s=seconds)


# ----------------------------------------------------------------------------- rent quotes

def test_three_gpus_at_runpod_take_one_four_gpu_box():
    quotes = rent_quotes("h100-sxm", 3, ("runpod",))
    # 1x and 2x shapes cannot hold a 3-GPU job (smaller than the 8-GPU shape): 4x and 8x remain
    assert [(q.instance_type, q.instances) for q in quotes] == [("4x_H100-SXM_SECURE", 1), ("8x_H100-SXM_SECURE", 1)]
    assert quotes[0].usd_per_hour == pytest.approx(11.96)
    assert quotes[0].gpus_billed == 4 and quotes[0].gpus_requested == 3
    assert quotes[1].usd_per_hour == pytest.approx(23.92)


def test_sixteen_gpus_take_two_eight_gpu_boxes():
    (q,) = rent_quotes("h100-sxm", 16, ("runpod",))
    assert (q.instance_type, q.instances, q.gpus_billed) == ("8x_H100-SXM_SECURE", 2, 16)
    assert q.usd_per_hour == pytest.approx(2 * 23.92)
    (q,) = rent_quotes("h100-sxm", 9, ("lambda",))
    assert q.instances == 2 and q.gpus_billed == 16
    assert q.usd_per_hour == pytest.approx(2 * 31.92)


def test_one_gpu_cheapest_three_match_the_price_rows():
    with open(data_path("prices.csv"), newline="", encoding="utf-8") as fh:
        prices = sorted(float(r["usd_per_hour_on_demand"]) for r in csv.DictReader(fh)
                        if r["gpu_id"] == "h100-sxm" and r["usd_per_hour_on_demand"].strip())
    quotes = rent_quotes("h100-sxm", 1)
    assert [q.usd_per_hour for q in quotes] == pytest.approx(prices[:3])
    assert all(q.price_kind == "on-demand" and q.instances == 1 for q in quotes)


def test_spot_prices_and_fallback_to_on_demand():
    (q,) = rent_quotes("h100-sxm", 8, ("runpod",), spot=True)
    assert q.price_kind == "spot" and q.usd_per_hour == pytest.approx(21.52)
    (q,) = rent_quotes("h100-sxm", 8, ("lambda",), spot=True)
    assert q.price_kind == "on-demand" and q.usd_per_hour == pytest.approx(31.92)
    (q,) = rent_quotes("h100-sxm", 8, ("aws",), spot=True)
    assert q.instance_type == "p5.48xlarge" and q.usd_per_hour == pytest.approx(9.3722)
    (q,) = rent_quotes("h100-sxm", 8, ("aws",))
    assert q.usd_per_hour == pytest.approx(55.04)


def test_two_providers_cheapest_first_and_limit():
    quotes = rent_quotes("h100-sxm", 8, ("lambda", "runpod"))
    assert [(q.provider, q.usd_per_hour) for q in quotes] == [("runpod", pytest.approx(23.92)),
                                                            ("lambda", pytest.approx(31.92))]
    quotes = rent_quotes("h100-sxm", 2, ("runpod",), limit=1)
    assert len(quotes) == 1 and quotes[0].usd_per_hour == pytest.approx(5.98)


def test_quote_to_dict_carries_totals():
    (q, _) = rent_quotes("h100-sxm", 3, ("runpod",))
    d = q.to_dict()
    assert d["gpus_billed"] == 4 and d["usd_per_hour"] == pytest.approx(11.96)
    assert d["retrieved"] == "2026-12-02" and d["source_url"].startswith("https://")


# ----------------------------------------------------------------------------- estimate: rent

def test_rent_per_hour_per_run_and_per_million_tokens():
    est = estimate_cost(_scn(count=3, providers=["runpod"]), get_gpu("h100-sxm"), _train(500.0, 5400.0))
    assert est.usd_per_hour == pytest.approx(11.96)                 # one 4-GPU box
    assert est.usd_total == pytest.approx(11.96 * 1.5)              # 5400 s = 1.5 h
    assert est.usd_per_million_tokens == pytest.approx(11.96 / (3 * 500 * 3600) * 1e6)
    assert est.details["run_hours"] == pytest.approx(1.5)
    assert est.details["rent"]["note"] == "3 GPUs need 1 x 4-GPU instance(s): 4 GPUs are billed"
    assert [a["instance_type"] for a in est.details["rent_alternatives"]] == ["8x_H100-SXM_SECURE"]
    assert est.basis == "on-demand, runpod 4x_H100-SXM_SECURE x1 (4 GPUs billed), price retrieved 2026-12-02"


def test_user_price_is_count_times_price_and_beats_catalog():
    est = estimate_cost(_scn(count=5, usd_per_gpu_hour=1.75, providers=["runpod"]), get_gpu("h100-sxm"),
                        _train(1000.0, 7200.0))
    assert est.usd_per_hour == pytest.approx(5 * 1.75)
    assert est.usd_total == pytest.approx(5 * 1.75 * 2)
    assert est.usd_per_million_tokens == pytest.approx(8.75 / (5000 * 3600) * 1e6)
    assert est.details["rent"]["price_kind"] == "user"
    assert est.basis == "rent at your price $1.75/GPU-h x 5 GPUs"


def test_spot_scenario_notes_when_no_spot_price():
    est = estimate_cost(_scn(count=8, providers=["lambda"], spot=True), get_gpu("h100-sxm"), _train())
    assert est.usd_per_hour == pytest.approx(31.92)
    assert "on-demand price used" in est.details["rent"]["spot_note"]
    spot = estimate_cost(_scn(count=8, providers=["runpod"], spot=True), get_gpu("h100-sxm"), _train())
    assert spot.usd_per_hour == pytest.approx(21.52)
    assert "spot_note" not in spot.details["rent"]
    assert spot.basis.startswith("spot, runpod")


def test_serving_per_million_output_tokens():
    perf = PerformanceEstimate(ttft_s=0.1, tpot_s=0.01, output_tokens_per_s=2000.0)
    est = estimate_cost(_scn(count=1, task="infer", providers=["runpod"]), get_gpu("h100-sxm"), perf)
    assert est.usd_per_hour == pytest.approx(2.99)
    assert est.usd_total is None
    assert est.usd_per_million_tokens == pytest.approx(2.99 / (2000 * 3600) * 1e6)


def test_no_perf_gives_hourly_price_only():
    est = estimate_cost(_scn(count=1, providers=["runpod"]), get_gpu("h100-sxm"), None)
    assert est.usd_per_hour == pytest.approx(2.99)
    assert est.usd_total is None and est.usd_per_million_tokens is None


# ----------------------------------------------------------------------------- ownership

def test_own_quote_from_launch_price_with_defaults():
    q = own_quote(get_gpu("h100-sxm"), _scn().cost)
    assert q.capex_usd_per_gpu == pytest.approx(30000 * 1.25)
    assert q.amortized_usd_per_gpu_hour == pytest.approx(37500 * 0.7 / (3 * H))
    assert q.power_kw_per_gpu == pytest.approx(0.7 * 0.8 * 1.3)
    assert q.power_usd_per_gpu_hour == pytest.approx(0.728 * 0.15)
    assert q.usd_per_gpu_hour == pytest.approx(26250 / 26298 + 0.1092)
    assert "launch price of h100-sxm" in q.capex_basis and "25% server share" in q.capex_basis


@pytest.mark.parametrize("fields, amort, power", [
    (dict(capex_usd_per_gpu=10000, server_overhead_fraction=0, residual_fraction=0, years=1),
     10000 / H, 0.7 * 0.8 * 1.3 * 0.15),
    (dict(capex_usd_per_gpu=10000, server_overhead_fraction=0, residual_fraction=1, years=1), 0.0,
     0.7 * 0.8 * 1.3 * 0.15),
    (dict(capex_usd_per_gpu=10000, server_overhead_fraction=1, residual_fraction=0.5, years=2),
     20000 * 0.5 / (2 * H), 0.7 * 0.8 * 1.3 * 0.15),
    (dict(electricity_usd_per_kwh=0.30, pue=1.0, utilization=1.0), 37500 * 0.7 / (3 * H), 0.7 * 0.30),
    (dict(electricity_usd_per_kwh=0, years=6), 37500 * 0.7 / (6 * H), 0.0),
])
def test_own_quote_each_field(fields, amort, power):
    q = own_quote(get_gpu("h100-sxm"), _scn(**fields).cost)
    assert q.amortized_usd_per_gpu_hour == pytest.approx(amort, abs=1e-12)
    assert q.power_usd_per_gpu_hour == pytest.approx(power, abs=1e-12)
    assert q.usd_per_gpu_hour == pytest.approx(amort + power, abs=1e-12)


def test_own_without_tdp_or_price():
    cost = _scn().cost
    no_tdp = SimpleNamespace(id="x", launch_price_usd=8000.0, launch_price_basis="", tdp_w=None)
    q = own_quote(no_tdp, cost)
    assert q.power_kw_per_gpu is None and q.power_usd_per_gpu_hour is None
    assert q.usd_per_gpu_hour == pytest.approx(8000 * 1.25 * 0.7 / (3 * H))
    assert own_quote(get_gpu("h800-sxm"), cost) is None            # no launch price, no capex given


def test_estimate_own_headline_and_totals():
    est = estimate_cost(_scn(count=3, basis="own", providers=["runpod"]), get_gpu("h100-sxm"), _train(500, 5400))
    per_gpu = 37500 * 0.7 / (3 * H) + 0.1092
    assert est.details["headline"] == "own"
    assert est.usd_per_hour == pytest.approx(3 * per_gpu)
    assert est.usd_total == pytest.approx(3 * per_gpu * 1.5)
    assert est.usd_per_million_tokens == pytest.approx(3 * per_gpu / (1500 * 3600) * 1e6)
    own = est.details["own"]
    assert own["capex_usd_total"] == pytest.approx(3 * 37500)
    assert own["usd_per_hour"] == pytest.approx(3 * per_gpu)
    assert est.details["own_usd_total"] == pytest.approx(3 * per_gpu * 1.5)
    # the rent side is still priced alongside
    assert est.details["rent_usd_total"] == pytest.approx(11.96 * 1.5)
    assert est.details["rent_usd_per_million_tokens"] == pytest.approx(11.96 / 5.4)
    assert "own 3 x h100-sxm" in est.basis and "30% residual" in est.basis
    assert "0.15 $/kWh" in est.basis and "PUE 1.3" in est.basis


def test_breakeven_by_hand():
    est = estimate_cost(_scn(count=3, providers=["runpod"]), get_gpu("h100-sxm"), _train())
    expect = 3 * 37500 / ((11.96 - 3 * 0.1092) * MONTH)
    assert est.details["breakeven_months"] == pytest.approx(expect)
    assert est.details["breakeven_months"] == pytest.approx(13.24, abs=0.01)


def test_own_basis_with_capex_for_gpu_without_launch_price():
    est = estimate_cost(_scn("h800-sxm", 8, basis="own", capex_usd_per_gpu=20000), get_gpu("h800-sxm"),
                        _train(1000, 3600))
    per_gpu = 25000 * 0.7 / (3 * H) + 0.7 * 0.8 * 1.3 * 0.15
    assert est.usd_per_hour == pytest.approx(8 * per_gpu)
    assert est.usd_total == pytest.approx(8 * per_gpu)
    assert est.details["rent"] is None and "no offering of h800-sxm" in est.details["rent_note"]
    assert est.details["breakeven_months"] is None


def test_rent_basis_without_offering_is_null():
    est = estimate_cost(_scn("h800-sxm", 8, basis="rent", capex_usd_per_gpu=20000), get_gpu("h800-sxm"), _train())
    assert est.usd_per_hour is None and est.usd_total is None and est.usd_per_million_tokens is None
    assert est.details["own"]["usd_per_hour"] is not None
    assert "cost.usd_per_gpu_hour" in est.basis

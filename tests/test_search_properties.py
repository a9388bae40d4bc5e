"""Invariants of the search over generated (valid) requests: every plan meets every limit it was
given, fits in memory with the headroom, is ranked in objective order, the front is non-dominated,
each plan equals `gpuplan estimate` of its scenario, and each candidate's memory is estimated once."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuplan.estimate.memory as memory_module
from gpuplan import pipeline
from gpuplan.search import recommend
from gpuplan.search.rank import dominates

GPUS = ["h100-sxm", "a100-sxm-80gb", "l40s", "rtx-4090", "a10g", "mi300x"]


@st.composite
def requests(draw):
    task = draw(st.sampled_from(["train", "finetune", "infer"]))
    model = draw(st.sampled_from(["qwen2.5-0.5b", "llama-3.1-8b"]))
    partial = {"model": model, "task": task}
    kw = {"gpus": draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True)),
          "objective": draw(st.sampled_from(["cheapest", "fastest", "cost_per_token", "weighted:cost=0.5,time=0.5"])),
          "top": draw(st.integers(1, 6)), "max_gpus": draw(st.sampled_from([1, 8, 64]))}
    if draw(st.booleans()):
        kw["min_headroom"] = draw(st.sampled_from([0.05, 0.2]))
    if task == "infer":
        partial["infer"] = {"concurrency": draw(st.sampled_from([1, 8, 32]))}
        if draw(st.booleans()):
            kw["tpot_s"] = draw(st.sampled_from([0.02, 0.05]))
        if draw(st.booleans()):
            kw["tokens_per_s"] = draw(st.sampled_from([500.0, 5000.0]))
    else:
        partial["train"] = {"seq_len": draw(st.sampled_from([1024, 4096])),
                            "tokens": draw(st.sampled_from([1e8, 1e10]))}
        if task == "finetune":
            partial["train"]["method"] = draw(st.sampled_from(["full", "lora", ["lora", "qlora"]]))
        if draw(st.booleans()):
            kw["budget_usd"] = draw(st.sampled_from([50.0, 5000.0]))
        if draw(st.booleans()):
            kw["deadline_days"] = draw(st.sampled_from([0.5, 7.0]))
    return partial, kw


def _check_limits(rec, kw):
    for p in rec.plans + rec.pareto:
        mem, perf, cost = p.estimate["memory"], p.estimate["performance"], p.estimate["cost"]
        assert p.count <= kw["max_gpus"]
        assert p.gpu in kw["gpus"]
        headroom = kw.get("min_headroom") or 0.0
        assert mem["peak_bytes_per_gpu"] <= mem["capacity_bytes_per_gpu"] * (1 - headroom) + 1
        if "budget_usd" in kw and cost["usd_total"] is not None:
            assert cost["usd_total"] <= kw["budget_usd"] * (1 + 1e-9)
        if "deadline_days" in kw:
            assert perf["time_to_train_s"] <= kw["deadline_days"] * 86400 * (1 + 1e-9)
        if "tpot_s" in kw:
            assert perf["tpot_s"] <= kw["tpot_s"]
        if "tokens_per_s" in kw:
            assert perf["output_tokens_per_s"] >= kw["tokens_per_s"] * (1 - 1e-9)


def _check_order(rec):
    assert [p.rank for p in rec.plans] == list(range(1, len(rec.plans) + 1))
    if rec.objective in ("cheapest", "fastest") and rec.preset is None:
        first = [p.cost_value if rec.objective == "cheapest" else p.time_value for p in rec.plans]
        warned = [bool(p.warnings and any("limited" in w for w in p.warnings)) for p in rec.plans]
        if not any(warned):
            assert first == sorted(first)
    pts = [(p.cost_value, p.time_value) for p in rec.pareto]
    for a in pts:
        assert not any(dominates(b, a) for b in pts)


@settings(max_examples=30, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(requests())
def test_plans_meet_every_limit_and_are_ranked(case):
    partial, kw = case
    rec = recommend(partial, progress=False, **kw)
    _check_limits(rec, kw)
    _check_order(rec)
    assert rec.stats["feasible"] >= len(rec.plans)
    assert len(rec.plans) <= kw["top"]


@settings(max_examples=12, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(requests())
def test_memory_is_estimated_once_per_candidate(case):
    partial, kw = case
    calls = []
    real = memory_module.estimate_memory
    memory_module.estimate_memory = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        rec = recommend(partial, progress=False, **kw)
    finally:
        memory_module.estimate_memory = real
    assert len(calls) == rec.stats["memory_evaluations"]


@settings(max_examples=10, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(requests())
def test_each_plan_is_what_estimate_says_for_its_scenario(case):
    partial, kw = case
    rec = recommend(partial, progress=False, **kw)
    for p in rec.plans[:2]:
        est = pipeline.evaluate(p.scenario)
        assert p.estimate["performance"] == est.performance.to_json()
        assert p.estimate["cost"] == est.cost.to_json()


@pytest.mark.parametrize("objective", ["cheapest", "fastest"])
def test_a_tighter_limit_never_gives_a_better_plan(objective):
    partial = {"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e10}}
    loose = recommend(partial, gpus=["h100-sxm", "l40s"], objective=objective, top=1, progress=False)
    tight = recommend(partial, gpus=["h100-sxm", "l40s"], objective=objective, max_gpus=8, top=1, progress=False)
    key = (lambda p: p.cost_value) if objective == "cheapest" else (lambda p: p.time_value)
    assert loose.plans and tight.plans
    assert key(loose.plans[0]) <= key(tight.plans[0]) * (1 + 1e-12)

"""Malformed partial scenarios straight into gpuplan.search.recommend (issue 16): whatever the input,
only a GpuplanError (a one-paragraph message naming the field) comes out, never a TypeError,
KeyError or ZeroDivisionError from inside the search, and never a hang (a 20 s deadline)."""
from __future__ import annotations

import json
import math
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.search import compare, recommend

JUNK = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, -8, 1, 2, 3, 7, 64, 10 ** 9, 10 ** 400, 0.0, -0.5, 0.5, 1.5, 1e400, -1e400,
                     math.nan, math.inf, "", "auto", "abc", "1", "h100-sxm", "bf16", "full", "vllm"]),
    st.lists(st.sampled_from([0, -1, 1, 2, 4, "x", None, 2.5, "bf16", "h100-sxm", "lora"]), max_size=4),
    st.dictionaries(st.sampled_from(["a", "gpu", "count", "cost"]), st.sampled_from([1, "x", None]), max_size=2),
)
FIELDS = {
    "hardware": ["gpu", "count", "gpus_per_node", "network", "profile", "extra"],
    "parallel": ["tp", "pp", "cp", "ep", "zero", "offload", "dp", "vpp", "sp"],
    "train": ["method", "micro_batch", "recompute", "optimizer", "precision", "attention", "seq_len",
              "global_batch", "tokens", "lora_rank"],
    "infer": ["engine", "weights", "kv_cache", "concurrency", "prompt_len", "output_len"],
    "constraints": ["budget_usd", "budget_usd_per_hour", "deadline_days", "max_gpus", "owned", "providers",
                    "ttft_s", "tpot_s", "tokens_per_s", "min_headroom", "bogus"],
    "cost": ["usd_per_gpu_hour", "spot", "providers", "basis"],
}
TOP_LEVEL = ["task", "objective", "preset", "framework", "hardware", "parallel", "train", "infer", "constraints"]
KWARGS = {"top": JUNK, "objective": st.one_of(JUNK, st.dictionaries(
    st.sampled_from(["cost", "time", "speed", "cost_per_token"]), JUNK, max_size=3)),
    "max_gpus": JUNK, "budget_usd": JUNK, "min_headroom": JUNK, "gpus": JUNK, "tokens_per_s": JUNK,
    "owned": JUNK, "providers": JUNK, "spot": JUNK, "deadline_days": JUNK}


@st.composite
def partial_and_kwargs(draw):
    task = draw(st.sampled_from(["train", "finetune", "infer"]))
    data = {"model": "qwen2.5-0.5b", "task": task, "hardware": {"gpu": ["h100-sxm", "rtx-4090"]},
            "constraints": {"max_gpus": 8}}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field", "field", "field", "top"]))
        if kind == "field":
            section = draw(st.sampled_from(sorted(FIELDS)))
            name = draw(st.sampled_from(FIELDS[section]))
            block = data.setdefault(section, {})
            if isinstance(block, dict):
                block[name] = draw(JUNK)
        else:
            data[draw(st.sampled_from(TOP_LEVEL))] = draw(JUNK)
    kwargs = {}
    for name in draw(st.lists(st.sampled_from(sorted(KWARGS)), max_size=2, unique=True)):
        kwargs[name] = draw(KWARGS[name])
    return data, kwargs


def _call(fn, data, kwargs):
    start = time.monotonic()
    try:
        out = fn(data, progress=False, deadline_s=start + 20.0, **kwargs) if fn is recommend else \
            fn(data, ["h100-sxm"], **kwargs)
    except GpuplanError as err:
        assert err.message and len(err.message) < 2000, err.message
        return None
    assert time.monotonic() - start < 25.0
    return out


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(partial_and_kwargs())
def test_malformed_partial_scenarios_give_only_gpuplan_errors(case):
    data, kwargs = case
    rec = _call(recommend, data, kwargs)
    if rec is not None:
        json.dumps(rec.to_json())         # a result is always serialisable
        assert rec.plans or rec.rejected or rec.stats["gpus_searched"] >= 0


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(partial_and_kwargs())
def test_malformed_partial_scenarios_through_compare_give_only_gpuplan_errors(case):
    data, kwargs = case
    kwargs.pop("gpus", None)
    _call(compare, data, kwargs)

"""The one evaluation pipeline (issue 18): resolve -> memory -> performance(memory) -> cost.

Invariants: memory is computed once per plan; a profile, the network and the software check are applied
once in resolve and reach every stage; facts travel as typed fields, not as parsed notes.
"""
import json

import pytest

import gpuplan.estimate.memory as memory_module
from gpuplan import pipeline
from gpuplan.errors import UnknownNameError, UnsupportedError
from gpuplan.hardware import get_gpu

TRAIN = {"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
         "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "recompute": "full"}}
SERVE = {"model": "llama-3.3-70b-instruct", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
         "parallel": {"tp": 2}, "infer": {"engine": "vllm", "weights": "bf16", "kv_cache": "bf16",
                                          "prompt_len": 2048, "output_len": 512, "concurrency": 8}}


def _profile(tmp_path, gpu_id="h100-sxm", bf16_fraction=0.3, name="profile.json"):
    gpu = get_gpu(gpu_id)
    data = {"schema": "gpuplan.hardware-profile/1", "gpu_name": gpu.name, "gpu_id": gpu_id, "gpu_count": 1,
            "created": "2026-12-02T00:00:00Z", "torch_version": "2.13.0", "cuda_version": "13.0",
            "matmul_flops_per_s": {"bf16": bf16_fraction * gpu.peak_flops_per_s["bf16"]},
            "memory_bandwidth_bytes_per_s": 0.5 * gpu.mem_bandwidth_bytes_per_s}
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


@pytest.fixture
def memory_calls(monkeypatch):
    calls = []
    real = memory_module.estimate_memory

    def counting(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)
    monkeypatch.setattr(memory_module, "estimate_memory", counting)
    return calls


@pytest.mark.parametrize("scn", [TRAIN, SERVE], ids=["train", "serve-vllm"])
def test_memory_is_computed_once_per_evaluation(scn, memory_calls):
    # before the pipeline, the speed engine estimated a vLLM plan's memory a second time for its KV pool
    pipeline.evaluate(scn)
    assert len(memory_calls) == 1


def test_memory_passed_in_is_not_recomputed(memory_calls):
    r = pipeline.resolve(SERVE)
    mem = pipeline.memory(r)
    assert len(memory_calls) == 1
    est = pipeline.evaluate(r, memory_estimate=mem)
    assert len(memory_calls) == 1 and est.memory is mem


def test_speed_engine_uses_the_plans_kv_pool():
    est = pipeline.evaluate(SERVE)
    d = est.performance.details
    assert d["kv_capacity_source"] == "memory engine"
    assert d["kv_capacity_tokens"] == est.memory.limits["kv_tokens"]


def test_details_are_a_mapping_not_a_note():
    for scn in (TRAIN, SERVE):
        perf = pipeline.evaluate(scn).performance
        assert perf.details and not any(n.startswith("details:") for n in perf.notes)
    assert pipeline.evaluate(TRAIN).performance.details["microbatches"] == 8     # 64 / (1 x dp 8)


def test_profile_reaches_performance_but_not_memory(tmp_path):
    base = pipeline.evaluate(TRAIN)
    slow = pipeline.evaluate({**TRAIN, "hardware": {**TRAIN["hardware"], "profile": _profile(tmp_path)}})
    assert slow.performance.step_time_s > base.performance.step_time_s
    assert slow.memory.peak_bytes_per_gpu == base.memory.peak_bytes_per_gpu
    assert slow.profile_path and slow.to_json()["profile"] == slow.profile_path
    assert base.profile_path is None


def test_profile_from_environment(tmp_path, monkeypatch):
    base = pipeline.evaluate(SERVE).performance.tpot_s
    monkeypatch.setenv(pipeline.PROFILE_ENV, _profile(tmp_path))
    assert pipeline.evaluate(SERVE).performance.tpot_s > base


def test_serving_curve_uses_the_same_pool_and_params(tmp_path):
    """`gpuplan serve`'s curve and `gpuplan estimate` agree at the scenario's concurrency."""
    scn = {**SERVE, "hardware": {**SERVE["hardware"], "profile": _profile(tmp_path)}}
    r = pipeline.resolve(scn)
    est = pipeline.evaluate(r)
    (point,) = pipeline.serving_curve(r, est.memory, [SERVE["infer"]["concurrency"]])
    assert point["tpot_s"] == pytest.approx(est.performance.tpot_s, rel=1e-12)
    assert point["ttft_s"] == pytest.approx(est.performance.ttft_s, rel=1e-12)


def test_misspelled_network_is_an_error_not_a_default():
    # it used to be swallowed (`except Exception: return None`) and the step time changed 10x silently
    scn = {**TRAIN, "hardware": {**TRAIN["hardware"], "count": 16, "network": "ib-ndr-40"}}
    with pytest.raises(UnknownNameError) as err:
        pipeline.evaluate(scn)
    assert "ib-ndr-40" in err.value.what and err.value.matches


def test_named_network_changes_multi_node_time():
    slow = pipeline.evaluate({**TRAIN, "hardware": {**TRAIN["hardware"], "count": 16, "network": "eth-100"}})
    fast = pipeline.evaluate({**TRAIN, "hardware": {**TRAIN["hardware"], "count": 16, "network": "ib-ndr-400"}})
    assert slow.performance.step_time_s > fast.performance.step_time_s


def test_fp8_training_without_fp8_tensor_cores_is_refused():
    scn = {**TRAIN, "hardware": {"gpu": "a100-sxm-80gb", "count": 8}, "train": {**TRAIN["train"], "precision": "fp8"}}
    with pytest.raises(UnsupportedError, match="fp8"):
        pipeline.evaluate(scn)


def test_resolve_is_idempotent_and_reuses_lookups():
    r = pipeline.resolve(TRAIN)
    assert pipeline.resolve(r) is r
    r2 = pipeline.resolve(TRAIN, model=r.model, gpu=r.gpu, network=r.network)
    assert r2.model is r.model and r2.gpu is r.gpu and r2.network is r.network


def test_api_estimate_is_the_pipeline():
    from gpuplan.api import estimate
    a, b = estimate(TRAIN), pipeline.evaluate(TRAIN)
    assert a.to_json() == b.to_json()

"""trtllm-bench's finite offline run (estimate/trtllm_bench.py `offline_run_seconds`, speed.py
`_Serving.offline_throughput`) and the overlapped host work of a serving iteration (speed.py `point`).
Expected values are hand arithmetic on the scheduling rules the docstrings cite."""
import dataclasses

import pytest

from gpuplan.estimate import engine_host as EH
from gpuplan.estimate import speed
from gpuplan.estimate.trtllm_bench import offline_run_seconds
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

GRAPHS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]


def one(d, a):
    return 1.0


def test_two_full_waves_by_hand():
    # 4 requests, batch 2, 3 output tokens: a wave is 1 context step (first token) + 2 generation steps
    assert offline_run_seconds(4, 1, 3, 2, 100, one) == (6.0, 6)


def test_last_partial_wave_costs_a_whole_wave():
    # 125 requests at batch 50, 100 output tokens: waves of 50, 50, 25, each 100 steps -> 300 steps;
    # a steady state would take 125 x 100 / 50 = 250
    assert offline_run_seconds(125, 1, 100, 50, 10**6, one) == (300.0, 300)


def test_many_full_waves_reach_the_steady_state():
    # 100000 requests, batch 50, 100 tokens: 2000 waves of 100 steps = N x O / B
    assert offline_run_seconds(100_000, 1, 100, 50, 10**6, one)[1] == 200_000


def test_token_budget_limits_the_ramp_by_hand():
    # ISL 10, budget 20 tokens, batch 3, OSL 2; step(d, a) = 1 + 0.1 d + a
    #   step 1: no decodes, 20 // 10 = 2 prompts admitted            1 + 0 + 2   = 3.0
    #   step 2: 2 decodes leave 18 tokens: 1 prompt; the first two finish   1 + 0.2 + 1 = 2.2
    #   step 3: 1 decode, nothing waiting                               1 + 0.1     = 1.1
    t, steps = offline_run_seconds(3, 10, 2, 3, 20, lambda d, a: 1.0 + 0.1 * d + a)
    assert steps == 3
    assert t == pytest.approx(6.3)


def test_overlap_scheduler_keeps_a_finished_request_one_more_step():
    # the two-wave case with one extra iteration per request: each wave is 1 + 2 + 1 = 4 steps
    assert offline_run_seconds(4, 1, 3, 2, 100, one, extra_steps=1) == (8.0, 8)


def test_one_output_token_ends_at_the_context_step():
    # OSL 1: each request is done when its prompt step yields the first token; batch 2 -> 2, 2, 1
    assert offline_run_seconds(5, 1, 1, 2, 100, one) == (3.0, 3)


def _trt(mid, gid, isl, osl, weights="fp8"):
    scn = scenario_from_dict({"model": mid, "task": "infer", "hardware": {"gpu": gid, "count": 1},
                              "infer": {"weights": weights, "kv_cache": "fp8", "engine": "trtllm", "prompt_len": isl,
                                        "output_len": osl, "concurrency": 3000, "cuda_graph_batch_sizes": GRAPHS}})
    return speed.serving_model(scn, get_model(mid), get_gpu(gid))


def test_a_long_offline_run_converges_to_the_steady_state_point():
    sv = _trt("llama-3.1-8b", "h200-sxm", 128, 2048)
    steady = sv.point(3000)["output_tokens_per_s"]
    long_run = sv.offline_throughput(30_000)["output_tokens_per_s"]
    short_run = sv.offline_throughput(3000)["output_tokens_per_s"]
    assert long_run == pytest.approx(steady, rel=0.01)
    assert short_run < long_run      # fewer waves: the ramp and the partial last wave weigh more


def test_host_bound_iterations_yield_one_token_per_sequence_per_host_pass(monkeypatch):
    # an overlapping engine whose host work per scheduled sequence exceeds the GPU iteration: each iteration
    # yields one token per running sequence and lasts batch x seq_s, so a replica makes 1 / seq_s tokens/s,
    # the prompts riding in the iteration included (they hide under the same host pass)
    monkeypatch.setitem(EH._ENGINES, "trtllm", dataclasses.replace(EH.TRTLLM, seq_s=1e-3))
    sv = _trt("llama-3.1-8b", "h100-sxm", 128, 128)
    pt = sv.point(3000)
    assert pt["batch_per_replica"] > 1
    assert pt["output_tokens_per_s"] == pytest.approx(1.0 / 1e-3, rel=1e-9)


def test_host_work_under_the_gpu_iteration_costs_nothing(monkeypatch):
    sv0 = _trt("llama-3.1-8b", "h100-sxm", 128, 2048)
    base = sv0.point(3000)
    monkeypatch.setitem(EH._ENGINES, "trtllm", dataclasses.replace(EH.TRTLLM, seq_s=1e-9))
    sv = _trt("llama-3.1-8b", "h100-sxm", 128, 2048)
    assert sv.point(3000)["output_tokens_per_s"] == pytest.approx(base["output_tokens_per_s"], rel=1e-12)

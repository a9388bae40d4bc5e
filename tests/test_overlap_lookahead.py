"""Overlapped schedulers pick batch n+1 while the GPU runs batch n (Policy.lookahead): SGLang's
`Scheduler.event_loop_overlap`, TensorRT-LLM's `PyExecutor._executor_loop_overlap`, vLLM's async scheduling. A
request that reaches a busy engine during batch n first runs in batch n+2; one that reaches an idle engine (or
one whose last batch had nothing queued behind it) runs at once. Hand-computed cases on a constant step cost,
and which engines the scenario gives it to."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model

STEP = 0.010


def _run(arrivals, outputs, lookahead):
    pol = Policy(engine="vllm", max_num_seqs=8, token_budget=64, block_size=4, lookahead=lookahead)
    wl = Workload(np.array(arrivals, float), np.array([4] * len(arrivals)), np.array(outputs))
    res = simulate(wl, pol, ConstantCost(STEP))
    return res.first_token_s - res.arrival_s, res


@pytest.mark.parametrize("lookahead, ttft_b", [(False, 0.015), (True, 0.025)])
def test_arrival_during_a_batch(lookahead, ttft_b):
    # A at 0 (prompt in iteration 0-10 ms, then decodes); B reaches the engine at 15 ms, inside iteration
    # 10-20 ms. Synchronous: B's prompt runs in 20-30 ms (TTFT 15 ms). Overlapped: the batch of 20-30 ms was
    # picked at 10 ms, before B came, so B's prompt runs in 30-40 ms (TTFT 25 ms: one more step)
    ttft, _ = _run([0.0, 0.015], [10, 5], lookahead)
    assert ttft[0] == pytest.approx(STEP)
    assert ttft[1] == pytest.approx(ttft_b)


@pytest.mark.parametrize("lookahead", [False, True])
def test_idle_engine_starts_at_once(lookahead):
    # B comes 0.5 s after A ended: both loops pick it at once (TTFT = its prompt's one step)
    ttft, _ = _run([0.0, 0.5], [10, 5], lookahead)
    assert ttft[1] == pytest.approx(STEP)


@pytest.mark.parametrize("lookahead", [False, True])
def test_arrival_during_the_last_batch(lookahead):
    # A (10 tokens) ends with the iteration 90-100 ms; B comes at 95 ms. No batch was queued behind A's last
    # one, so an overlapped loop picks B at 100 ms like a synchronous one: first token at 110 ms
    ttft, res = _run([0.0, 0.095], [10, 5], lookahead)
    assert res.finish_s[0] == pytest.approx(0.100)
    assert ttft[1] == pytest.approx(0.015)


def test_lookahead_through_a_skipped_decode_run():
    # the decode-run fast path stops at the iteration B arrives in; with lookahead B still waits one step
    # more: A decodes alone 10-130 ms... B at 61 ms (inside 60-70): synchronous prompt in 70-80 (TTFT 19 ms),
    # overlapped in 80-90 (TTFT 29 ms)
    sync, _ = _run([0.0, 0.061], [20, 3], False)
    over, _ = _run([0.0, 0.061], [20, 3], True)
    assert sync[1] == pytest.approx(0.019)
    assert over[1] == pytest.approx(0.029)


SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
       "infer": {"engine": "sglang", "load": {"arrival": "poisson", "rate_per_s": 1}}}


def _policy(**infer):
    d = {**SCN, "infer": {**SCN["infer"], **infer}}
    r = pipeline.resolve(d)
    mem = pipeline.memory(r)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    return engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))[0]


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "vllm"])
def test_overlapped_engines_look_ahead(engine):
    assert _policy(engine=engine).lookahead is True                 # each engine's default loop overlaps
    assert _policy(engine=engine, async_scheduling=False).lookahead is False


def test_llama_cpp_and_multi_step_do_not():
    assert _policy(engine="llama.cpp").lookahead is False
    assert _policy(engine="vllm", num_scheduler_steps=8).lookahead is False

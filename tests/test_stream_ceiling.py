"""The API server's streaming ceiling (engine_host.stream_token_s, load/cost.py StreamCeiling): the constant
against its source's own numbers, the source's premise (the GPU was not the limit), the ceiling in the load
simulator by hand, and infer.api_server_count."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import InputError
from gpuplan.estimate.engine_host import engine_host
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate
from gpuplan.estimate.load.cost import StreamCeiling, step_cost
from gpuplan.estimate.speed import serving_model

# vLLM PR 13923 (comment of 2025-03-17): one API-server process, 300 concurrent requests, "llama-1b" on one
# A100: 6000 requests, 1,205,048 generated tokens in 80.55 s, mean TPOT 19.47 ms
PR13923_TOKENS, PR13923_S, PR13923_TPOT_S, PR13923_CONC = 1_205_048, 80.55, 19.47e-3, 300


def _serving(scn):
    r = pipeline.resolve(scn)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def _scn(**infer):
    return {"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
            "infer": {"engine": "vllm", "prompt_len": 220, "output_len": 201, "concurrency": 300, **infer}}


def test_vllm_stream_constant_from_its_source():
    # 80.55 s / 1,205,048 tokens = 66.84 us of the one process per streamed token
    assert engine_host("vllm").stream_token_s == pytest.approx(66.844e-6, rel=1e-4)
    # read as a ceiling, 300 streams at that rate give a 20.05 ms step: the run's own TPOT, 19.47 ms, within 3 %
    assert PR13923_CONC * engine_host("vllm").stream_token_s == pytest.approx(PR13923_TPOT_S, rel=0.03)
    for e in ("sglang", "trtllm", "llama.cpp"):        # no measurement of their own: not modelled
        assert engine_host(e).stream_token_s == 0.0


def test_source_run_was_not_gpu_bound():
    # the premise: gpuplan prices the 1B model's decode step at 300 sequences (~320 tokens of context) at well
    # under half the measured 19.47 ms, and the engine core's host work (seq_s) at 300 x 4.52 us = 1.4 ms
    sv = _serving(_scn())
    assert sv.decode_step(PR13923_CONC, 320)["time"] < PR13923_TPOT_S / 2
    assert PR13923_CONC * engine_host("vllm").seq_s < PR13923_TPOT_S / 10


def test_ceiling_in_the_simulator_by_hand():
    # 4 requests at t=0, 4-token prompts, 3 output tokens; 1 ms per iteration; 0.5 ms per streamed token.
    # Iteration 1 computes the 4 prompts (no decodes, 1 ms): first tokens at 0.001. Then two decode
    # iterations of 4 requests: max(1 ms, 4 x 0.5 ms) = 2 ms each -> done at 0.005 (without it: 0.003)
    w = Workload(np.zeros(4), np.full(4, 4), np.full(4, 3))
    pol = Policy(max_num_seqs=8, token_budget=100)
    res = simulate(w, pol, StreamCeiling(ConstantCost(0.001), 0.0005))
    assert res.first_token_s == pytest.approx([0.001] * 4)
    assert res.finish_s == pytest.approx([0.005] * 4)
    assert simulate(w, pol, ConstantCost(0.001)).finish_s == pytest.approx([0.003] * 4)
    # below the engine's step the ceiling changes nothing
    assert simulate(w, pol, StreamCeiling(ConstantCost(0.001), 0.0001)).finish_s == pytest.approx([0.003] * 4)


def test_api_server_count_divides_the_ceiling_and_front_end_false_drops_it():
    one, four = _serving(_scn()), _serving(_scn(api_server_count=4))
    assert one.stream_token_s == pytest.approx(PR13923_S / PR13923_TOKENS, rel=1e-9)
    assert four.stream_token_s == pytest.approx(one.stream_token_s / 4, rel=1e-9)
    assert _serving(_scn(front_end=False)).stream_token_s == 0.0      # in-process client: no HTTP server
    assert isinstance(step_cost(one, 64, 1024, 2048), StreamCeiling)
    assert not isinstance(step_cost(_serving(_scn(front_end=False)), 64, 1024, 2048), StreamCeiling)


def test_host_cpu_scales_the_ceiling():
    # a host with half the reference single-thread score streams half as fast
    from gpuplan.hardware.hosts import REFERENCE_HOST, get_host_cpu
    ref = get_host_cpu(REFERENCE_HOST).single_thread_score
    slow = _serving({**_scn(), "hardware": {"gpu": "a100-sxm-80gb", "count": 1,
                                            "host_single_thread_score": ref / 2}})
    assert slow.stream_token_s == pytest.approx(2 * PR13923_S / PR13923_TOKENS, rel=1e-9)


def test_api_server_count_must_be_positive():
    with pytest.raises(InputError):
        pipeline.resolve(_scn(api_server_count=0))

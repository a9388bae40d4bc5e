"""The 2024 engines of the SGLang v0.3.0 vs vLLM v0.6.0 benchmark (validation/gathered/serve-load.csv SG01-SG08) as
their code runs them (docs/serving-load.md, *vLLM 0.6.0 and SGLang 0.3.0 as they ran*). Read in the vllm-0.6.0 PyPI
wheel and the sglang-0.3.0 sdist; expected values are worked by hand from those sources and from the constants'
own measurements, not from the code under test:

* V0 multi-step with the async output processor: a request whose last token falls inside a run has its stream end
  at that step (llm_engine.py:1337-1357 `finished_now` -> process_request_outputs_callback), yet keeps its batch
  slot until the run ends;
* V0's multi-step host work: schedule + prepare once a run, sampler + output beside each forward;
* vLLM V0 and SGLang without overlap run every step that carries a prompt eagerly (no CUDA graph), from a
  synchronous loop: max(GPU, host issue), with vLLM's measured per-layer issue (PR 1440: 1.2 s / 100 steps / 32
  layers = 0.375 ms a layer)."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.estimate import engine_host as eh
from gpuplan.estimate.engine_host import engine_host, vllm_v0_host
from gpuplan.estimate.load import ConstantCost, EngineCost, Policy, Workload, simulate
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model
from script_module import load_script

vsl = load_script("scripts/validate_serving_load.py")


def _ms(stream: bool) -> Policy:
    return Policy(engine="vllm", max_num_seqs=8, token_budget=100, block_size=16, kv_blocks=1000,
                  chunked_prefill=False, mixed=False, decode_steps=10, stream_finish_in_run=stream)


def test_finish_inside_a_run_is_streamed_at_its_step_by_hand():
    # tests/test_multi_step.py's case: A (4 in, 25 out) at 0, B (4 in, 3 out) at .015, 10 ms steps, runs of 10.
    # Runs: A .01 -> .11; B's prompt .11 -> .12; A + B .12 -> .22 (B's third token at .14); A .22 -> .32 (A's 25th
    # token, counter 24, at .26). With the async output processor B's stream ends at .14 and A's at .26; the batch
    # still runs to .32 (B stays in it until .22)
    wl = Workload(np.array([0.0, 0.015]), np.array([4, 4]), np.array([25, 3]))
    res = simulate(wl, _ms(True), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.01, 0.12])
    assert res.finish_s == pytest.approx([0.26, 0.14])
    assert res.horizon_s == pytest.approx(0.32)
    old = simulate(wl, _ms(False), ConstantCost(0.01))          # without it: both end with their runs
    assert old.finish_s == pytest.approx([0.32, 0.22])


def test_closed_loop_client_resends_when_its_stream_ends():
    # one client: A (4 in, 3 out) at 0: prompt .00 -> .01, run .01 -> .11 with A's last token at .03 (counter 2);
    # its client sends B at .03 (stream end), which waits for the run: B's prompt .11 -> .12
    wl = Workload(np.array([0.0, 0.0]), np.array([4, 4]), np.array([3, 3]), clients=1)
    res = simulate(wl, _ms(True), ConstantCost(0.01))
    assert res.finish_s[0] == pytest.approx(0.03)
    assert res.arrival_s[1] == pytest.approx(0.03)
    assert res.first_token_s[1] == pytest.approx(0.12)


SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
       "infer": {"engine": "vllm", "prompt_len": 1000, "output_len": 300}}


def _sv(engine: str = "vllm", **infer):
    r = pipeline.resolve({**SCN, "infer": {**SCN["infer"], "engine": engine, **infer}})
    mem = pipeline.memory(r)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    return r, sv


def test_policy_streams_finishes_only_with_the_async_output_processor():
    r, sv = _sv(vllm_v0=True, num_scheduler_steps=10, max_model_len=4096)
    pol, notes = engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))
    assert pol.decode_steps == 10 and pol.stream_finish_in_run
    # enforce_eager turns the async output processor off (config.py verify_async_output_proc)
    r, sv = _sv(vllm_v0=True, num_scheduler_steps=10, max_model_len=4096, cuda_graphs=False)
    pol, _ = engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))
    assert not pol.stream_finish_in_run


def test_multi_step_host_split_by_hand():
    h = vllm_v0_host(10)
    # per step: (schedule 5.1 + prepare 4.9) / 10 + output 3.6 + sampler 3.3 us a sequence; groups (8.0 + 3.95) / 10
    # + 1.7 + 9.5; the sampler and output shares run beside the forward
    assert h.seq_s * 1e6 == pytest.approx(1.0 + 3.6 + 3.3, abs=1e-6)
    assert h.group_s * 1e6 == pytest.approx(1.195 + 1.7 + 9.5, abs=1e-6)
    assert h.output_seq_s * 1e6 == pytest.approx(6.9, abs=1e-6)
    assert h.output_group_s * 1e6 == pytest.approx(11.2, abs=1e-6)
    assert not h.overlapped
    assert engine_host("vllm", vllm_v0=True, num_scheduler_steps=10) == h
    assert vllm_v0_host(1) == vllm_v0_host() == engine_host("vllm", vllm_v0=True)   # single-step unchanged
    _, sv = _sv(vllm_v0=True, num_scheduler_steps=10, max_model_len=4096)
    assert sv.engine_host == h


def test_prompt_steps_run_eagerly_in_synchronous_engines():
    issue = 1.2 / 100 / 32 * 32                 # Llama-3.1-8B has 32 layers; the A100's host is the reference host
    assert eh.VLLM_EAGER_LAYER_S == pytest.approx(1.2 / 100 / 32)
    _, v0 = _sv(vllm_v0=True, num_scheduler_steps=10, max_model_len=4096)
    _, sg03 = _sv("sglang", async_scheduling=False)
    _, v1 = _sv()
    _, sg05 = _sv("sglang")
    for sv in (v0, sg03):
        assert sv.prompt_issue_s == pytest.approx(issue, rel=1e-9)
    for sv in (v1, sg05):                      # V1 / SGLang's overlap scheduler: not priced (0)
        assert sv.prompt_issue_s == 0.0
    _, eager = _sv(vllm_v0=True, num_scheduler_steps=10, max_model_len=4096, cuda_graphs=False)
    assert eager.prompt_issue_s == 0.0           # no graphs at all: decode_step prices its own issue
    # a 16-token prompt-only step of an 8B model on an A100 is a weight read (~10 ms): the issue, 12 ms, sets it
    c0 = EngineCost(v0, 8, 2048, 4096)
    c1 = EngineCost(v1, 8, 2048, 4096)
    t0 = c0.step(0, 0.0, 16, c0.attention(16, 0))
    t1 = c1.step(0, 0.0, 16, c1.attention(16, 0))
    assert t1 < issue
    assert t0 == pytest.approx(v0.with_host(issue, 1), rel=1e-9)
    # a long prompt is GPU-bound: the issue does not add
    assert c0.step(0, 0.0, 4000, c0.attention(4000, 0)) > issue
    sg = EngineCost(sg03, 8, 2048, 4096)
    assert sg.step(0, 0.0, 16, sg.attention(16, 0)) == pytest.approx(sg03.with_host(issue, 1), rel=1e-9)


def test_script_routes_the_rows_engines():
    assert vsl.vllm_v0_engine("0.6.0 (V0 engine, --num-scheduler-steps 10 --max_model_len 4096)")
    assert vsl.vllm_v0_engine("0.6.3")
    assert not vsl.vllm_v0_engine("0.11.0")
    row = {"id": "x", "engine": "vllm", "engine_version": "0.6.0 (V0 engine, --num-scheduler-steps 10 "
           "--max_model_len 4096)", "model": "llama-3.1-8b", "gpu": "a100-sxm-80gb", "gpus": "1", "tp": "1",
           "weights": "bf16", "dataset": "sharegpt", "input_mean_tokens": "220", "output_mean_tokens": "194",
           "arrival": "poisson", "rate_per_s": "4", "clients": "", "requests": "1200"}
    inf = vsl.scenario(row)["infer"]
    assert (inf["vllm_v0"], inf["num_scheduler_steps"], inf["max_model_len"], inf["async_scheduling"]) == \
        (True, 10, 4096, False)
    sg = vsl.scenario(dict(row, engine="sglang", engine_version="0.3.0"))["infer"]
    assert "vllm_v0" not in sg and sg["async_scheduling"] is False

"""Engine host work per sequence and the front end's latency per request (estimate/engine_host.py):
the constants against their sources' own numbers, the overlap rule, and the same terms in `serve`
(speed.py `_Serving`) and the load simulator, all by hand."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.estimate.engine_host import engine_host, step_with_host
from gpuplan.estimate.load import ConstantCost, EngineCost, Policy, Workload, simulate
from gpuplan.estimate.speed import serving_model


def test_vllm_constants_from_their_sources():
    h = engine_host("vllm")
    # GPUStack gpt-oss-20b on one H100, vLLM 0.11, 1000 ShareGPT requests at once: mean TPOT 91.33 ms without
    # and 86.81 ms with --async-scheduling -> 4.52 ms per step over ~1000 running sequences
    assert h.seq_s == pytest.approx(4.52e-6)
    # vLLM PR 17866: mean TTFT 21.47 ms for a 500-token prompt of Llama-3.2-1B, less the 4.0 ms prefill
    assert h.frontend_s == pytest.approx(0.01747)
    assert h.overlapped                                   # async scheduling default from vLLM 0.14
    assert not engine_host("vllm", async_scheduling=False).overlapped
    assert engine_host("vllm", async_scheduling=False).seq_s == h.seq_s
    # engines without a measurement add nothing
    for e in ("llama.cpp", "hf"):
        assert engine_host(e).seq_s == 0.0 and engine_host(e).frontend_s == 0.0


def test_sglang_front_end_from_its_source():
    # tenstorrent/tt-inference-server issue 3560: SGLang over a mock forward of 1/380 s = 2.632 ms, one request
    # at a time, median TTFT 9.54 ms; one forward (the prefill) before the first token -> 9.54 - 2.632 = 6.908 ms
    h = engine_host("sglang")
    assert h.frontend_s == pytest.approx(0.006908, abs=1e-6)
    assert h.seq_s == 0.0                                  # no per-sequence measurement
    assert h.overlapped and not engine_host("sglang", async_scheduling=False).overlapped
    # the front end is per request, not per step: synchronous scheduling (SGLang < 0.4) keeps it
    assert engine_host("sglang", async_scheduling=False).frontend_s == h.frontend_s


def test_trtllm_front_end_from_its_source():
    # TensorRT-LLM PR 10156: trtllm-serve, Qwen3-32B, one request at a time, ~60-token prompts: mean TTFT
    # 40.10 ms, mean inter-token latency 24.64 ms; the prefill reads the weights once like a decode step
    # -> 40.10 - 24.64 = 15.46 ms outside the GPU
    h = engine_host("trtllm")
    assert h.frontend_s == pytest.approx(0.01546, abs=1e-9)
    assert h.overlapped


def test_trtllm_per_sequence_host_work_from_its_source():
    # TensorRT-LLM PR 10273: GB200 (Grace host), attention DP 2, 3072 concurrent 1k/1k requests -> 1536 running
    # sequences a rank; Llama-3.2-1B host_step_time 44.53 ms per iteration -> 44.53 / 1536 = 0.028991 ms per
    # sequence on Grace. Grace's speed (host_cpus.csv, from TransformerEngine issue 2053: 13.48 us of PyTorch host
    # time on a DGX H100 Xeon vs 37.08 us on GB200) is 2893 x 13.48 / 37.08 = 1051.7 -> 1052 of the reference
    # host's 2893: 0.028991 ms x 1052 / 2893 = 0.010542 ms in reference-host seconds
    assert engine_host("trtllm").seq_s == pytest.approx(10.542e-6, rel=1e-4)
    assert 2893 * 13.48 / 37.08 == pytest.approx(1052, abs=0.5)


def _trtllm(gpu, **hardware):
    scn = {"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": gpu, "count": 1, **hardware},
           "infer": {"engine": "trtllm", "prompt_len": 1000, "output_len": 1000, "concurrency": 1536}}
    r = pipeline.resolve(scn)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def test_trtllm_host_work_on_grace_reproduces_its_source():
    # a GB200's usual host is Grace: 1536 scheduled sequences cost the measured 44.53 ms of host work a step
    sv = _trtllm("gb200")
    assert sv.host_speed == pytest.approx(1052 / 2893)
    assert sv.host_step(1536) == pytest.approx(44.53e-3, rel=1e-4)
    # a B200 sits on an x86 server host (the reference): 1536 x 10.542 us = 16.19 ms
    assert _trtllm("b200").host_step(1536) == pytest.approx(1536 * 10.542e-6, rel=1e-4)
    # a named host scales it by its single-thread rating: the i9-12900K's 4243 -> 16.19 ms x 2893 / 4243 = 11.04 ms
    assert _trtllm("b200", host_cpu="core-i9-12900k").host_step(1536) == pytest.approx(
        1536 * 10.542e-6 * 2893 / 4243, rel=1e-4)


def test_trtllm_overlapped_host_work_bounds_a_short_step_on_grace():
    # the overlap scheduler hides host work under the GPU step; where the GPU step is shorter (a 1B model at
    # 1536 sequences on a GB200) the host sets the pace: the step lasts the 44.53 ms of host work
    sv = _trtllm("gb200")
    step = sv.decode_step(1536, 1500)
    assert step["gpu_time"] < 44.53e-3
    assert step["time"] == pytest.approx(44.53e-3, rel=1e-4)


def test_trtllm_source_prefill_prices_as_one_decode_step():
    # the derivation above leans on gpuplan pricing a ~60-token Qwen3-32B prompt as one weight read: the same
    # time as a decode step at batch 1 (both read the 65.5 GB of bf16 weights once; 60 tokens x 65.6 GFLOP
    # = 3.9 TFLOP is a few ms of tensor-core work, far under the read)
    scn = {"model": "qwen3-32b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
           "infer": {"engine": "trtllm", "prompt_len": 60, "output_len": 200, "concurrency": 1}}
    r = pipeline.resolve(scn)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                       memory=pipeline.memory(r))
    assert sv.prefill(60) == pytest.approx(sv.decode_step(1, 160)["time"], rel=0.01)


def test_step_with_host_overlap_rule():
    assert step_with_host(0.010, 0.004, True) == pytest.approx(0.010)     # hidden under the GPU step
    assert step_with_host(0.003, 0.004, True) == pytest.approx(0.004)     # the host sets the pace
    assert step_with_host(0.010, 0.004, False) == pytest.approx(0.014)    # one after the other


SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
       "infer": {"engine": "vllm", "prompt_len": 500, "output_len": 100, "concurrency": 1}}


def _serving(**infer):
    scn = {**SCN, "infer": {**SCN["infer"], **infer}}
    r = pipeline.resolve(scn)
    mem = pipeline.memory(r)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)


def test_synchronous_scheduling_adds_the_host_work_to_each_step():
    sync, asy = _serving(async_scheduling=False), _serving()
    # 512 sequences x 4.52 us = 2.31424 ms per step; the 8B decode step at 512 sequences is longer than that,
    # so with async scheduling the host work hides entirely
    gap = sync.decode_step(512, 600)["time"] - asy.decode_step(512, 600)["time"]
    assert gap == pytest.approx(512 * 4.52e-6, rel=1e-9)
    assert asy.decode_step(512, 600)["time"] > 512 * 4.52e-6
    assert sync.with_host(0.010, 512) == pytest.approx(0.010 + 0.00231424)
    assert asy.with_host(0.010, 512) == pytest.approx(0.010)
    assert asy.with_host(0.001, 512) == pytest.approx(0.00231424)


def test_serve_ttft_includes_the_front_end():
    sv = _serving()
    with_fe = sv.point(1)["ttft_s"]
    sv.frontend_s = 0.0
    assert with_fe - sv.point(1)["ttft_s"] == pytest.approx(0.01747)


def test_simulator_delays_entry_by_the_front_end():
    # one request, 4-token prompt, 3 output tokens; 10 ms per iteration, 20 ms front end: it reaches the
    # engine at 0.02, its prompt iteration ends at 0.03 (first token), then two decodes: done at 0.05
    w = Workload(np.array([0.0]), np.array([4]), np.array([3]))
    res = simulate(w, Policy(max_num_seqs=8, token_budget=100), ConstantCost(0.01, frontend_s=0.02))
    assert res.arrival_s == pytest.approx([0.0])
    assert res.first_token_s == pytest.approx([0.03])
    assert res.finish_s == pytest.approx([0.05])


def test_closed_loop_client_waits_for_the_front_end_each_time():
    # 1 client, 2 requests of 1 prompt + 1 output token: sent at 0, in the engine at 0.02, done 0.03;
    # the next is sent at 0.03, in the engine at 0.05, done 0.06
    w = Workload(np.full(2, np.nan), np.ones(2, int), np.ones(2, int), clients=1)
    res = simulate(w, Policy(max_num_seqs=8, token_budget=10), ConstantCost(0.01, frontend_s=0.02))
    assert res.arrival_s == pytest.approx([0.0, 0.03])
    assert res.finish_s == pytest.approx([0.03, 0.06])


def test_engine_cost_carries_the_serving_models_front_end():
    sv = _serving()
    assert EngineCost(sv, 64, 2048, 2048).frontend_s == pytest.approx(0.01747)


def test_serve_breakdown_names_the_front_end():
    from gpuplan.estimate.speed import infer_performance
    for engine, fe in (("vllm", 0.01747), ("sglang", 0.006908), ("trtllm", 0.01546), ("llama.cpp", None)):
        r = pipeline.resolve({**SCN, "infer": {**SCN["infer"], "engine": engine}})
        perf = infer_performance(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                                 memory=pipeline.memory(r))
        assert perf.breakdown.get("frontend") == (pytest.approx(fe, abs=1e-6) if fe else None)


def test_in_process_client_pays_no_front_end():
    # infer.front_end false (offline generate, MLPerf's C++ harness): the same engine without its HTTP server
    for engine, fe in (("vllm", 0.01747), ("sglang", 0.006908), ("trtllm", 0.01546)):
        on, off = _serving(engine=engine), _serving(engine=engine, front_end=False)
        assert on.frontend_s == pytest.approx(fe, abs=1e-6) and off.frontend_s == 0.0
        assert on.point(1)["ttft_s"] - off.point(1)["ttft_s"] == pytest.approx(fe, abs=1e-6)
        assert EngineCost(off, 64, 2048, 2048).frontend_s == 0.0


# ---- vLLM without CUDA graphs (--enforce-eager) ---------------------------------------------------------

def test_vllm_eager_issue_constant_from_its_source():
    from gpuplan.estimate.engine_host import VLLM_EAGER_LAYER_S, eager_issue_layer_s
    # vLLM PR 1440: Llama 2 7B, batch 1, 100 output tokens in ~1.2 s without CUDA graphs (1.05 s with):
    # 12.0 ms a step over its 32 decoder layers = 0.375 ms per layer
    assert VLLM_EAGER_LAYER_S == pytest.approx(0.000375)
    assert eager_issue_layer_s("vllm", cuda_graphs=False) == pytest.approx(0.000375)
    assert eager_issue_layer_s("vllm", cuda_graphs=True) == 0.0
    for e in ("sglang", "trtllm", "llama.cpp"):         # no measurement: not modelled
        assert eager_issue_layer_s(e, cuda_graphs=False) == 0.0


def _eager(graphs: bool, **hardware):
    scn = {**SCN, "hardware": {**SCN["hardware"], **hardware}, "infer": {**SCN["infer"], "cuda_graphs": graphs}}
    r = pipeline.resolve(scn)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def test_vllm_eager_decode_is_host_bound_at_small_batch():
    # Llama 3.1 8B has 32 decoder layers; on the reference host (EPYC 9654) the eager forward takes
    # 32 x 0.375 ms = 12.0 ms to issue, more than the GPU's batch-1 step (16 GB of weights at H100 rates: a few
    # ms), so the step lasts 12.0 ms; with CUDA graphs nothing is issued per layer and the step is the GPU's
    eager, graphs = _eager(False, host_cpu="epyc-9654"), _eager(True, host_cpu="epyc-9654")
    e1, g1 = eager.decode_step(1, 550), graphs.decode_step(1, 550)
    assert e1["host"] == pytest.approx(0.012)
    assert e1["time"] == pytest.approx(0.012)      # async scheduling (default): max(host issue, 4.5 us host work)
    assert g1["host"] == 0.0 and g1["time"] < 0.012
    # a large batch's GPU step hides the issue: eager and graphs price the same step
    e512, g512 = eager.decode_step(512, 550), graphs.decode_step(512, 550)
    assert g512["time"] > 0.012 and e512["time"] == pytest.approx(g512["time"])


def test_vllm_eager_issue_scales_with_the_hosts_single_thread_speed():
    from gpuplan.hardware.hosts import get_host_cpu
    ref = get_host_cpu("epyc-9654").single_thread_score
    slow = _eager(False, host_single_thread_score=ref / 2)       # half the reference speed: twice the time
    assert slow.decode_step(1, 550)["host"] == pytest.approx(0.024)


def test_rl_rollout_engine_runs_eagerly_when_told():
    from gpuplan.estimate.rl import rollout_scenario
    from gpuplan.scenario import scenario_from_dict
    base = {"model": "qwen2.5-1.5b", "task": "finetune", "framework": "torchtitan",
            "hardware": {"gpu": "h100-sxm", "count": 8},
            "train": {"objective": "grpo", "method": "full", "micro_batch": 1,
                      "rl": {"prompts_per_step": 64, "group_size": 4, "prompt_len": 256, "max_new_tokens": 512}}}
    assert rollout_scenario(scenario_from_dict(base)).infer.cuda_graphs is True
    base["train"]["rl"]["engine_cuda_graphs"] = False        # verl rollout.enforce_eager: true
    assert rollout_scenario(scenario_from_dict(base)).infer.cuda_graphs is False


def test_trtllm_cpp_executor_prices_no_per_sequence_host_work():
    # the constant was measured on the PyTorch backend's Python executor; a TensorRT engine under the C++
    # executor (NIM 1.x, the MLPerf harness: infer.trtllm_backend tensorrt) keeps the front end, not seq_s
    h = engine_host("trtllm", trtllm_backend="tensorrt")
    assert h.seq_s == 0.0 and h.frontend_s == engine_host("trtllm").frontend_s
    assert engine_host("vllm", trtllm_backend="tensorrt").seq_s == engine_host("vllm").seq_s
    sv = _trtllm("gb200")
    scn = {"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": "gb200", "count": 1},
           "infer": {"engine": "trtllm", "trtllm_backend": "tensorrt", "prompt_len": 1000, "output_len": 1000,
                     "concurrency": 1536}}
    r = pipeline.resolve(scn)
    cpp = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                        memory=pipeline.memory(r))
    assert cpp.host_step(1536) == 0.0 and sv.host_step(1536) > 0


def test_host_bound_trtllm_decode_says_so():
    from gpuplan import api
    scn = {"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": "gb200", "count": 1},
           "infer": {"engine": "trtllm", "prompt_len": 1000, "output_len": 1000, "concurrency": 1536}}
    perf = api.estimate(scn).performance
    assert perf.details["decode_bound"] == "host" and "Grace" in perf.details["host_cpu"]
    assert any("host work per scheduled sequence" in n for n in perf.notes)
    # a B200's usual host is an x86 server CPU (the reference host): 2.75x faster, 16.2 ms for the same step
    perf = api.estimate({**scn, "hardware": {"gpu": "b200", "count": 1}}).performance
    assert "EPYC" in perf.details["host_cpu"] and perf.details["host_speed_vs_reference"] == 1.0


# ---- vLLM V1: decode batches above the largest captured CUDA graph ------------------------------------------

def test_vllm_v1_capture_size_rule_from_its_source():
    from gpuplan.estimate.engine_host import vllm_v1_max_capture_size
    # vllm 0.11.0 (git f71952c1c): cuda_graph_sizes = [min(max_num_seqs * 2, 512)] (config/scheduler.py:227), the
    # list [1, 2, 4] + range(8, n + 1, 8) cut at max_num_batched_tokens (config/__init__.py:593-610), its largest
    # entry max_capture_size (config/compilation.py:549-551)
    assert vllm_v1_max_capture_size(1024, 8192) == 512      # `vllm serve` on an H100: 1024 / 8192
    assert vllm_v1_max_capture_size(256, 2048) == 512       # on an A100: 256 / 2048 -> min(512, 512)
    assert vllm_v1_max_capture_size(100, 8192) == 200       # 2 x 100, a multiple of 8
    assert vllm_v1_max_capture_size(101, 8192) == 200       # 202 -> the multiples of 8 stop at 200
    assert vllm_v1_max_capture_size(1024, 300) == 296       # sizes above max_num_batched_tokens are dropped
    assert vllm_v1_max_capture_size(3, 8192) == 4           # 6: range(8, 7, 8) is empty, [1, 2, 4] stay
    assert vllm_v1_max_capture_size(1, 2) == 2


def _v1(gpu: str, **infer):
    scn = {"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": gpu, "count": 1, "host_cpu": "epyc-9654"},
           "infer": {"engine": "vllm", "prompt_len": 100, "output_len": 100, "concurrency": 1024, **infer}}
    r = pipeline.resolve(scn)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def test_vllm_v1_decode_above_the_largest_graph_is_issued_from_the_host():
    # `vllm serve` defaults: 1024 sequences on an H100 (>= 70 GiB, not an A100), 256 on an A100
    # (arg_utils.py _set_default_args); both capture up to 512 tokens
    h100, a100 = _v1("h100-sxm"), _v1("a100-sxm-80gb")
    assert (h100.max_batch, h100.v1_graph_max) == (1024, 512)
    assert (a100.max_batch, a100.v1_graph_max) == (256, 512)
    # 512 decodes replay the 512 graph: nothing issued per layer; 513 run without one (gpu_model_runner.py
    # _get_num_input_tokens, "Eager mode"): Llama 3.2 1B's 16 layers x 0.375 ms (VLLM_EAGER_LAYER_S) = 6.0 ms on
    # the reference host, longer than the GPU's ~5.8 ms at 512, so the step lasts the issue
    s512, s513 = h100.decode_step(512, 150), h100.decode_step(513, 150)
    assert s512["host"] == 0.0 and s512["gpu_time"] < 0.006
    assert s513["host"] == pytest.approx(16 * 0.000375)
    assert s513["gpu_time"] == pytest.approx(0.006)
    # a larger GPU step hides the issue: the 1024-decode step is the GPU's
    s1024 = h100.decode_step(1024, 150)
    assert s1024["host"] == pytest.approx(0.006) and s1024["gpu_time"] > 0.006


def test_vllm_v1_graph_limit_follows_a_stated_cap_and_spares_other_modes():
    assert _v1("h100-sxm", max_num_seqs=100).v1_graph_max == 200
    assert _v1("h100-sxm", max_num_seqs=100).decode_step(100, 150)["host"] == 0.0
    assert _v1("h100-sxm", max_num_batched_tokens=1024).v1_graph_max == 512
    # enforce-eager prices every step's issue already (eager_issue_layer_s); V0 has its own graph rule
    assert _v1("h100-sxm", cuda_graphs=False).v1_graph_max is None
    assert _v1("h100-sxm", vllm_v0=True).v1_graph_max is None
    for e in ("sglang", "trtllm"):
        assert _v1("h100-sxm", engine=e).v1_graph_max is None

"""TensorRT-LLM's capacity scheduler policy (infer.capacity_scheduler; TensorRT-LLM
cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp): GUARANTEED_NO_EVICT starts a request only when the
pool holds its prompt and all its output; MAX_UTILIZATION starts it when its next step fits and pauses the
newest started request when the pool runs out. Hand-computed cases on a constant step cost, the engine
policy the scenario builds, the scenario check and the launch YAML."""
import numpy as np
import pytest
import yaml

from gpuplan import pipeline
from gpuplan.errors import InputError
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model
from gpuplan.launch import launch_files
from gpuplan.scenario import scenario_from_dict


def wl(arrivals, inputs, outputs):
    return Workload(np.array(arrivals, float), np.array(inputs), np.array(outputs))


# two requests at t=0, prompt 4 and output 4 tokens each, blocks of 4 tokens, a pool of 3 blocks,
# whole prompts (no chunking), 10 ms per iteration
TWO = dict(arrivals=[0.0, 0.0], inputs=[4, 4], outputs=[4, 4])


def _run(reserve_full: bool):
    pol = Policy(engine="trtllm", max_num_seqs=8, token_budget=100, block_size=4, kv_blocks=3,
                 chunked_prefill=False, mixed=True, reserve_full=reserve_full)
    return simulate(wl(**TWO), pol, ConstantCost(0.01))


def test_guaranteed_no_evict_runs_one_at_a_time_by_hand():
    # each request reserves ceil((4 + 4) / 4) = 2 of the 3 blocks at admission: the second waits until the
    # first finishes. A: prompt + token 1 at .01, tokens 2-4 at .02/.03/.04 -> done .04; B starts in the
    # next iteration: first token .05, done .08. Nothing is ever preempted.
    res = _run(True)
    assert res.first_token_s == pytest.approx([0.01, 0.05])
    assert res.finish_s == pytest.approx([0.04, 0.08])
    assert res.preemptions == 0


def test_max_utilization_starts_both_and_pauses_the_newest_by_hand():
    # both prompts (1 block each) start in iteration 1: first tokens at .01, 2 of 3 blocks used. Holding k
    # tokens takes ceil(k / 4) blocks: iteration 2 computes each request's token 5 (the first token's
    # KV), which needs a second block each — only one is free, so the newest (B) is paused: its blocks
    # freed, its progress recomputed later. A decodes alone: tokens 2, 3, 4 at .02, .03, .04 (done). B is
    # recomputed in iteration 5 (prompt + its 1 generated token = 5 tokens, 2 blocks) and samples token 2
    # at .05, then tokens 3 and 4 at .06 and .07.
    res = _run(False)
    assert res.first_token_s == pytest.approx([0.01, 0.01])
    assert res.finish_s[0] == pytest.approx(0.04)
    assert res.preemptions == 1
    assert res.finish_s[1] > res.finish_s[0]
    # the newest started request is the one paused: B ends after A though both started together
    assert res.finish_s[1] == pytest.approx(0.07)


SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
       "infer": {"engine": "trtllm", "prompt_len": 1000, "output_len": 300}}


def _policy(**infer):
    d = {**SCN, "infer": {**SCN["infer"], **infer}}
    r = pipeline.resolve(d)
    mem = pipeline.memory(r)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    return engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))


def test_engine_policy_follows_the_scenario():
    default, _ = _policy()
    assert default.reserve_full is True                      # TensorRT-LLM's default: GUARANTEED_NO_EVICT
    no_evict, _ = _policy(capacity_scheduler="guaranteed_no_evict")
    assert no_evict.reserve_full is True
    util, notes = _policy(capacity_scheduler="max_utilization")
    assert util.reserve_full is False
    assert any("MAX_UTILIZATION" in n for n in notes)
    assert util.chunked_prefill is False and util.mixed is True   # the rest of the TensorRT-LLM policy unchanged


def test_capacity_scheduler_is_refused_for_other_engines():
    with pytest.raises(InputError) as err:
        scenario_from_dict({**SCN, "infer": {"engine": "vllm", "capacity_scheduler": "max_utilization"}})
    assert "capacity_scheduler" in str(err.value) and "trtllm" in str(err.value)
    with pytest.raises(InputError):
        scenario_from_dict({**SCN, "infer": {"engine": "trtllm", "capacity_scheduler": "max_util"}})


def test_launch_yaml_carries_the_policy():
    def opts(**kw):
        s = scenario_from_dict({**SCN, "infer": {**SCN["infer"], **kw}})
        return yaml.safe_load(launch_files(s, "trtllm")["extra_llm_api_options.yaml"])
    assert "scheduler_config" not in opts()                  # the engine's default is left to the engine
    assert opts(capacity_scheduler="max_utilization")["scheduler_config"] == {
        "capacity_scheduler_policy": "MAX_UTILIZATION"}
    assert opts(capacity_scheduler="guaranteed_no_evict")["scheduler_config"] == {
        "capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}

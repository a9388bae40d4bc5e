"""vLLM V0 multi-step scheduling (infer.num_scheduler_steps; vllm v0.6.0 `LLMEngine.step` calls the scheduler
only when the cached decode batch has no steps left, and processes its outputs after the run's last step):
a hand-computed case on a constant step cost, the policy the scenario builds, Little's law on the speed
engine's cost, and the scenario check."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import InputError
from gpuplan.estimate.load import (Arrivals, ConstantCost, EngineCost, Lengths, Policy, Workload, make_workload,
                                   simulate, summarize)
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model
from gpuplan.launch import launch_files
from gpuplan.scenario import scenario_from_dict


def _v0(steps: int) -> Policy:
    # the V0 default scheduler: whole prompts in prompt-only batches, decodes wait for them
    return Policy(engine="vllm", max_num_seqs=8, token_budget=100, block_size=16, kv_blocks=1000,
                  chunked_prefill=False, mixed=False, decode_steps=steps)


@pytest.mark.parametrize("b_prompt", [4, 200])
def test_multi_step_by_hand(b_prompt):
    # A (4-token prompt, 25 tokens out) arrives at 0, B (4 in, 3 out) at 0.015; 10 ms per iteration, runs of 10.
    # A's prompt batch ends at .01 (its first token). No one waits: a run of 10 decode steps, .01 -> .11, which
    # B (arrived at .015) cannot join. At .11 the scheduler runs again: B's prompt batch -> B's first token at
    # .12. A run of 10 with A and B, .12 -> .22: B's last token comes at .14 but its stream ends with the run
    # (.22). Then A alone, .22 -> .32: its 25th token is at .26, delivered at .32.
    # B's prompt may exceed the 100-token budget: V0 without chunking runs it whole, alone, in its own batch
    # (it does not wait for the decodes to drain)
    wl = Workload(np.array([0.0, 0.015]), np.array([4, b_prompt]), np.array([25, 3]))
    res = simulate(wl, _v0(10), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.01, 0.12])
    assert res.finish_s == pytest.approx([0.32, 0.22])
    # without multi-step the same engine admits B at the first iteration boundary after it arrives (.02): its
    # prompt batch ends at .03, and A, B finish when their last tokens are computed
    one = simulate(wl, _v0(1), ConstantCost(0.01))
    assert one.first_token_s == pytest.approx([0.01, 0.03])
    assert one.finish_s == pytest.approx([0.26, 0.05])


SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
       "infer": {"engine": "vllm", "prompt_len": 1000, "output_len": 300}}


def _engine(**infer):
    r = pipeline.resolve({**SCN, "infer": {**SCN["infer"], **infer}})
    mem = pipeline.memory(r)
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
    pol, notes = engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))
    return sv, pol, notes


def test_policy_is_vllm_v0():
    _, v1, _ = _engine()
    assert (v1.decode_steps, v1.mixed, v1.chunked_prefill, v1.max_num_seqs, v1.token_budget) == (1, True, True,
                                                                                               1024, 8192)
    _, v0, notes = _engine(num_scheduler_steps=10, max_model_len=4096)
    # V0 EngineArgs: max_num_seqs 256 on every GPU; SchedulerConfig without chunked prefill: max(max_model_len, 2048)
    assert (v0.decode_steps, v0.mixed, v0.chunked_prefill, v0.max_num_seqs, v0.token_budget) == (10, False, False,
                                                                                               256, 4096)
    assert any("multi-step" in n for n in notes)
    _, short, _ = _engine(num_scheduler_steps=8)
    assert short.token_budget == 2048


def test_littles_law_multi_step():
    sv, pol, _ = _engine(num_scheduler_steps=10, max_model_len=4096)
    cost = EngineCost(sv, pol.max_num_seqs, 4096, pol.token_budget)
    wl = make_workload(Arrivals("poisson", 6.0), 4000, Lengths("lognormal", 1000, cv=0.5, hi=3000),
                       Lengths("lognormal", 300, cv=0.5, hi=1000), 0)
    s = summarize(simulate(wl, pol, cost))
    assert s["mean_in_system"] == pytest.approx(6.0 * (s["e2e_s"]["mean"] - cost.frontend_s), rel=0.05)
    # a request arriving during a run waits for its end: the TTFT is longer than with per-step scheduling
    v1 = _engine()
    s1 = summarize(simulate(wl, v1[1], EngineCost(v1[0], v1[1].max_num_seqs, 4096, 8192)))
    assert s["ttft_s"]["mean"] > s1["ttft_s"]["mean"]


def test_multi_step_is_refused_for_other_engines():
    with pytest.raises(InputError) as err:
        scenario_from_dict({**SCN, "infer": {"engine": "sglang", "num_scheduler_steps": 10}})
    assert "num_scheduler_steps" in str(err.value) and "vllm" in str(err.value)
    with pytest.raises(InputError):
        scenario_from_dict({**SCN, "infer": {"engine": "vllm", "num_scheduler_steps": 0}})


def test_launch_passes_the_v0_flag():
    scn = scenario_from_dict({**SCN, "infer": {**SCN["infer"], "num_scheduler_steps": 10, "async_scheduling": False}})
    sh = launch_files(scn, "vllm")["serve.sh"]
    assert "--num-scheduler-steps 10" in sh and "V0" in sh
    assert "--no-async-scheduling" not in sh          # a V1 flag; V0 schedules synchronously anyway
    assert "--num-scheduler-steps" not in launch_files(scenario_from_dict(SCN), "vllm")["serve.sh"]


def test_validation_rows_carry_the_engine_flags():
    # the SGLang source ran vLLM 0.6.0 with "--num-scheduler-steps 10 --max_model_len 4096": the scored rows are
    # simulated with both; a row without flags gets none
    import csv
    from script_module import load_script
    vsl = load_script("scripts/validate_serving_load.py")
    rows = {r["id"]: r for r in csv.DictReader(open(vsl.CSV, newline="", encoding="utf-8"))}
    for rid in ("SG02", "SG04", "SG06", "SG08"):
        inf = vsl.scenario(rows[rid])["infer"]
        assert (inf["num_scheduler_steps"], inf["max_model_len"]) == (10, 4096)
        assert rows[rid]["scored"] == "yes"
    assert "num_scheduler_steps" not in vsl.scenario(rows["SG01"])["infer"]
    assert vsl.engine_flags("0.11.0 --async-scheduling") == {}


@pytest.mark.parametrize("field,value,engine", [("parallel_samples", 5, "vllm"),
                                                ("transformers_version", "4.46.3", "hf")])
def test_an_engine_field_on_another_engine_is_refused_with_the_fix(field, value, engine):
    # parallel_samples is vLLM's SamplingParams.n and transformers_version the library engine hf runs: on any other
    # engine they would be read by nothing, so the scenario says which engine reads them instead of ignoring them
    with pytest.raises(InputError) as err:
        scenario_from_dict({**SCN, "infer": {"engine": "sglang", field: value}})
    assert field in str(err.value) and f"engine: {engine}" in str(err.value)
    scenario_from_dict({**SCN, "infer": {"engine": engine, field: value}})


def test_python_version_is_read_by_vllm_v0_only():
    # infer.python_version picks V0's host timing under CPython 3.9 (engine_host.vllm_v0_host); V1 and other engines
    # have no such timing, so the field is refused there with the setting that reads it
    with pytest.raises(InputError) as err:
        scenario_from_dict({**SCN, "infer": {"engine": "vllm", "python_version": "3.9"}})
    assert "python_version" in str(err.value) and "vllm_v0" in str(err.value)
    with pytest.raises(InputError) as err:
        scenario_from_dict({**SCN, "infer": {"engine": "sglang", "python_version": "3.9"}})
    assert "engine: vllm" in str(err.value)
    scenario_from_dict({**SCN, "infer": {"engine": "vllm", "vllm_v0": True, "python_version": "3.9"}})

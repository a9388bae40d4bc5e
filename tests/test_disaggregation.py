"""Prefill/decode disaggregation (estimate/load/disagg.py): a hand-computed case on a constant step cost,
the KV transfer time by hand from Llama-3.1-8B's KV size and the H100's NVLink rate, and sanity
properties against colocated serving on the same GPUs."""
import copy

import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import GpuplanError
from gpuplan.estimate.calibration import packaged
from gpuplan.estimate.load import ConstantCost, Policy, Workload
from gpuplan.estimate.load.disagg import simulate_disaggregated

BASE = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 4},
        "infer": {"engine": "vllm", "load": {"rate_per_s": 4, "requests": 400,
                                             "input": {"dist": "fixed", "mean": 2000},
                                             "output": {"dist": "fixed", "mean": 200},
                                             "disaggregation": {"prefill_instances": 1, "decode_instances": 3}}}}


def run(**load):
    s = copy.deepcopy(BASE)
    s["infer"]["load"].update(load)
    r = pipeline.resolve(s)
    return pipeline.serving_load(r, pipeline.memory(r))


def test_one_request_by_hand():
    # 100-token prompt, 3 output tokens, 10 ms per iteration, 5 ms transfer:
    # prefill instance: one iteration, done at .01; KV ready at .015; decode instance: admits it at .015,
    # computes the last prompt token and samples token 1 -> .025; tokens 2, 3 -> .035, .045
    w = Workload(np.array([0.0]), np.array([100]), np.array([3]))
    res, tx = simulate_disaggregated(w, Policy(max_num_seqs=4, token_budget=512), ConstantCost(0.01), 1, 1,
                                     lambda p: np.full(len(p), 0.005))
    assert res.first_token_s == pytest.approx([0.025])
    assert res.finish_s == pytest.approx([0.045])
    assert res.first_scheduled_s == pytest.approx([0.0])
    assert tx == pytest.approx([0.005])


def test_kv_transfer_time_by_hand():
    # all but the last prompt token: 1999 x 131,072 bytes (32 layers x 8 KV heads x 128 x K,V x 2 bytes),
    # over NVLink 4 (900 GB/s both ways = 450 GB/s one way per GPU) at the calibrated link efficiency,
    # plus the link latency (3 µs)
    eff = packaged()["comm"]["scale_up"]
    want = 1999 * 131072 / (450e9 * eff) + 3e-6
    out = run()
    d = out["disaggregation"]
    assert d["link"] == "scale_up"
    assert d["kv_transfer_s"]["mean"] == pytest.approx(want, rel=1e-6)


def test_instances_beyond_a_node_use_the_network():
    s = copy.deepcopy(BASE)
    s["hardware"] = {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8}
    s["parallel"] = {"tp": 4}
    s["infer"]["load"]["disaggregation"] = {"prefill_instances": 2, "decode_instances": 2}
    r = pipeline.resolve(s)
    out = pipeline.serving_load(r, pipeline.memory(r))
    assert out["disaggregation"]["link"] == "network"
    assert out["disaggregation"]["gpus"] == 16


def test_decode_batches_are_not_interrupted_by_prompts():
    # long prompts at a load both layouts sustain: colocated decodes share iterations with 2000-token
    # prompt chunks, disaggregated decode instances never see a prompt -> lower TPOT
    out = run(rate_per_s=8, requests=800)
    assert not out["overloaded"] and not out["disaggregation"]["colocated"]["overloaded"]
    assert out["tpot_s"]["mean"] < out["disaggregation"]["colocated"]["tpot_s"]["mean"]
    assert out["tpot_s"]["p99"] < out["disaggregation"]["colocated"]["tpot_s"]["p99"]


def test_ttft_includes_the_transfer():
    out = run()
    assert out["ttft_s"]["p50"] > out["disaggregation"]["kv_transfer_s"]["p50"]


def test_one_prefill_instance_saturates_first():
    # 1 prefill GPU for 30 req/s of 2000-token prompts (60k prompt tokens/s x ~14.5 GFLOP per token =
    # 870 TFLOP/s, 88 % of the H100's dense bf16 peak) is above what one H100 prefills; four colocated
    # replicas split the same prompts four ways. (20 req/s, 59 % of peak, was above only while every
    # prompt token was charged the lm_head: engines compute a prompt's logits at its last position.)
    out = run(rate_per_s=30, requests=1500)
    assert out["overloaded"]
    assert not out["disaggregation"]["colocated"]["overloaded"]


def test_too_few_gpus_is_named():
    s = copy.deepcopy(BASE)
    s["infer"]["load"]["disaggregation"] = {"prefill_instances": 2, "decode_instances": 3}
    with pytest.raises(GpuplanError) as e:      # refused when resolved, so `estimate` refuses it as `serve` does
        pipeline.resolve(s)
    assert "disaggregation" in str(e.value) and "5 GPUs" in str(e.value)


# ---- the serve command -----------------------------------------------------------------------------

ARGS = ["serve", "--model", "llama-3.1-8b", "--task", "infer", "--gpu", "h100-sxm", "--count", "2",
        "--rate", "3", "--requests", "200"]


def test_cli_disaggregate_and_speculative(capsys):
    import json

    from gpuplan.cli import main
    assert main(ARGS + ["--disaggregate", "1:1", "--speculative", "eagle", "--spec-tokens", "2", "--json"]) == 0
    load = json.loads(capsys.readouterr().out)["result"]["load"]
    assert load["disaggregation"]["prefill_instances"] == 1 and load["disaggregation"]["decode_instances"] == 1
    assert load["policy"]["tokens_per_step"] == pytest.approx(1 + 0.7 + 0.49)     # eagle default a = 0.7, k = 2
    assert main(ARGS + ["--disaggregate", "1:1"]) == 0
    assert "colocated x2" in capsys.readouterr().out


@pytest.mark.parametrize("flags,what", [(["--disaggregate", "1-3"], "--disaggregate"),
                                        (["--disaggregate", "0:2"], "--disaggregate"),
                                        (["--spec-tokens", "4"], "--spec-tokens")])
def test_cli_bad_flags_are_named(flags, what, capsys):
    import json

    from gpuplan.cli import main
    assert main(ARGS + flags + ["--json"]) == 2
    assert what in json.loads(capsys.readouterr().out)["error"]["what"]

"""Speculative decoding (estimate/speculative.py, serve and the load simulator): the expected-tokens
formula by hand (Leviathan et al. 2023), the drafter's memory by hand from Llama-3.1-8B's shapes, a
hand-computed simulator case on a constant step cost, and sanity properties."""
import copy

import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import GpuplanError
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate, summarize
from gpuplan.estimate.speculative import DEFAULT_ACCEPTANCE, expected_tokens

BASE = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
        "infer": {"engine": "vllm", "prompt_len": 1000, "output_len": 200, "concurrency": 1}}


def scn(spec=None, **infer):
    s = copy.deepcopy(BASE)
    s["infer"].update(infer)
    if spec is not None:
        s["infer"]["speculative"] = spec
    return s


# ---- the formula ----------------------------------------------------------------------------------

@pytest.mark.parametrize("a,k,want", [
    (0.7, 3, (1 - 0.7 ** 4) / 0.3),      # 0.7599 / 0.3 = 2.5330
    (0.5, 1, 1.5),                        # 1 + 0.5
    (0.8, 2, 1 + 0.8 + 0.64),             # geometric sum 1 + a + a^2
    (0.0, 5, 1.0),                        # nothing accepted: the target's own token
    (1.0, 4, 5.0),                        # everything accepted: k + 1
])
def test_expected_tokens_by_hand(a, k, want):
    assert expected_tokens(a, k) == pytest.approx(want, rel=1e-12)


def test_default_acceptance_cited_values():
    # DeepSeek-V3 report: MTP second-token acceptance 85-90 %; Leviathan Table 3 low end 0.6
    assert DEFAULT_ACCEPTANCE == {"mtp": 0.85, "eagle": 0.7, "draft": 0.6}


# ---- the scenario -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,word", [
    ({"method": "ngram"}, "acceptance_rate"),
    ({"method": "draft"}, "draft_model"),
    ({"method": "eagle", "draft_model": "llama-3.2-1b"}, "draft_model"),
    ({"method": "medusa"}, "method"),
])
def test_bad_speculative_settings_are_named(spec, word):
    with pytest.raises(GpuplanError) as e:
        pipeline.evaluate(scn(spec))
    assert word in str(e.value)


# ---- memory -------------------------------------------------------------------------------------

def test_eagle_head_memory_by_hand():
    # Llama-3.1-8B layer: q,o 4096x4096, k,v 4096x1024, MLP 3 x 4096x14336, two norms 4096
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096      # 218,112,000
    fc = 2 * 4096 * 4096                                                         # EAGLE's 2h -> h fusion
    plain = pipeline.evaluate(scn()).memory
    eagle = pipeline.evaluate(scn({"method": "eagle"})).memory
    extra = eagle.components["weights"] - plain.components["weights"]
    assert extra == pytest.approx((layer + fc) * 2, rel=1e-4)        # bf16 bytes
    # KV: one more layer of 8 KV heads x 128 x (K+V) x 2 bytes = 4096 bytes on top of 32 x 4096
    ratio = eagle.limits["kv_tokens"] / plain.limits["kv_tokens"]
    pool_ratio = (plain.limits["kv_tokens"] * 131072 - extra) / plain.limits["kv_tokens"] / 131072
    assert ratio == pytest.approx(pool_ratio * 131072 / (131072 + 4096), rel=1e-3)


def test_ngram_needs_no_memory_and_draft_model_does():
    plain = pipeline.evaluate(scn()).memory
    ngram = pipeline.evaluate(scn({"method": "ngram", "acceptance_rate": 0.3})).memory
    draft = pipeline.evaluate(scn({"method": "draft", "draft_model": "llama-3.2-1b"})).memory
    assert ngram.components["weights"] == plain.components["weights"]
    # Llama-3.2-1B has 1.236e9 parameters (tied embeddings): ~2.47 GB in bf16
    assert 2.3e9 < draft.components["weights"] - plain.components["weights"] < 2.6e9
    assert draft.limits["kv_tokens"] < plain.limits["kv_tokens"]


# ---- serve --------------------------------------------------------------------------------------

def test_tpot_falls_as_acceptance_rises():
    tp = [pipeline.evaluate(scn({"method": "eagle", "acceptance_rate": a})).performance.tpot_s
          for a in (0.2, 0.5, 0.8, 0.95)]
    assert tp == sorted(tp, reverse=True)


def test_zero_acceptance_is_slower_than_no_speculation():
    # a = 0 yields one token per step but still pays the drafter and the verification of k rows
    plain = pipeline.evaluate(scn()).performance.tpot_s
    spec = pipeline.evaluate(scn({"method": "eagle", "acceptance_rate": 0.0})).performance.tpot_s
    assert spec > plain


def test_free_ngram_drafter_speeds_single_stream_by_almost_E():
    # at batch 1 decode is bandwidth-bound, so verifying 3 more rows costs little: TPOT ~ plain / E
    plain = pipeline.evaluate(scn()).performance.tpot_s
    est = pipeline.evaluate(scn({"method": "ngram", "acceptance_rate": 0.5}))
    e = 1 + 0.5 + 0.25 + 0.125
    assert plain / e <= est.performance.tpot_s < 1.1 * plain / e
    assert est.performance.details["speculative"]["tokens_per_step"] == pytest.approx(e)


# ---- the load simulator --------------------------------------------------------------------------

def test_simulator_advances_E_tokens_per_step_by_hand():
    # one request, 10-token prompt, 11 output tokens, 10 ms per iteration, 2 tokens per decode step:
    # it1 prefill -> first token at .01; the other 10 tokens take ceil(10/2) = 5 decode steps -> .06
    w = Workload(np.array([0.0]), np.array([10]), np.array([11]))
    res = simulate(w, Policy(max_num_seqs=4, token_budget=64, tokens_per_step=2.0), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.01])
    assert res.finish_s == pytest.approx([0.06])
    s = summarize(res)
    assert s["tpot_s"]["mean"] == pytest.approx(0.05 / 10)
    assert s["output_tokens_per_s"] == pytest.approx(11 / 0.06)


def test_load_speculation_lowers_tpot_at_light_load():
    load = {"rate_per_s": 1, "requests": 200, "input": {"dist": "fixed", "mean": 500},
            "output": {"dist": "fixed", "mean": 200}}
    out = {}
    for name, spec in (("plain", None), ("eagle", {"method": "eagle"})):
        r = pipeline.resolve(scn(spec, load=load))
        out[name] = pipeline.serving_load(r, pipeline.memory(r), search=False)
    assert out["eagle"]["policy"]["tokens_per_step"] == pytest.approx(expected_tokens(0.7, 3))
    assert out["eagle"]["tpot_s"]["mean"] < 0.6 * out["plain"]["tpot_s"]["mean"]
    # the same requests are served: throughput is set by the arrivals at light load
    assert out["eagle"]["requests_per_s"] == pytest.approx(out["plain"]["requests_per_s"], rel=0.05)


def test_verification_is_cheap_when_bandwidth_bound_and_dear_when_compute_bound():
    # one forward over batch x (k+1) positions: at batch 1 the step reads the same weights and KV, so
    # three more rows cost little; at batch 512 the linears are compute-bound and 4x the rows cost more
    # than the plain step again
    from gpuplan.estimate.speed import serving_model
    r = pipeline.resolve(scn({"method": "ngram", "acceptance_rate": 0.5}))
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                       memory=pipeline.memory(r))
    plain1 = sv.decode_step(1, 1000)["time"]
    assert sv.spec_step_extra(1, 1000) < 0.1 * plain1
    plain512 = sv.decode_step(512, 1000)["time"]
    assert sv.spec_step_extra(512, 1000) > 0.5 * plain512


def test_mtp_head_speeds_single_stream_deepseek():
    # DeepSeek-V3 with its MTP layer (k = 1, a = 0.85 -> 1.85 tokens per step): one extra layer of 61
    # and one more verified row cannot cost 85 % of a step, so TPOT must drop, by less than 1.85x
    s = {"model": "deepseek-v3", "task": "infer", "hardware": {"gpu": "h200-sxm", "count": 8},
         "parallel": {"tp": 8}, "infer": {"engine": "sglang", "weights": "fp8", "kv_cache": "fp8"}}
    plain = pipeline.evaluate(s).performance.tpot_s
    s["infer"]["speculative"] = {"method": "mtp", "num_tokens": 1}
    mtp = pipeline.evaluate(s).performance.tpot_s
    assert plain / 1.85 < mtp < plain


def test_spec_cost_buckets_do_not_collide():
    # batches 8 and 9 fall in different cache buckets: 8 is priced at 8 exactly, 9 at its bucket's middle
    from gpuplan.estimate.load.cost import SpecCost

    class Probe:
        def spec_step_extra(self, batch, context):
            return float(batch)

    c = SpecCost(None, Probe())
    assert c.extra(8, 100.0) == 8.0
    assert c.extra(9, 100.0) != 8.0
    assert c.extra(8, 100.0) == 8.0

"""Issue 17, search completeness: no feasible plan hidden by a framework lock, a divisibility filter,
a default limit or the one-plan-per-GPU listing; every fitting layout is returned or dominated."""
from __future__ import annotations

from gpuplan import api
from gpuplan.search import recommend
from gpuplan.search import frameworks as F
from gpuplan.search.train_search import batch_for

# Megatron-Turing NLG 530B (Smith et al. 2022, arXiv:2201.11990 table 1): 105 layers, hidden 20480,
# 128 heads, sequence 2048, GPT-2 BPE vocabulary (51,200 padded), 4h MLP. Trained with a global
# batch of 1920 sequences (after ramp-up) on up to 4,480 A100-80GB.
MT_NLG_530B = {"model_type": "gpt2", "_name_or_path": "mt-nlg-530b", "n_layer": 105, "n_embd": 20480,
               "n_head": 128, "n_positions": 2048, "vocab_size": 51200, "n_inner": 81920,
               "activation_function": "gelu_new", "tie_word_embeddings": True}


def test_batch_for_is_the_nearest_whole_step_batch():
    # hand arithmetic: 1920 / 641 = 2.995 -> 3 steps of 641 = 1923; 1024 / 3 = 341.3 -> 1023;
    # 100 / 40 = 2.5 -> ties round down to 2 x 40 = 80; fewer sequences than ranks -> one each
    assert batch_for(1920, 641) == 1923
    assert batch_for(1024, 8) == 1024
    assert batch_for(1024, 3) == 1023
    assert batch_for(100, 40) == 80
    assert batch_for(10, 40) == 40


def test_frameworks_offer_what_they_support():
    opts, _ = F.options(None, {"tp": 8, "pp": 1, "cp": 1, "ep": 1}, 641)
    by = {o.framework: o for o in opts}
    assert by["megatron"].zeros == (1,)                 # distributed optimizer: ZeRO-1 layout
    assert by["torchtitan"].zeros == (3,)               # FSDP2 + TP
    assert by["deepspeed"].zeros == (1, 2, 3)           # AutoTP with ZeRO 1-3 (ZeRO-3 in DeepSpeed 0.19)
    assert by["deepspeed"].offloads == ("none", "optimizer")
    opts, why = F.options(None, {"tp": 8, "pp": 4, "cp": 1, "ep": 1}, 16)
    assert {o.framework for o in opts} == {"megatron", "torchtitan"}
    assert any("DeepSpeed AutoTP" in w for w in why)
    opts, why = F.options("hf", {"tp": 2, "pp": 1, "cp": 1, "ep": 1}, 4)
    assert not opts and "data parallel only" in why[0]
    (o,), _ = F.options(None, {"tp": 1, "pp": 1, "cp": 1, "ep": 1}, 8)
    assert o.framework is None and o.zeros == (1, 2, 3)


def test_530b_on_5128_a100_finds_a_plan_that_estimate_confirms():
    # Before issue 17: nothing (tp>1 locked to Megatron's ZeRO-1: 530e9/8 x (2 + 4) B = 397 GB per
    # GPU; 5,128 over the default 4,096 cap; 1920 not divisible by any dp of 5,128 = 8 x 641).
    # With TP8 and ZeRO-3 over 641 ranks the model states are ~530e9 x 16 B / 5128 = 1.7 GB.
    rec = recommend({"model": MT_NLG_530B, "task": "train", "hardware": {"gpu": "a100-sxm-80gb", "count": 5128},
                     "train": {"seq_len": 2048, "global_batch": 1920, "tokens": 2.7e11}}, progress=False)
    assert rec.plans, [r.reason for r in rec.rejected]
    best = rec.plans[0]
    p, t = best.scenario.parallel, best.scenario.train
    assert best.count == 5128 and p.tp > 1 and p.zero >= 2
    assert p.dp * p.tp * p.pp * p.cp == 5128
    # the global batch is the nearest whole-step batch to 1920 for this dp, and the plan says so
    assert t.global_batch == batch_for(1920, p.dp) and t.global_batch != 1920
    assert abs(t.global_batch - 1920) <= p.dp / 2
    assert any(f"{t.global_batch:,}" in w and "1,920" in w for w in best.warnings), best.warnings
    # `estimate` of the very scenario shown agrees that it fits
    est = api.estimate(best.scenario)
    assert est.memory.fits and est.memory.peak_bytes_per_gpu == best.estimate["memory"]["peak_bytes_per_gpu"]


def test_405b_over_the_catalog_answers_beyond_the_default_limits():
    # 405B x 15.6T tokens: ~6 x 405e9 x 1.56e13 = 3.8e25 FLOPs; 4,096 H100 at a perfect 989 TFLOP/s
    # take 3.8e25 / (4096 x 9.89e14) s = 108 days > 90: the default cap and deadline leave nothing.
    from gpuplan.search.cli import recommendation_text
    rec = recommend({"model": "llama-3.1-405b", "task": "train", "train": {"seq_len": 8192, "tokens": 1.56e13}},
                    top=3, progress=False)
    assert not rec.plans                                   # nothing within the default limits ...
    assert rec.beyond_default_limits                       # ... but an answer beyond them
    assert rec.relaxed_limits == ("max_gpus 4,096 (default)", "deadline 90 days (default)")
    for p in rec.beyond_default_limits:
        labels = [w for w in p.warnings if w.startswith("outside the default limit")]
        assert labels, p.warnings
        days = p.estimate["performance"]["time_to_train_s"] / 86400
        # every label is true of the plan, and the plan is labelled for every default it exceeds
        assert any("4,096" in w for w in labels) == (p.count > 4096)
        assert any("90-day" in w for w in labels) == (days > 90)
    js = rec.to_json()
    assert js["plans"] == [] and len(js["beyond_default_limits"]) == len(rec.beyond_default_limits)
    text = recommendation_text(rec)
    assert "No feasible plan within the default limits" in text and "outside the default limit" in text


def test_limits_the_user_sets_are_not_relaxed():
    rec = recommend({"model": "llama-3.1-405b", "task": "train", "train": {"seq_len": 8192, "tokens": 1.56e13}},
                    gpus=["h100-sxm"], deadline_days=90, max_gpus=4096, progress=False)
    assert not rec.plans and not rec.beyond_default_limits and not rec.relaxed_limits


def test_top_n_returns_n_layouts_of_one_gpu():
    # Before issue 17 `top` listed the best plan of each GPU type only: one plan for one GPU type.
    scn = {"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e11}}
    five = recommend(scn, gpus=["h100-sxm"], top=5, progress=False)
    assert five.stats["feasible"] >= 20
    assert len(five.plans) == 5 and len({p.summary for p in five.plans}) == 5
    assert [p.rank for p in five.plans] == [1, 2, 3, 4, 5]
    assert [p.cost_value for p in five.plans] == sorted(p.cost_value for p in five.plans)   # cheapest first
    # asking for more changes nothing at the head: the pruning for N plans loses none of them
    many = recommend(scn, gpus=["h100-sxm"], top=12, progress=False)
    assert [p.summary for p in many.plans[:5]] == [p.summary for p in five.plans]


def test_top_n_still_shows_one_plan_per_gpu_type_first():
    scn = {"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e11}}
    rec = recommend(scn, gpus=["h100-sxm", "a100-sxm-80gb", "l40s"], top=3, progress=False)
    assert sorted(p.gpu for p in rec.plans) == ["a100-sxm-80gb", "h100-sxm", "l40s"]

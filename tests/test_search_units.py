"""The search's parts one by one: the candidate space, ranking, prices, bounds, the tally, candidate
scenarios and limit checks, the training and serving searches on one GPU. Expected values come
from the inputs (catalog prices, model shapes), never from the code under test."""
from __future__ import annotations

import math

import pytest

from gpuplan.errors import InputError
from gpuplan.estimate.speed import load_efficiency, peak_flops
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.search import recommend
from gpuplan.search import space as S
from gpuplan.search.bounds import eta_max, hopeless, lower_bounds, promising_first
from gpuplan.search.candidate import build, closeness, framework_for, layout_text, values
from gpuplan.search.constraints import Constraints
from gpuplan.search.plan import Cand, Rejection, rejections
from gpuplan.search.presets import get_preset
from gpuplan.search.pricing import cost_block, has_price, hourly, no_price_reason
from gpuplan.search.rank import dominates, pareto_front, parse_objective, score_fn
from gpuplan.search.state import Search, Tally
from gpuplan.search.train_search import counts, model_splits

H100 = get_gpu("h100-sxm")


def _search(partial: dict, cons: Constraints | None = None, preset: str | None = None, objective: str = "cheapest",
            top: int = 10) -> Search:
    sp = S.space_from(partial)
    return Search(model=get_model(partial["model"]), space=sp, cons=cons or Constraints(),
                  preset=get_preset(preset), objective=objective, weights={}, max_gpus=(cons or Constraints()).max_gpus
                  or S.DEFAULT_MAX_GPUS, top=top, base_params=load_efficiency())


class _C:
    """A stand-in candidate for the ranking functions (they read only these fields)."""

    def __init__(self, cost, time, upm=None):
        self.cost_value, self.time_value, self.usd_per_m = cost, time, upm


# ---- space --------------------------------------------------------------------------------------

def test_open_words_and_lists():
    sp = S.space_from({"model": "llama-3.1-8b", "hardware": {"gpu": "auto", "count": [8, 16, 8]},
                       "parallel": {"tp": None, "pp": [1, 2]}, "train": {"method": ["lora", "qlora"]}})
    assert sp.gpus is None                       # "auto" leaves it open
    assert sp.counts == (8, 16)                  # deduplicated, in order
    assert sp.parallel["tp"] is None and sp.parallel["pp"] == (1, 2)
    assert sp.train["method"] == ("lora", "qlora")
    assert sp.named["count"] == (8, 16) and sp.named["method"] == ("lora", "qlora")
    assert "tp" not in sp.named


def test_defaults_pin_quality_changing_fields():
    sp = S.space_from({"model": "llama-3.1-8b", "task": "finetune"})
    assert sp.train["method"] == ("full",) and sp.train["_method_defaulted"]
    assert sp.train["optimizer"] == ("adamw",)
    assert sp.train["recompute"] is None and sp.train["micro_batch"] is None     # open: the search picks
    assert sp.global_batch_default


def test_values_are_coerced_like_the_scenario():
    sp = S.space_from({"model": "llama-3.1-8b", "hardware": {"count": [8.0, "16"]}, "train": {"micro_batch": "4"}})
    assert sp.counts == (8, 16) and sp.train["micro_batch"] == (4,)


def test_checked_options_names_the_field_and_truncates_the_value():
    with pytest.raises(InputError) as err:
        S.checked_options("train.micro_batch", ("x" * 500,), __import__("gpuplan.scenario").scenario.Train)
    msg = err.value.message
    assert "train.micro_batch" in msg and len(msg) < 400 and "..." in msg


def test_space_needs_a_model_and_a_mapping():
    with pytest.raises(InputError, match="names no model"):
        S.space_from({"task": "train"})
    with pytest.raises(InputError, match="mapping"):
        S.space_from(["model"])


def test_network_and_profile_are_kept_for_the_candidates():
    sp = S.space_from({"model": "llama-3.1-8b", "hardware": {"network": "ib-ndr-400", "profile": "p.json"}})
    assert sp.base["_network"] == "ib-ndr-400" and sp.base["_profile"] == "p.json"


def test_gpus_per_node_takes_one_value():
    with pytest.raises(InputError, match="one value"):
        S.space_from({"model": "llama-3.1-8b", "hardware": {"gpus_per_node": [4, 8]}})
    assert S.space_from({"model": "llama-3.1-8b", "hardware": {"gpus_per_node": 4}}).gpus_per_node == 4


def test_layout_reasons_follow_the_model_shape():
    llama = get_model("llama-3.1-70b")           # 64 heads, 8 KV heads, 80 layers, dense
    assert S.tp_reason(llama, 8, "train") is None
    assert "16 KV" not in (S.tp_reason(llama, 16, "train") or "") and "8 KV heads" in S.tp_reason(llama, 16, "train")
    assert S.tp_reason(llama, 16, "infer") is None          # serving replicates KV heads
    assert "attention heads" in S.tp_reason(llama, 5, "infer")
    assert S.pp_reason(llama, 80) is None and "80 layers" in S.pp_reason(llama, 81)
    assert "dense" in S.ep_reason(llama, 2) and S.ep_reason(llama, 1) is None
    mixtral = get_model("mixtral-8x7b")          # 8 experts
    assert S.ep_reason(mixtral, 8) is None and "8 experts" in S.ep_reason(mixtral, 3)
    assert S.cp_reason(8192, 2, "infer") == "context parallel is for training only"
    assert S.cp_reason(8192, 4, "train") is None and "2*cp" in S.cp_reason(8190, 4, "train")


def test_counts_helpers():
    assert S.powers_of_two(8) == [1, 2, 4, 8] and S.powers_of_two(1, 2) == []
    assert S.node_aligned_counts(8, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert S.node_aligned_counts(6, 24) == [1, 2, 4, 6, 12, 24]        # whole nodes of 6, never 3 nodes
    assert S.node_aligned_counts(8, 4) == [1, 2, 4]
    assert S.default_global_batch("train", 8192) == 512 and S.default_global_batch("finetune", 8192) == 64


# ---- ranking --------------------------------------------------------------------------------------

def test_parse_objective_names_aliases_and_weights():
    assert parse_objective(None) == ("cheapest", {})
    assert parse_objective("fast") == ("fastest", {})
    assert parse_objective("per-token") == ("cost_per_token", {})
    assert parse_objective("weighted:cost=0.7,time=0.3") == ("weighted", {"cost": 0.7, "time": 0.3})
    assert parse_objective("weighted") == ("weighted", {"cost": 0.5, "time": 0.5})
    assert parse_objective({"time": 2}) == ("weighted", {"time": 2.0})
    with pytest.raises(InputError, match="not known"):
        parse_objective("quickest")
    with pytest.raises(InputError, match="key=number"):
        parse_objective("weighted:cost=lots")


def test_score_fn_orders_by_the_objective():
    a, b, c = _C(10.0, 5.0, 1.0), _C(5.0, 10.0, 2.0), _C(7.0, 7.0, 0.5)
    pool = [a, b, c]
    assert sorted(pool, key=score_fn("cheapest", {}, pool)) == [b, c, a]
    assert sorted(pool, key=score_fn("fastest", {}, pool)) == [a, c, b]
    assert sorted(pool, key=score_fn("cost_per_token", {}, pool)) == [c, a, b]
    # weighted: each value over the best of the pool; c is 1.4 x best on both, a and b are 1 + 2 = 3 / 2 = 1.5
    key = score_fn("weighted", {"cost": 1.0, "time": 1.0}, pool)
    assert key(c)[0] == pytest.approx((7 / 5 + 7 / 5) / 2)
    assert sorted(pool, key=key)[0] is c


def test_missing_values_rank_last():
    a, b = _C(None, 1.0), _C(3.0, 2.0)
    assert sorted([a, b], key=score_fn("cheapest", {}, [a, b])) == [b, a]


def test_pareto_front_and_dominance():
    pts = [_C(1.0, 10.0), _C(2.0, 5.0), _C(3.0, 6.0), _C(4.0, 1.0), _C(2.0, 5.0)]
    front = pareto_front(pts, lambda c: (c.cost_value, c.time_value))
    assert [(c.cost_value, c.time_value) for c in front] == [(1.0, 10.0), (2.0, 5.0), (4.0, 1.0)]
    assert dominates((1, 1), (1, 2)) and not dominates((1, 1), (1, 1)) and not dominates((1, 3), (2, 2))


# ---- prices ---------------------------------------------------------------------------------------

def test_own_price_per_gpu_hour_scales_with_count():
    s = _search({"model": "llama-3.1-8b", "cost": {"usd_per_gpu_hour": 2.5}})
    assert hourly(s, H100, 1) == 2.5 and hourly(s, H100, 16) == 40.0
    assert s.cache.price[("h100-sxm", 16)] == 40.0


def test_rent_price_is_the_cheapest_catalog_offering():
    from gpuplan.estimate.cost import rent_quotes
    s = _search({"model": "llama-3.1-8b"}, Constraints(providers=("lambda",)))
    quotes = rent_quotes("h100-sxm", 8, ("lambda",), False)
    assert hourly(s, H100, 8) == min(q.usd_per_hour for q in quotes)


def test_gpu_a_provider_does_not_offer_has_no_price_and_says_where():
    s = _search({"model": "llama-3.1-8b"}, Constraints(providers=("lambda",)))
    mi300x = get_gpu("mi300x")
    assert hourly(s, mi300x, 1) is None and not has_price(s, mi300x)
    assert "of mi300x at lambda" in no_price_reason(s, mi300x)


def test_unknown_provider_is_an_error_with_close_matches():
    from gpuplan.errors import UnknownNameError
    # refused where the constraint is made, before any price is looked up
    with pytest.raises(UnknownNameError) as err:
        Constraints(providers=("lambdа-labs",))
    assert "lambda" in err.value.matches


def test_cost_block_basis_follows_ownership_and_preset():
    s = _search({"model": "llama-3.1-8b"}, Constraints(owned={"h100-sxm": 4}, spot=True))
    assert cost_block(s, "h100-sxm")["basis"] == "own"
    block = cost_block(s, "a100-sxm-80gb")
    assert block["basis"] == "rent" and block["spot"] is True
    assert cost_block(_search({"model": "llama-3.1-8b", "cost": {"basis": "auto"}}), "h100-sxm")["basis"] == "auto"


# ---- bounds ---------------------------------------------------------------------------------------

def test_eta_max_is_the_largest_factor_capped_at_one():
    assert eta_max({"matmul": {"a": {"bf16": 0.6, "fp8": 0.7}, "b": 0.5}}) == 0.7
    assert eta_max({"matmul": {"a": {"bf16": 1.3}}}) == 1.0
    assert eta_max({"matmul": {}}) == 1.0


def test_lower_bounds_never_exceed_the_plans_found():
    partial = {"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e10}}
    rec = recommend(partial, gpus=["h100-sxm", "a100-sxm-80gb", "l40s"], top=10, progress=False)
    s = _search(partial)
    assert rec.plans
    for p in rec.plans + rec.pareto:
        cost_lb, t_lb, upm_lb, price = lower_bounds(s, get_gpu(p.gpu), p.count, "full", "bf16", 4096)
        assert t_lb <= p.time_value and cost_lb <= p.cost_value
        assert upm_lb <= p.estimate["cost"]["usd_per_million_tokens"] * (1 + 1e-9)


def test_lower_bound_time_is_the_matmul_flops_at_peak():
    from gpuplan.estimate.flops import training_flops_per_token
    partial = {"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e10},
               "cost": {"usd_per_gpu_hour": 1.0}}
    s = _search(partial)
    cost_lb, t_lb, upm_lb, price = lower_bounds(s, H100, 8, "full", "bf16", 4096)
    fl = training_flops_per_token(get_model("llama-3.1-8b"), 4096, "none", "full")
    e = eta_max(s.base_params)
    tps = 8 * peak_flops(H100, "bf16") * e / (3 * fl.matmul_forward + 3 * fl.attention_forward * e
                                              / eta_max(s.base_params, "attention"))
    assert t_lb == pytest.approx(1e10 / tps, rel=1e-9)
    assert price == 8.0 and cost_lb == pytest.approx(8.0 * t_lb / 3600, rel=1e-9)


def test_hopeless_needs_a_dominating_plan_and_a_full_top():
    s = _search({"model": "llama-3.1-8b"}, top=1)
    g = ("y", "full")
    assert not hopeless(s, 5.0, 5.0, 1.0, "full", g)            # nothing found yet
    s.tally.add_to_front(1.0, 1.0)
    s.tally.group_best[("x", "full")] = 1.0
    assert hopeless(s, 5.0, 5.0, 1.0, "full", g)
    assert not hopeless(s, 0.5, 5.0, 1.0, "full", g)             # cheaper than anything found


def test_hopeless_within_one_gpu_type_needs_top_n_better_plans_of_it():
    # issue 17: with fewer GPU types than N the top N fills with more plans of one type, so a plan
    # of that type is hopeless only when N of its own plans are better
    s = _search({"model": "llama-3.1-8b"}, top=3)
    g = ("x", "full")
    s.tally.add_to_front(1.0, 1.0)
    s.tally.group_best[g] = 1.0
    s.tally.group_top[g] = [1.0, 2.0]
    assert not hopeless(s, 5.0, 5.0, 1.0, "full", g)             # only 2 better plans, 3 wanted
    s.tally.group_top[g] = [1.0, 2.0, 3.0]
    assert hopeless(s, 5.0, 5.0, 1.0, "full", g)
    assert not hopeless(s, 2.5, 5.0, 1.0, "full", g)             # would be the 3rd


def test_promising_first_puts_unpriced_gpus_last():
    s = _search({"model": "llama-3.1-8b"}, Constraints(providers=("lambda",)))
    order = [g.id for g in promising_first(s, [get_gpu("mi300x"), H100])]
    priced = [g for g in order if hourly(s, get_gpu(g), 1) or hourly(s, get_gpu(g), 8)]
    assert order[:len(priced)] == priced


# ---- tally and candidates ---------------------------------------------------------------------------

def test_front_keeps_only_non_dominated_points():
    t = Tally()
    for pt in [(5, 5), (4, 6), (6, 4), (3, 3), (3, 3), (10, 1)]:
        t.add_to_front(*pt)
    assert sorted(t.front) == [(3, 3), (10, 1)]


def test_named_rejections_are_recorded_once():
    t = Tally()
    r = Rejection("tp=3", "tp=3 does not divide 8 KV heads", "layout")
    t.named_reject(r)
    t.named_reject(Rejection("tp=3", "tp=3 does not divide 8 KV heads", "layout"))
    assert t.rejected == [r]


def test_preference_steps_follow_the_preset_order():
    s = _search({"model": "llama-3.1-8b", "task": "finetune"}, preset="research-budget")
    assert s.pref(method="qlora") == 1.0
    assert s.pref(method="lora") == pytest.approx(1.15)
    assert s.pref(method="full") == pytest.approx(1.15 ** 0 * (1 + 0.15 * 2))
    assert _search({"model": "llama-3.1-8b"}).pref(method="full") == 1.0


def test_most_telling_miss_per_gpu():
    s = _search({"model": "llama-3.1-8b"})
    weak = Rejection("a", "memory", "memory", "h100-sxm")
    strong = Rejection("b", "over budget", "constraint", "h100-sxm")
    nearer = Rejection("c", "over budget by less", "constraint", "h100-sxm")
    s.tally.miss("h100-sxm", 2, 0.9, weak)
    s.tally.miss("h100-sxm", 4, 0.2, strong)
    s.tally.miss("h100-sxm", 4, 0.8, nearer)
    out = rejections(s, {"h100-sxm", "l40s"})
    assert out[0] is nearer
    assert any(r.gpu == "l40s" and r.kind == "layout" for r in out)


def test_layout_text_and_framework():
    assert layout_text({"tp": 2, "pp": 1, "cp": 1, "ep": 1, "dp": 4, "zero": 1, "offload": "none"},
                       {"mb": 2}) == "tp=2, dp=4, zero=1, mb=2"
    s = _search({"model": "llama-3.1-8b"})
    assert framework_for(s, {"tp": 2}) == "megatron" and framework_for(s, {"tp": 1, "pp": 1}) is None
    assert framework_for(_search({"model": "llama-3.1-8b", "framework": "deepspeed"}), {"tp": 2}) is None


def test_candidate_scenario_carries_the_search_settings():
    s = _search({"model": "llama-3.1-8b", "hardware": {"network": "ib-ndr-400"}, "cost": {"spot": True}},
                Constraints(providers=("lambda",)))
    scn = build(s, H100, 16, 8, {"tp": 2, "dp": 8}, {"micro_batch": 2})
    assert scn.hardware.gpu == "h100-sxm" and scn.hardware.count == 16 and scn.hardware.network == "ib-ndr-400"
    assert scn.parallel.tp == 2 and scn.train.micro_batch == 2
    assert scn.cost.providers == ["lambda"] and scn.cost.basis == "rent"
    assert scn.hardware.profile is None


def test_values_for_training_and_serving():
    from gpuplan.estimate.results import CostEstimate, PerformanceEstimate
    perf = PerformanceEstimate(tokens_per_s_per_gpu=1000.0, time_to_train_s=None)
    cost = CostEstimate(usd_per_hour=10.0, usd_total=None, usd_per_million_tokens=0.5, basis="rent")
    cv, tv, upm = values(perf, cost, 4, "train", 0, False)
    assert (cv, upm) == (0.5, 0.5) and tv == pytest.approx(1e9 / 4000)
    serve = PerformanceEstimate(ttft_s=0.2, tpot_s=0.01)
    cv, tv, upm = values(serve, cost, 2, "infer", 100, True)
    assert cv == 10.0 and tv == pytest.approx(0.2 + 100 * 0.01)
    assert values(serve, cost, 2, "infer", 100, False)[0] == 0.5


def test_closeness_is_the_tightest_ratio():
    from gpuplan.estimate.results import CostEstimate, PerformanceEstimate
    s = _search({"model": "llama-3.1-8b"}, Constraints(deadline_days=1.0, budget_usd=100.0))
    perf = PerformanceEstimate(time_to_train_s=2 * 86400.0)
    cost = CostEstimate(usd_per_hour=10.0, usd_total=400.0, usd_per_million_tokens=1.0, basis="rent")
    cand = Cand(H100, 1, None, None, perf, cost, 400.0, 2 * 86400.0, 1.0, ("h",), "x")
    assert closeness(s, cand) == pytest.approx(0.25)


# ---- one GPU's search ------------------------------------------------------------------------------

def test_counts_respect_owned_and_fixed_counts():
    s = _search({"model": "llama-3.1-8b"}, Constraints(owned={"h100-sxm": 12}))
    assert counts(s, H100, 8) == [1, 2, 4, 8, 12]
    fixed = _search({"model": "llama-3.1-8b", "hardware": {"count": [4, 16, 64]}}, Constraints(max_gpus=16))
    assert counts(fixed, H100, 8) == [4, 16]


def test_named_invalid_tp_is_rejected_with_the_reason():
    s = _search({"model": "llama-3.1-70b", "parallel": {"tp": [3, 8]}})
    assert list(model_splits(s, 24, 8, 4096)) == [(8, 1, 1)]       # 64 heads: 3 does not divide them
    assert any(r.option == "tp=3" and "attention heads" in r.reason for r in s.tally.rejected)


def test_open_splits_stay_inside_a_node():
    s = _search({"model": "llama-3.1-70b"})
    assert {tp for tp, _, _ in model_splits(s, 64, 8, 4096)} == {1, 2, 4, 8}


def test_fixed_count_serving_needs_enough_replicas():
    rec = recommend({"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"count": 1},
                     "infer": {"engine": "vllm"}}, gpus=["l40s"], tokens_per_s=1e7, progress=False)
    assert not rec.plans
    assert any("count fixed at 1" in r.reason for r in rec.rejected)


def test_serving_replicas_meet_the_throughput_target():
    rec = recommend({"model": "qwen2.5-0.5b", "task": "infer", "infer": {"engine": "vllm", "concurrency": 8}},
                    gpus=["l40s"], tokens_per_s=5000, top=1, progress=False)
    p = rec.plans[0]
    assert p.estimate["performance"]["output_tokens_per_s"] >= 5000
    one = p.estimate["performance"]["output_tokens_per_s"] / p.estimate["performance"]["details"]["replicas"]
    assert math.ceil(5000 / one) == p.estimate["performance"]["details"]["replicas"]


def test_software_refusal_of_a_named_engine_is_explained():
    rec = recommend({"model": "qwen2.5-0.5b", "task": "infer", "infer": {"engine": "trtllm"}}, gpus=["mi300x"],
                    progress=False)
    assert not rec.plans
    assert any(r.kind == "software" and "TensorRT" in r.reason for r in rec.rejected)


def test_model_parallel_plans_are_not_proposed_where_megatron_does_not_run():
    # the search switches model-parallel training to Megatron-LM; on TPU that plan could not launch
    # (it used to offer "2048 x tpu-v6e (tp=2, dp=1024, zero=1)" on Megatron, which the pipeline refuses)
    rec = recommend({"model": "llama-3.1-8b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e10}},
                    gpus=["tpu-v6e"], progress=False)
    assert rec.plans
    for p in rec.plans + rec.pareto:
        assert p.scenario.framework != "megatron" and p.scenario.parallel.tp == 1

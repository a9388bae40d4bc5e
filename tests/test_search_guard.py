"""Bounded work and clean refusals in the search (issue 16). One regression test per crash site that
the fuzz suite found (each used to end in TypeError, KeyError, ZeroDivisionError or OverflowError
inside search/, i.e. a 500 on the web and exit 3 on the CLI), plus the candidate budget, the
deadline and the deduplicated option lists."""
from __future__ import annotations

import math
import time

import pytest

from gpuplan.errors import GpuplanError, InputError, TimeLimitError, UnknownNameError
from gpuplan.estimate.layout import grad_accum_steps
from gpuplan.search import compare, guard, recommend
from gpuplan.search.rank import parse_objective

SMALL = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
         "train": {"seq_len": 1024, "tokens": 1e7}}
SERVE = {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l40s"}}


def _with(base, section, **fields):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    out.setdefault(section, {}).update(fields)
    return out


def _input_error(partial, match, **kw):
    with pytest.raises(InputError) as err:
        recommend(partial, progress=False, **kw)
    assert match in err.value.message, err.value.message
    assert err.value.fix
    return err.value


# ---- one regression test per crash site --------------------------------------------------------------

def test_micro_batch_zero_names_the_field():
    # was ZeroDivisionError (integer modulo by zero) in the layout loop; `--micro-batch 0` exited 3
    _input_error(_with(SMALL, "train", micro_batch=0), "train.micro_batch")


def test_micro_batch_list_with_a_string_names_the_field():
    _input_error(_with(SMALL, "train", micro_batch=[1, "x"]), "train.micro_batch")


@pytest.mark.parametrize("count", [0, -2, 1.5, 1e400, "many", [4, 0]])
def test_bad_gpu_counts_name_the_field(count):
    # 0 was ZeroDivisionError in the bounds, 1e400 OverflowError, "many" ValueError; -2 silently gave nothing
    _input_error(_with(SMALL, "hardware", count=count), "hardware.count")


@pytest.mark.parametrize("field, value", [("tp", 0), ("pp", -1), ("cp", "x"), ("ep", 0.5), ("zero", 7),
                                          ("offload", "disk")])
def test_bad_parallel_values_name_the_field(field, value):
    # tp=0 was ZeroDivisionError; zero=7 failed only when the plan was built, as "(recommended plan)"
    _input_error(_with(SMALL, "parallel", **{field: value}), f"parallel.{field}")


@pytest.mark.parametrize("field, value", [("method", "dreambooth"), ("recompute", ["none", 3]),
                                          ("optimizer", {"a": 1}), ("precision", "int3")])
def test_bad_train_options_name_the_field(field, value):
    # recompute=3 was KeyError in RECOMPUTE_RANK; a dict optimizer was TypeError (unhashable)
    _input_error(_with(SMALL, "train", **{field: value}), f"train.{field}")


def test_bad_engine_names_the_field():
    _input_error(_with(SERVE, "infer", engine="tgi-9"), "infer.engine")


def test_gpus_per_node_zero_names_the_field():
    # was ZeroDivisionError in node_aligned_counts
    _input_error(_with(SMALL, "hardware", gpus_per_node=0), "hardware.gpus_per_node")


def test_gpu_given_as_a_number_names_the_field():
    _input_error(_with(SMALL, "hardware", gpu=7), "hardware.gpu")


@pytest.mark.parametrize("section", ["hardware", "parallel", "train"])
def test_section_that_is_not_a_mapping(section):
    # hardware: 3 was TypeError (dict(3)) inside space_from
    bad = dict(SMALL)
    bad[section] = 3
    with pytest.raises(GpuplanError) as err:
        recommend(bad, progress=False)
    assert section in err.value.message


def test_unknown_task_is_refused():
    _input_error({**SMALL, "task": "pretrain-ish"}, "task")


@pytest.mark.parametrize("top", [0, -1, True, 1.5, "3"])
def test_top_must_be_a_positive_whole_number(top):
    # --top 0 was accepted and returned no plans
    _input_error(SMALL, "top", top=top)


@pytest.mark.parametrize("gpus", [[], "h100-sxm", [3], [""]])
def test_gpus_argument_must_list_gpu_ids(gpus):
    _input_error(SMALL, "gpus", gpus=gpus)


@pytest.mark.parametrize("objective", [{"cost": math.nan}, {"cost": -1.0}, {"cost": "high"}, {"speed": 1.0},
                                       {"cost": 0.0, "time": 0.0}, "weighted:cost=nan", {"cost": math.inf}])
def test_bad_objective_weights_are_refused(objective):
    # NaN weights were accepted (and ranked nonsense); "high" was ValueError from float()
    with pytest.raises(InputError):
        parse_objective(objective)
    _input_error(SMALL, "objective", objective=objective)


def test_unknown_objective_weight_has_close_matches():
    err = _input_error(SMALL, "objective", objective={"cots": 1.0})
    assert "cost" in err.matches


@pytest.mark.parametrize("kw, match", [
    ({"budget_usd": "abc"}, "budget_usd"), ({"budget_usd": -5.0}, "budget_usd"),
    ({"budget_usd": math.nan}, "budget_usd"), ({"max_gpus": 0}, "max_gpus"), ({"min_headroom": 2.0}, "min_headroom"),
    ({"owned": {"h100-sxm": 0}}, "owned"), ({"providers": "aws"}, "providers"), ({"spot": "yes"}, "spot"),
    ({"deadline_days": -1.0}, "deadline_days"), ({"tokens_per_s": 0.0}, "tokens_per_s"),
])
def test_bad_constraint_arguments_name_the_constraint(kw, match):
    # keyword constraints were merged unchecked: "abc" was TypeError in a comparison, NaN and -5 accepted
    _input_error(SMALL, match, **kw)


def test_bad_constraint_in_the_scenario_is_refused():
    _input_error({**SMALL, "constraints": {"budget_usd": "lots"}}, "budget_usd")


def test_preset_that_is_not_a_name():
    with pytest.raises(InputError, match="preset"):
        recommend({**SMALL, "preset": ["startup"]}, progress=False)


@pytest.mark.parametrize("deadline_s", [math.nan, math.inf, "soon", True])
def test_bad_deadline_argument(deadline_s):
    _input_error(SMALL, "deadline_s", deadline_s=deadline_s)


def test_compare_refuses_top_and_gpus_arguments():
    # `top` was TypeError (given twice to recommend)
    with pytest.raises(InputError, match="top"):
        compare(SMALL, ["h100-sxm"], top=3)
    with pytest.raises(InputError, match="gpus"):
        compare(SMALL, "h100-sxm")


# ---- bounded work --------------------------------------------------------------------------------

def test_too_many_values_in_one_list_is_refused_before_searching():
    err = _input_error(_with(SMALL, "train", micro_batch=list(range(1, 200))), "train.micro_batch")
    assert "at most" in err.message


def test_candidate_budget_is_checked_before_the_search(monkeypatch):
    calls = []
    import gpuplan.search.train_search as ts
    monkeypatch.setattr(ts, "train_gpu", lambda *a: calls.append(a))
    partial = {"model": "llama-3.1-70b", "task": "train", "hardware": {"count": list(range(1, 65))},
               "parallel": {"tp": [1, 2, 4, 8, 16, 32, 64, 128], "pp": list(range(1, 41))},
               "train": {"method": ["full", "lora", "qlora"]}}
    with pytest.raises(InputError) as err:
        recommend(partial, progress=False)
    msg = err.value.message
    assert "candidate layouts" in msg and "GPU counts 64" in msg and "pp 40" in msg
    assert "narrow" in msg
    assert calls == []                  # refused before any GPU was searched


def test_candidate_count_of_default_searches_is_under_the_limit():
    from gpuplan.search import space as S
    from gpuplan.search.state import Search
    from gpuplan.models import get_model
    from gpuplan.hardware import list_gpus
    from gpuplan.search.constraints import Constraints
    sp = S.space_from({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192}})
    s = Search(model=get_model("llama-3.1-70b"), space=sp, cons=Constraints(), preset=None, objective="cheapest",
               weights={}, max_gpus=4096, top=10, base_params={})
    total, sizes = guard.candidate_count(s, list_gpus())
    assert sizes["GPU counts"] == 13 and sizes["tp"] == 4 and sizes["pp"] == 7
    assert total == len(list_gpus()) * 13 * 4 * 7
    assert total < guard.MAX_CANDIDATES


def test_deadline_already_passed_stops_with_a_time_limit_error():
    with pytest.raises(TimeLimitError) as err:
        recommend({"model": "llama-3.1-70b", "task": "train", "train": {"tokens": 1e12}}, progress=False,
                  deadline_s=time.monotonic() - 1.0)
    assert "searched 0 of" in err.value.message and "narrow" in err.value.message


def test_deadline_stops_a_long_search_promptly():
    start = time.monotonic()
    with pytest.raises(TimeLimitError) as err:
        recommend({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1e12}},
                  progress=False, deadline_s=start + 0.05)
    assert time.monotonic() - start < 2.0
    assert "layouts" in err.value.message


def test_generous_deadline_changes_nothing():
    a = recommend(SMALL, progress=False, top=3)
    b = recommend(SMALL, progress=False, top=3, deadline_s=time.monotonic() + 600)
    assert [p.summary for p in a.plans] == [p.summary for p in b.plans]


def test_duplicate_option_values_are_searched_once():
    one = recommend(_with(SMALL, "train", micro_batch=[2]), gpus=["h100-sxm"], progress=False)
    dup = recommend(_with(SMALL, "train", micro_batch=[2, 2, 2.0]), gpus=["h100-sxm", "h100-sxm"], progress=False)
    assert [p.summary for p in one.plans] == [p.summary for p in dup.plans]
    assert one.stats["memory_evaluations"] == dup.stats["memory_evaluations"]
    assert one.stats["layouts"] == dup.stats["layouts"]


def test_gpu_listed_under_two_aliases_is_searched_once():
    rec = recommend(SERVE | {"hardware": {}}, gpus=["h100-sxm", "H100-SXM"], progress=False)
    assert rec.stats["gpus_searched"] == 1


# ---- gradient accumulation: one rule --------------------------------------------------------------

def test_grad_accum_steps_exact_and_rounded():
    assert grad_accum_steps(64, 2, 8) == 4
    assert grad_accum_steps(64, 4, 16) == 1
    assert grad_accum_steps(10, 4, 1) == 3            # rounded up: the step trains 12 sequences
    assert grad_accum_steps(3, 4, 2) == 1              # never fewer than one micro-batch


def test_grad_accum_steps_strict_requires_exact_division():
    assert grad_accum_steps(64, 2, 8, strict=True) == 4
    with pytest.raises(InputError) as err:
        grad_accum_steps(10, 4, 1, strict=True)
    assert "train.global_batch" in err.value.message and "multiple of 4" in err.value.message
    assert "e.g. 8" in err.value.message


@pytest.mark.parametrize("args, field", [((0, 1, 1), "global_batch"), ((8, 0, 1), "micro_batch"),
                                         ((8, 1, 0), "parallel.dp"), ((8, -2, 1), "micro_batch")])
def test_grad_accum_steps_refuses_non_positive_sizes(args, field):
    with pytest.raises(InputError, match=field):
        grad_accum_steps(*args)


def test_search_proposes_only_exact_gradient_accumulation():
    rec = recommend({"model": "qwen2.5-0.5b", "task": "finetune", "train": {"global_batch": 48, "tokens": 1e7}},
                    gpus=["l40s", "a10g"], top=10, progress=False)
    assert rec.plans
    for p in rec.plans + rec.pareto:
        t, dp = p.scenario.train, p.scenario.dp
        assert 48 % (t.micro_batch * dp) == 0
        assert grad_accum_steps(48, t.micro_batch, dp, strict=True) * t.micro_batch * dp == 48

"""One validation layer (issue 16, "Silent wrong answers"): finite numbers in sane ranges, cross-field
rules that need the model, one Constraints model, the partial scenario of the search, and lookups
that are never swallowed. Each error names the input and says how to fix it."""
import dataclasses
import math

import pytest

from gpuplan.api import resolve
from gpuplan.errors import InputError, UnknownNameError
from gpuplan.hardware import get_network
from gpuplan.models import get_model
from gpuplan.scenario import MAX_LIST, PartialScenario, partial_from_dict, scenario_from_dict
from gpuplan.search.constraints import Constraints
from gpuplan.search.partial import _partial, _validate_fixed
from gpuplan.validate import check_scenario_against_model

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 8}}


def _error(fn, *args, kind=InputError):
    with pytest.raises(kind) as err:
        fn(*args)
    text = str(err.value)
    assert "Fix:" in text, text
    return text


# ---- numbers: finite, positive, in range (the range is in the message) ------------------------------------

@pytest.mark.parametrize("patch, field, shown", [
    ({"train": {"tokens": float("inf")}}, "train.tokens", "finite"),
    ({"train": {"tokens": "1.0e+400"}}, "train.tokens", "finite"),
    ({"train": {"tokens": 1e17}}, "train.tokens", "1e+16"),
    ({"hardware": {"gpu": "h100-sxm", "count": 1e9}}, "hardware.count", "100,000"),
    ({"hardware": {"gpu": "h100-sxm", "count": "1e400"}}, "hardware.count", "integer"),
    ({"train": {"seq_len": "9" * 400}}, "train.seq_len", "10,485,760"),
    ({"train": {"seq_len": 10 ** 400}}, "train.seq_len", "10,485,760"),
    ({"train": {"seq_len": 1e400}}, "train.seq_len", "finite"),
    ({"train": {"micro_batch": 0}}, "train.micro_batch", "1 <= value"),
    ({"constraints": {"budget_usd": -100}}, "constraints.budget_usd", "0 < value"),
    ({"constraints": {"deadline_days": -1}}, "constraints.deadline_days", "0 < value"),
    ({"constraints": {"min_headroom": 2}}, "constraints.min_headroom", "0 <= value < 1"),
    ({"constraints": {"ttft_s": float("nan")}}, "constraints.ttft_s", "finite"),
    ({"cost": {"pue": 0.5}}, "cost.pue", "1 <= value"),
    ({"objective": {"cost": float("nan")}}, "objective.cost", "finite"),
    ({"objective": "weighted:cost=nan,time=1"}, "objective", "finite"),
    ({"objective": {"cost": 1, "speed": 1}}, "objective", "'speed'"),
])
def test_absurd_numbers_refused_with_the_range(patch, field, shown):
    text = _error(scenario_from_dict, {**BASE, **patch})
    assert f"'{field}'" in text and shown in text
    assert len(text) < 600


def test_no_overflow_on_huge_numbers():
    """A 400-digit length used to overflow in the memory engine; now it never gets there."""
    for bad in (10 ** 400, "9" * 400, 1e400, float("-inf")):
        with pytest.raises(InputError):
            scenario_from_dict({**BASE, "task": "infer", "infer": {"prompt_len": bad}})


def test_bounds_documented_in_the_schema():
    desc = scenario_from_dict(BASE).model_json_schema()["$defs"]["Hardware"]["properties"]["count"]["description"]
    assert "100,000" in desc


# ---- rules that need the model ----------------------------------------------------------------------------

def _check(data):
    return check_scenario_against_model(scenario_from_dict(data), get_model(data["model"]))


def test_pipeline_stages_more_than_layers():
    text = _error(resolve, {"model": "gpt2", "hardware": {"gpu": "h100-sxm", "count": 16}, "parallel": {"pp": 16}})
    assert "parallel.pp = 16" in text and "12 layers" in text and "pp <= 12" in text


def test_expert_parallel_on_a_dense_model():
    data = {**BASE, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2}, "parallel": {"tp": 2, "ep": 2}}
    text = _error(resolve, data)
    assert "parallel.ep = 2" in text and "dense" in text and "ep: 1" in text


def test_expert_parallel_must_divide_experts():
    data = {"model": "mixtral-8x7b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 6},
            "parallel": {"tp": 2, "ep": 3}}
    text = _error(_check, data)
    assert "8 experts" in text and "1, 2, 4" in text


def test_context_parallel_for_inference():
    text = _error(scenario_from_dict, {**BASE, "task": "infer", "parallel": {"cp": 2}})
    assert "parallel.cp = 2" in text and "cp: 1" in text
    text = _error(partial_from_dict, {"model": "gpt2", "task": "infer", "parallel": {"cp": [1, 2]}})
    assert "parallel.cp = 2" in text


def test_context_parallel_must_split_the_sequence():
    data = {**BASE, "parallel": {"cp": 8}, "train": {"seq_len": 2056}}
    assert "multiple of 16" in _error(_check, data)


def test_tp_must_divide_heads():
    data = {**BASE, "hardware": {"gpu": "h100-sxm", "count": 3}, "parallel": {"tp": 3}}
    text = _error(_check, data)
    assert "parallel.tp = 3" in text and "32 attention heads" in text and "1, 2, 4" in text


def test_tp_beyond_kv_heads_replicates_for_serving_and_fails_for_training():
    serve = {**BASE, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 16}, "parallel": {"tp": 16}}
    notes = _check(serve)
    assert any("replicate" in n and "8 KV heads" in n and "2 GPUs" in n for n in notes)
    train = {**serve, "task": "train"}
    assert "8 KV heads" in _error(_check, train)


def test_prompt_longer_than_the_context():
    data = {"model": "llama-2-7b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
            "infer": {"prompt_len": 4000, "output_len": 256}}
    text = _error(resolve, data)
    assert "4,256" in text and "4,096" in text and "infer.allow_longer_context: true" in text
    ok = {**data, "infer": {**data["infer"], "allow_longer_context": True}}
    notes = _check(ok)
    assert any("YaRN" in n and "factor 2" in n for n in notes)


def test_longer_training_context_names_the_models_own_scaling():
    data = {**BASE, "task": "finetune", "train": {"seq_len": 262_144, "allow_longer_context": True}}
    (note,) = _check(data)
    assert "llama3 x8 of 8,192 positions" in note and "factor 2" in note
    assert "train.seq_len = 262,144" in _error(_check, {**BASE, "task": "finetune", "train": {"seq_len": 262_144}})


def test_pretraining_from_scratch_sets_its_own_context():
    # a pre-training run defines the context (rotary positions); a note says to set it in the config
    (note,) = _check({**BASE, "task": "train", "train": {"seq_len": 262_144}})
    assert "pre-training at 262,144 tokens" in note and "max_position_embeddings" in note
    data = {"model": "gpt2", "task": "train", "hardware": {"gpu": "h100-sxm"}, "train": {"seq_len": 2048}}
    assert "1,024 learned position" in _error(_check, data)       # a learned table still cannot grow


def test_learned_positions_cannot_be_stretched():
    data = {"model": "gpt2", "hardware": {"gpu": "h100-sxm"}, "train": {"seq_len": 2048, "allow_longer_context": True}}
    assert "1,024 learned position" in _error(_check, data)


def test_examples_pass_the_model_rules():
    from pathlib import Path
    from gpuplan.scenario import load_scenario
    for path in sorted(Path(__file__).resolve().parents[1].glob("examples/*.yaml")):
        if "recommend" not in path.name:
            resolve(load_scenario(path))


# ---- lookups never swallowed -------------------------------------------------------------------------------

def test_misspelled_network_is_an_error_with_close_matches():
    with pytest.raises(UnknownNameError) as err:
        scenario_from_dict({**BASE, "hardware": {"gpu": "h100-sxm", "count": 16, "network": "ib-ndr400"}})
    assert "hardware.network" in str(err.value) and "ib-ndr-400" in err.value.matches and err.value.fix
    with pytest.raises(UnknownNameError):
        partial_from_dict({"model": "gpt2", "hardware": {"network": "infiniband"}})
    with pytest.raises(UnknownNameError) as err:
        get_network("roce400")
    assert "roce-400" in err.value.matches
    assert scenario_from_dict({**BASE, "hardware": {"gpu": "h100-sxm", "network": "IB-NDR-400"}}).hardware.network \
        == "ib-ndr-400"


# ---- one Constraints ---------------------------------------------------------------------------------------

def test_search_constraints_share_the_scenario_checks():
    for bad in ({"min_headroom": 2}, {"deadline_days": -3}, {"budget_usd": float("nan")}, {"max_gpus": 10 ** 9}):
        text = _error(lambda: Constraints().merged(**bad))
        assert list(bad)[0] in text
    with pytest.raises(InputError):
        Constraints(budget_usd=-1)
    c = Constraints(deadline_days=10)
    with pytest.raises(InputError):
        dataclasses.replace(c, deadline_days=float("inf"))


def test_constraints_names_resolved_with_close_matches():
    c = Constraints().merged(providers=["AWS", "lambda", "aws"], owned={"H100 SXM": 4})
    assert c.providers == ("aws", "lambda") and c.owned == {"h100-sxm": 4}
    assert c.to_json() == {"owned": {"h100-sxm": 4}, "providers": ["aws", "lambda"]}
    with pytest.raises(UnknownNameError) as err:
        Constraints().merged(providers=["lamda"])
    assert "lambda" in err.value.matches
    with pytest.raises(UnknownNameError) as err:
        Constraints().merged(owned={"h100-sx": 2})
    assert "constraints.owned" in str(err.value) and err.value.matches
    with pytest.raises(InputError, match="budget_usd"):
        Constraints().merged(budgt_usd=3)


def test_scenario_constraints_block_is_the_same_model():
    scn = scenario_from_dict({**BASE, "constraints": {"providers": ["Lambda"], "spot": True}})
    assert scn.constraints.providers == ["lambda"] and scn.constraints.spot is True
    assert Constraints(**scn.constraints.model_dump(exclude_none=True)).providers == ("lambda",)


# ---- the search's input ------------------------------------------------------------------------------------

def test_partial_scenario_lists_deduplicated_and_bounded():
    data = partial_from_dict({"model": "gpt2", "hardware": {"gpu": ["h100-sxm", "h100-sxm", "a100-sxm-80gb"],
                                                            "count": [1, 2, 2]},
                              "train": {"micro_batch": [1, 2, 2], "seq_len": "1024", "tokens": "1.0e12"}})
    assert data["hardware"] == {"gpu": ["h100-sxm", "a100-sxm-80gb"], "count": [1, 2]}
    assert data["train"] == {"micro_batch": [1, 2], "seq_len": 1024, "tokens": 1e12}
    text = _error(partial_from_dict, {"model": "gpt2", "hardware": {"count": list(range(1, MAX_LIST + 2))}})
    assert "hardware.count" in text and str(MAX_LIST) in text


def test_partial_scenario_same_messages_as_scenario():
    full = _error(scenario_from_dict, {**BASE, "train": {"micro_batch": 0}})
    part = _error(partial_from_dict, {"model": "llama-3.1-8b", "train": {"micro_batch": 0}})
    assert "'train.micro_batch' is out of range (allowed: 1 <= value" in full
    assert "'train.micro_batch' is out of range (allowed: 1 <= value" in part
    part = _error(partial_from_dict, {"model": "llama-3.1-8b", "train": {"micro_batch": [1, 0]}})
    assert "train.micro_batch" in part and "1 <= value" in part


def test_partial_scenario_open_words_and_optional_hardware():
    data = partial_from_dict({"model": "gpt2", "task": "infer", "infer": {"engine": "auto", "weights": ["bf16"]}})
    assert data["infer"] == {"engine": None, "weights": ["bf16"]}
    assert PartialScenario.model_validate({"model": "gpt2"}).hardware is None
    with pytest.raises(InputError, match="hardwre"):
        partial_from_dict({"model": "gpt2", "hardwre": {}})


def test_recommend_input_checked_before_the_search():
    """--micro-batch 0 used to end in an internal error inside the search (exit 3 / HTTP 500)."""
    from gpuplan.search import recommend
    text = _error(recommend, {"model": "gpt2", "train": {"micro_batch": 0, "tokens": 1e9}})
    assert "train.micro_batch" in text
    text = _error(recommend, {"model": "gpt2", "constraints": {"min_headroom": 2}})
    assert "constraints.min_headroom" in text


def test_partial_from_scenario_and_in_place_validation():
    scn = scenario_from_dict({**BASE, "constraints": {"budget_usd": 100}})
    data = _partial(scn)
    assert data["hardware"]["gpu"] == "h100-sxm" and data["constraints"] == {"budget_usd": 100.0}
    raw = {"model": "gpt2", "train": {"tokens": "2.0e9", "method": ["lora", "lora"], "seq_len": 1024}}
    _validate_fixed(raw)
    assert raw["train"] == {"tokens": 2e9, "method": ["lora"], "seq_len": 1024}


def test_recommend_refuses_a_fixed_length_past_the_context():
    from gpuplan.search import recommend
    text = _error(recommend, {"model": "llama-2-7b", "task": "finetune", "train": {"seq_len": 8192}})
    assert "train.seq_len = 8,192" in text and "4,096" in text and "allow_longer_context" in text
    text = _error(recommend, {"model": "gpt2"})
    assert "train.seq_len (default) = 2,048" in text and "1,024 learned position" in text
    rec = recommend({"model": "llama-2-7b", "task": "finetune", "train": {"seq_len": 8192, "allow_longer_context": True}},
                    gpus=["h100-sxm"], top=1, progress=False)
    assert rec is not None


def test_check_objective_for_callers_outside_the_schema():
    from gpuplan.scenario import check_objective
    assert check_objective("weighted:cost=0.7,time=0.3") == "weighted:cost=0.7,time=0.3"
    for bad in ("weighted:cost=nan", "weighted:cost=inf,time=1", {"cost": -1}, {"cost": 0, "time": 0}, {"cost": "x"}):
        text = _error(check_objective, bad)
        assert text.startswith("objective ")


# ---- property: any value in any field is either accepted within its range or an InputError -----------------

def _field_names():
    from gpuplan.scenario import Cost, Hardware, Infer, Parallel, Train
    from gpuplan.scenario import Constraints as C
    return [(sec, name) for sec, cls in (("hardware", Hardware), ("parallel", Parallel), ("train", Train),
                                         ("infer", Infer), ("cost", Cost), ("constraints", C))
            for name in cls.model_fields]


def test_any_value_in_any_field_is_accepted_in_range_or_refused_cleanly():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    values = st.one_of(st.integers(min_value=-10 ** 420, max_value=10 ** 420), st.floats(allow_nan=True),
                       st.text(max_size=20), st.none(), st.booleans(), st.lists(st.integers(), max_size=3),
                       st.just("9" * 400), st.just("1e400"), st.just("auto"))

    @settings(max_examples=400)
    @given(st.sampled_from(_field_names()), values, st.sampled_from(["train", "infer"]))
    def check(field, value, task):
        sec, name = field
        hw = {"gpu": "h100-sxm"}
        data = {"model": "llama-3.1-8b", "task": task, "hardware": hw}
        data[sec] = {**data.get(sec, {}), name: value}
        for fn in (scenario_from_dict, partial_from_dict):
            try:
                fn(data)
            except InputError as err:
                assert len(str(err)) < 2000
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):   # the largest bound is 1e16
                assert math.isfinite(value) and abs(value) <= 1e16, (field, value)
    check()

"""Scenario files: validation messages name the field and the fix; defaults fill the layout."""
import json

import pytest

from gpuplan.errors import InputError
from gpuplan.scenario import load_scenario, scenario_from_dict

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 8}}


def test_defaults_fill_dp_and_sections():
    s = scenario_from_dict(BASE)
    assert s.dp == 8 and s.parallel.tp == 1 and s.train is not None and s.infer is None
    s = scenario_from_dict({**BASE, "parallel": {"tp": 2, "pp": 2}})
    assert s.dp == 2
    s = scenario_from_dict({**BASE, "task": "infer"})
    assert s.infer is not None and s.infer.engine == "vllm"


@pytest.mark.parametrize("bad, field", [
    ({**BASE, "hardware": {"gpu": "h100-sxm", "count": 0}}, "hardware.count"),
    ({**BASE, "hardware": {"gpu": "h100-sxm", "count": -4}}, "hardware.count"),
    ({**BASE, "train": {"seq_len": 0}}, "train.seq_len"),
    ({**BASE, "train": {"micro_batch": -1}}, "train.micro_batch"),
    ({**BASE, "task": "pretrain"}, "task"),
    ({**BASE, "trian": {}}, "trian"),
    ({**BASE, "parallel": {"tp": 3}}, "tp"),
    ({**BASE, "parallel": {"dp": 3}}, "dp"),
    ({"hardware": {"gpu": "h100-sxm"}}, "model"),
    ({**BASE, "train": {"optimizer": "adam"}}, "train.optimizer"),
])
def test_bad_fields_named(bad, field):
    with pytest.raises(InputError) as err:
        scenario_from_dict(bad)
    assert field in str(err.value) and "Fix:" in str(err.value)


def test_yaml_and_json_files(tmp_path):
    y = tmp_path / "s.yaml"
    y.write_text("model: llama-3.1-8b\nhardware:\n  gpu: h100-sxm\n  count: 2\n")
    j = tmp_path / "s.json"
    j.write_text(json.dumps(BASE))
    assert load_scenario(y).dp == 2 and load_scenario(j).dp == 8


@pytest.mark.parametrize("text, why", [("model: [unclosed\n", "not valid YAML"), ("", "is empty"),
                                       ("- a\n- b\n", "must be a mapping")])
def test_bad_yaml(tmp_path, text, why):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(InputError, match=why):
        load_scenario(p)


def test_bad_json_and_missing(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"model": ')
    with pytest.raises(InputError, match="not valid JSON"):
        load_scenario(p)
    with pytest.raises(InputError, match="does not exist"):
        load_scenario(tmp_path / "nope.yaml")


def test_replace_revalidates():
    s = scenario_from_dict({**BASE, "parallel": {"tp": 2}})
    t = s.replace(hardware={"count": 16})
    assert t.dp == 8 and t.parallel.tp == 2
    with pytest.raises(InputError):
        s.replace(train={"seq_len": -5})


def test_expert_parallel_groups_differ_for_training_and_serving():
    """Training places experts over dp*cp ranks (Megatron); serving over dp*tp (vLLM EP inside TP,
    or attention-DP 'DEP')."""
    base = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "count": 2}}
    assert scenario_from_dict({**base, "task": "infer", "parallel": {"tp": 2, "ep": 2}}).parallel.ep == 2
    with pytest.raises(InputError, match="dp\\*cp"):
        scenario_from_dict({**base, "task": "train", "parallel": {"tp": 2, "ep": 2}})


@pytest.mark.parametrize("field,value,engine,weights,named", [
    ("trtllm_backend", "tensorrt", "vllm", "bf16", "trtllm_backend"),
    ("llm_int8_threshold", 0.0, "hf", "bf16", "llm_int8_threshold"),
    ("llm_int8_threshold", 0.0, "vllm", "int8", "llm_int8_threshold"),
    ("chat_template_parse", True, "sglang", "bf16", "chat_template_parse"),
    ("vllm_v0", True, "trtllm", "bf16", "vllm_v0"),
])
def test_engine_specific_infer_fields_are_refused_elsewhere(field, value, engine, weights, named):
    """A field that describes one engine's (or one weight format's) machinery is refused on another, naming the field
    and the fix, instead of being ignored."""
    d = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
         "infer": {"engine": engine, "weights": weights, "prompt_len": 128, "output_len": 128, field: value}}
    with pytest.raises(InputError) as e:
        scenario_from_dict(d, "t")
    assert named in str(e.value) and "leave" in str(e.value)


def test_engine_specific_infer_fields_accepted_where_they_apply():
    d = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
         "infer": {"engine": "hf", "weights": "int8", "prompt_len": 128, "output_len": 128, "llm_int8_threshold": 0.0}}
    assert scenario_from_dict(d, "t").infer.llm_int8_threshold == 0.0
    d["infer"] = {"engine": "trtllm", "weights": "fp8", "prompt_len": 128, "output_len": 128,
                  "trtllm_backend": "tensorrt"}
    assert scenario_from_dict(d, "t").infer.trtllm_backend == "tensorrt"

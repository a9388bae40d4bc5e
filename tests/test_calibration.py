"""estimate/calibration.py: the speed engine's factors are frozen, complete and come only from the JSON."""
import ast
import copy
import inspect
import json
from pathlib import Path

import pytest

from gpuplan.estimate import calibration, speed
from gpuplan.estimate.calibration import Calibration, CalibrationKeyError, load_efficiency, thaw
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

DATA = Path(calibration.__file__).parent / "data" / "efficiency.json"


def test_packaged_factors_equal_the_json_file():
    assert thaw(load_efficiency()) == json.loads(DATA.read_text(encoding="utf-8"))


def test_frozen_at_every_level():
    P = load_efficiency()
    with pytest.raises(TypeError):
        P["roofline_sharpness"] = 1.0                       # type: ignore[index]
    with pytest.raises(TypeError):
        P["matmul"]["hopper"]["bf16"] = 1.0                 # type: ignore[index]
    with pytest.raises(AttributeError):
        P["engines"]["default"].update({"max_batch": 1})    # type: ignore[attr-defined]
    assert isinstance(P["provenance"]["fit_rows"], tuple)


def test_deepcopy_and_thaw_give_mutable_copies_that_leave_the_original_alone():
    P = load_efficiency()
    before = P["matmul"]["hopper"]["bf16"]
    Q = copy.deepcopy(dict(P))                # what estimate/profile.py does
    assert type(Q["matmul"]) is dict and type(Q["matmul"]["hopper"]) is dict
    Q["matmul"]["hopper"]["bf16"] = 0.1
    Q.setdefault("memory", {})["hopper"] = 0.5
    Q["power_flops_per_watt"].pop("hopper", None)
    R = P.thaw()
    R["engines"]["vllm"]["max_batch"] = 1
    assert P["matmul"]["hopper"]["bf16"] == before
    assert "hopper" in P["power_flops_per_watt"] and P["engines"]["vllm"]["max_batch"] != 1


def test_profile_params_still_work_on_the_frozen_factors():
    from types import SimpleNamespace

    from gpuplan.estimate.profile import params_with_profile
    g = get_gpu("h100-sxm")
    prof = SimpleNamespace(gpu_id=g.id, matmul_flops_per_s={"bf16": 700e12}, memory_bandwidth_bytes_per_s=3.0e12,
                           comm_bus_bandwidth_bytes_per_s={}, gpu_count=1, created="2026-01-01")
    P = params_with_profile(load_efficiency(), prof, g)
    peaks = g.peak_flops_per_s
    peak = peaks["fp16_fp32acc"] if "fp16_fp32acc" in peaks else peaks["bf16"]
    assert P["matmul"][g.family]["bf16"] == pytest.approx(700e12 / peak)
    assert P["memory"][g.family] == pytest.approx(3.0e12 / g.mem_bandwidth_bytes_per_s)
    assert load_efficiency()["matmul"][g.family]["bf16"] != P["matmul"][g.family]["bf16"]
    assert g.family not in load_efficiency()["memory"]


def test_override_is_deep_merged_and_frozen():
    P = load_efficiency({"engines": {"vllm": {"prefill_chunk_tokens": 512}}, "roofline_sharpness": 4.0})
    assert P["engines"]["vllm"]["prefill_chunk_tokens"] == 512
    assert P["engines"]["vllm"]["max_batch"] == load_efficiency()["engines"]["vllm"]["max_batch"]
    assert P["roofline_sharpness"] == 4.0 and load_efficiency()["roofline_sharpness"] != 4.0
    with pytest.raises(TypeError):
        P["roofline_sharpness"] = 1.0                        # type: ignore[index]


def test_missing_key_names_the_key_and_the_file():
    with pytest.raises(CalibrationKeyError) as err:
        load_efficiency()["engines"]["default"]["no_such_factor"]
    msg = str(err.value)
    assert "engines.default.no_such_factor" in msg and "efficiency.json" in msg
    assert isinstance(err.value, KeyError)                   # Mapping.get and `in` keep working
    assert load_efficiency()["engines"].get("no_such_engine") is None


def _infer():
    # tp 2 (reads the scale-up link factor), hf engine (no prompt chunks: reads max_num_tokens)
    scn = scenario_from_dict({"model": "llama-3.2-1b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
                              "parallel": {"tp": 2}, "infer": {"engine": "hf", "concurrency": 4}})
    return scn, get_model("llama-3.2-1b"), get_gpu("h100-sxm")


@pytest.mark.parametrize("path", [("roofline_sharpness",), ("engines", "default", "max_num_tokens"),
                                  ("engines", "default", "fp16_accumulate"), ("comm", "scale_up"),
                                  ("memory", "default"), ("attention",), ("engines", "hf")])
def test_speed_engine_has_no_inline_default_for(path):
    d = load_efficiency().thaw()
    node = d
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    P = Calibration(d, source="broken.json")
    scn, m, g = _infer()
    with pytest.raises(CalibrationKeyError) as err:
        speed.infer_performance(scn, m, g, params=P, kv_capacity_tokens=1e6)
    # engine keys are reported under the merged engine profile (engines.hf.<key>)
    want = ".".join(path) if path[0] != "engines" else f"engines.hf.{path[-1]}" if len(path) == 3 else "hf"
    assert want in str(err.value) and "broken.json" in str(err.value)


def test_training_reads_overlap_and_loss_factors_from_the_file():
    d = load_efficiency().thaw()
    del d["overlap"]["fsdp"]
    scn = scenario_from_dict({"model": "llama-3.2-1b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                              "parallel": {"dp": 8, "zero": 3}, "train": {"seq_len": 1024, "global_batch": 8}})
    with pytest.raises(CalibrationKeyError, match="overlap.fsdp"):
        speed.train_performance(scn, get_model("llama-3.2-1b"), get_gpu("h100-sxm"), params=Calibration(d))


def test_equal_to_plain_dict_and_unhashable():
    P = load_efficiency()
    assert P == P.thaw() and P["comm"] == dict(P["comm"])
    with pytest.raises(TypeError):
        hash(P)


def test_speed_source_has_no_numeric_get_defaults_on_calibration_keys():
    """No `.get("key", 0.7)` style default for a key the JSON defines (those shadowed the fit)."""
    keys = set()

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                keys.add(k)
                walk(x)
    walk(json.loads(DATA.read_text(encoding="utf-8")))
    tree = ast.parse(inspect.getsource(speed))
    bad = [n.lineno for n in ast.walk(tree)
           if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
           and len(n.args) == 2 and isinstance(n.args[0], ast.Constant) and n.args[0].value in keys]
    assert bad == []
    fam_calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "_fam" and len(n.args) > 2]
    assert fam_calls == []


def test_family_entry_falls_back_to_default_row():
    P = load_efficiency()
    assert calibration.family_entry(P["attention"], "hopper") == P["attention"]["hopper"]
    assert calibration.family_entry(P["attention"], "no-such-family") == P["attention"]["default"]
    with pytest.raises(CalibrationKeyError):
        calibration.family_entry(Calibration({"hopper": 0.5}), "ampere")

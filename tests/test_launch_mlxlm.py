"""mlx-lm launch files (issue 20): every key of mlx_lora.yaml is an argument dest or a CONFIG_DEFAULTS key of mlx-lm
v0.31.3's lora.py, every flag of launch.sh an option of its lora.py / convert.py parser (read from the source by
scripts/engine_facts_mlxlm.py into launch/data/engine_flags.csv), choices within theirs; the mapping checked by
hand; refusals. (mlx-lm's own parsers, run without mlx, accepted these files: scripts/check_mlxlm_launch.py.)"""
from __future__ import annotations

import shlex

import pytest
import yaml

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import scenario_from_dict


def _scn(hardware=None, **train):
    base = {"method": "qlora", "seq_len": 2048, "micro_batch": 2, "global_batch": 8, "recompute": "full",
            "tokens": 1e7}
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune",
                               "hardware": hardware or {"gpu": "h100-sxm", "count": 1}, "train": {**base, **train}})


def _files(scn):
    return launch_files(scn, "mlx-lm")


def _cfg(scn):
    return yaml.safe_load(_files(scn)["mlx_lora.yaml"])


def _commands(scn):
    return [shlex.split(line.split("|| ", 1)[-1]) for line in _files(scn)["launch.sh"].splitlines()
            if "mlx_lm." in line and not line.startswith("#")]


CASES = {
    "qlora": _scn(),
    "lora-targets-fp16": _scn(method="lora", precision="fp16", lora_alpha=32, lora_targets=["q_proj", "v_proj", "down_proj"]),
    "full-sgd": _scn(method="full", optimizer="sgd", recompute="none"),
}


@pytest.mark.parametrize("name", CASES)
def test_yaml_keys_and_choices_are_mlx_lm_arguments(name):
    flags = engine_flags("mlx-lm")
    cfg = _cfg(CASES[name])
    assert [k for k in cfg if k not in flags] == []
    for k, v in cfg.items():
        if flags[k].kind == "choice":
            assert str(v) in flags[k].choices, (k, v)


@pytest.mark.parametrize("name", CASES)
def test_command_flags_are_parser_options(name):
    tables = {"mlx_lm.lora": engine_flags("mlx-lm"), "mlx_lm.convert": engine_flags("mlx-lm-convert")}
    for cmd in _commands(CASES[name]):
        flags = tables[cmd[0]]
        opts = [a for a in cmd[1:] if a.startswith("-")]
        assert [o for o in opts if o not in flags] == []
        for i, a in enumerate(cmd):
            if a in flags and flags[a].kind == "choice":
                assert cmd[i + 1] in flags[a].choices


def test_qlora_mapping_by_hand():
    cfg = _cfg(CASES["qlora"])
    # 8 sequences per step, 2 per micro-step on one device -> 4 accumulation steps; 1e7 tokens / (8 x 2048) ->
    # 611 optimizer steps; mlx counts iters in micro-steps: 611 x 4
    assert (cfg["batch_size"], cfg["grad_accumulation_steps"], cfg["iters"]) == (2, 4, 2444)
    assert cfg["fine_tune_type"] == "lora" and cfg["num_layers"] == -1 and cfg["grad_checkpoint"] is True
    assert cfg["model"] == "mlx_model_q4" and cfg["max_seq_length"] == 2048
    # all-linear: no keys (mlx adapts every Linear of a layer); lora_alpha unset: mlx's scale 20
    assert cfg["lora_parameters"] == {"rank": 16, "scale": 20.0, "dropout": 0.0}
    convert = _commands(CASES["qlora"])[0]
    assert convert[:5] == ["mlx_lm.convert", "--hf-path", "meta-llama/Llama-3.1-8B", "--mlx-path", "mlx_model_q4"]
    assert convert[5:] == ["-q", "--q-bits", "4", "--q-group-size", "64"]


def test_lora_targets_scale_and_dtype_by_hand():
    cfg = _cfg(CASES["lora-targets-fp16"])
    lp = cfg["lora_parameters"]
    assert lp["keys"] == ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]
    assert lp["scale"] == 32 / 16                      # alpha / rank, as peft scales
    assert _commands(CASES["lora-targets-fp16"])[0][-2:] == ["--dtype", "float16"]


def test_full_bf16_loads_the_hub_weights_without_converting():
    cmds = _commands(CASES["full-sgd"])
    assert [c[0] for c in cmds] == ["mlx_lm.lora"]
    cfg = _cfg(CASES["full-sgd"])
    assert cfg["model"] == "meta-llama/Llama-3.1-8B" and cfg["fine_tune_type"] == "full"
    assert "lora_parameters" not in cfg and cfg["optimizer"] == "sgd" and cfg["grad_checkpoint"] is False


def test_alias_names_the_engine():
    assert launch_files(CASES["qlora"], "mlx") == _files(CASES["qlora"])


@pytest.mark.parametrize("scn,what", [
    (_scn(objective="dpo"), "train.objective 'dpo'"),
    (_scn(optimizer="adamw-8bit"), "train.optimizer 'adamw-8bit'"),
    (_scn(recompute="selective"), "recompute 'selective'"),
    (_scn(method="lora", lora_targets=["c_attn"]), "lora_targets c_attn"),
    (_scn(hardware={"gpu": "h100-sxm", "count": 2}, global_batch=8), "hardware.count 2"),
])
def test_refusals_name_what_mlx_lm_cannot_run(scn, what):
    with pytest.raises(UnsupportedError) as err:
        _files(scn)
    assert what in str(err.value)

"""LLaMA-Factory launch files (issue 20): every key of llamafactory.yaml is a field of LLaMA-Factory v0.9.5's
argument dataclasses (read by scripts/engine_facts_llamafactory.py into launch/data/engine_flags.csv) or a
transformers TrainingArguments field, choices within the dataclasses' Literals; the mapping checked by hand; a
snapshot; refusals. (LLaMA-Factory's own parser accepted these files: scripts/check_llamafactory_launch.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest
from launch_snapshots import check_snapshot
import yaml

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "tests" / "snapshots" / "launch_llamafactory"


def _dpo(**train):
    scn = load_scenario(str(ROOT / "examples" / "dpo-lora-8b.yaml"))
    return scn.replace(train=train) if train else scn


def _cfg(scn):
    return yaml.safe_load(launch_files(scn, "llama-factory")["llamafactory.yaml"])


CASES = {
    "dpo-lora": _dpo(),
    "ipo-lora": _dpo(objective="ipo"),
    "sft-qlora": _dpo(objective="sft", method="qlora"),
    "orpo-full": _dpo(objective="orpo", method="full"),
    "reward-lora": _dpo(objective="reward"),
    "kto-lora": _dpo(objective="kto"),
}


@pytest.mark.parametrize("name", CASES)
def test_keys_are_llamafactory_or_training_arguments_fields(name):
    lf, tf = engine_flags("llama-factory"), engine_flags("transformers")
    cfg = _cfg(CASES[name])
    unknown = [k for k in cfg if k not in lf and (k not in tf or tf[k].kind == "deprecated")]
    assert unknown == []
    for k, v in cfg.items():
        if k in lf and lf[k].kind == "choice":
            assert str(v) in lf[k].choices, (k, v)


def test_dpo_lora_mapping_by_hand():
    cfg = _cfg(_dpo())
    # examples/dpo-lora-8b.yaml: 2 pairs per micro-step, 32 per step on one GPU -> 16 accumulation steps
    assert (cfg["stage"], cfg["pref_loss"], cfg["finetuning_type"]) == ("dpo", "sigmoid", "lora")
    assert (cfg["lora_rank"], cfg["lora_alpha"], cfg["lora_target"]) == (16, 32, "all")
    assert (cfg["per_device_train_batch_size"], cfg["gradient_accumulation_steps"]) == (2, 16)
    assert cfg["cutoff_len"] == 2048 and cfg["disable_gradient_checkpointing"] is False
    assert "quantization_bit" not in cfg and "deepspeed" not in cfg


def test_objectives_and_methods_map_to_stages():
    assert _cfg(CASES["ipo-lora"])["pref_loss"] == "ipo"
    q = _cfg(CASES["sft-qlora"])
    assert (q["stage"], q["finetuning_type"], q["quantization_bit"], q["quantization_method"]) == ("sft", "lora", 4, "bnb")
    assert _cfg(CASES["orpo-full"])["finetuning_type"] == "full"
    assert _cfg(CASES["reward-lora"])["stage"] == "rm" and _cfg(CASES["kto-lora"])["stage"] == "kto"
    z3 = _cfg(_dpo(method="full").replace(hardware={"count": 8}, parallel={"zero": 3}))
    assert z3["deepspeed"] == "examples/deepspeed/ds_z3_config.json"


def test_multi_gpu_launch_forces_torchrun():
    sh = launch_files(_dpo(method="full").replace(hardware={"count": 8}, parallel={"zero": 3}),
                      "llama-factory")["launch.sh"]
    assert "FORCE_TORCHRUN=1 llamafactory-cli train" in sh


def test_snapshot():
    files = launch_files(_dpo(), "llama-factory")
    text = "".join(f"==> {n} <==\n{b}\n" for n, b in sorted(files.items()))
    path = SNAP / "dpo-lora-8b__llama-factory.txt"
    check_snapshot(text, path)


@pytest.mark.parametrize("change, what", [
    ({"objective": "distill", "teacher": "llama-3.1-70b"}, "objective"),
    ({"reference": "precomputed"}, "precomputed"),
])
def test_refuses_what_it_cannot_write(change, what):
    with pytest.raises(UnsupportedError) as err:
        launch_files(_dpo(**change), "llama-factory")
    assert what in str(err.value)

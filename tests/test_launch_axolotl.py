"""Axolotl launch files (issue 20): every key of axolotl.yaml is a non-deprecated field of Axolotl v0.18.0's
config schema (read by scripts/engine_facts_axolotl.py into launch/data/engine_flags.csv), `rl` one of its
RLType values; the mapping checked by hand; a snapshot; refusals. (Axolotl needs a CUDA stack to import, so
its own validator was not run.)"""
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
SNAP = ROOT / "tests" / "snapshots" / "launch_axolotl"
RL_TYPES = {"dpo", "gdpo", "grpo", "ipo", "orpo", "kto", "simpo", "ebft"}   # schemas/enums.py RLType @v0.18.0


def _dpo(**train):
    scn = load_scenario(str(ROOT / "examples" / "dpo-lora-8b.yaml"))
    return scn.replace(train=train) if train else scn


def _cfg(scn):
    return yaml.safe_load(launch_files(scn, "axolotl")["axolotl.yaml"])


CASES = {"dpo-lora": _dpo(), "sft-qlora": _dpo(objective="sft", method="qlora"),
         "orpo-full-z3": _dpo(objective="orpo", method="full").replace(hardware={"count": 8}, parallel={"zero": 3}),
         "kto-offload-gc": _dpo(objective="kto", activation_offload=True)}


@pytest.mark.parametrize("name", CASES)
def test_keys_are_axolotl_schema_fields(name):
    table = engine_flags("axolotl")
    cfg = _cfg(CASES[name])
    assert [k for k in cfg if k not in table or table[k].kind == "deprecated"] == []
    assert cfg.get("rl", "dpo") in RL_TYPES


def test_dpo_lora_mapping_by_hand():
    cfg = _cfg(_dpo())
    # examples/dpo-lora-8b.yaml: 2 pairs per micro-step, 32 per step on one GPU -> 16 accumulation steps
    assert (cfg["rl"], cfg["adapter"], cfg["lora_r"], cfg["lora_alpha"]) == ("dpo", "lora", 16, 32)
    assert cfg["lora_target_linear"] is True and "load_in_4bit" not in cfg
    assert (cfg["micro_batch_size"], cfg["gradient_accumulation_steps"], cfg["sequence_len"]) == (2, 16, 2048)
    assert cfg["gradient_checkpointing"] is True and cfg["attn_implementation"] == "flash_attention_2"


def test_qlora_offload_and_zero():
    q = _cfg(CASES["sft-qlora"])
    assert (q["adapter"], q["load_in_4bit"]) == ("qlora", True) and "rl" not in q
    assert _cfg(CASES["kto-offload-gc"])["gradient_checkpointing"] == "offload"
    assert _cfg(CASES["orpo-full-z3"])["deepspeed"] == "deepspeed_configs/zero3.json"


def test_snapshot():
    files = launch_files(_dpo(), "axolotl")
    text = "".join(f"==> {n} <==\n{b}\n" for n, b in sorted(files.items()))
    path = SNAP / "dpo-lora-8b__axolotl.txt"
    check_snapshot(text, path)


@pytest.mark.parametrize("change, what", [
    ({"objective": "distill", "teacher": "llama-3.1-70b"}, "objective"),
    ({"loss": "cce"}, "loss"),
])
def test_refuses_what_it_cannot_write(change, what):
    with pytest.raises(UnsupportedError) as err:
        launch_files(_dpo(**change), "axolotl")
    assert what in str(err.value)

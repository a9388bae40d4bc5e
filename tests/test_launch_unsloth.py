"""Unsloth launch files (issue 20): every keyword of from_pretrained / get_peft_model in unsloth_run.json is a
parameter of Unsloth's FastLanguageModel functions at v0.1.801-beta (read by scripts/engine_facts_unsloth.py), every
trainer-config key an SFTConfig / DPOConfig field of TRL v1.9.0 or a TrainingArguments field; the mapping by hand;
the script compiles; refusals. (Unsloth needs a GPU to import, so its functions were not called here.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _scn(**train):
    base = {"model": "llama-3.1-8b", "task": "finetune", "tool": "unsloth", "hardware": {"gpu": "rtx-4090", "count": 1},
            "train": {"seq_len": 8192, "lora_rank": 32, "micro_batch": 1, "global_batch": 8, **train}}
    return scenario_from_dict(base)


def _run(scn):
    run = json.loads(launch_files(scn, "unsloth")["unsloth_run.json"])
    run.pop("_gpuplan")
    return run


@pytest.mark.parametrize("train", [{}, {"objective": "dpo"}, {"method": "full", "recompute": "full"}])
def test_keywords_are_unsloth_parameters_and_trl_fields(train):
    run = _run(_scn(**train))
    u = engine_flags("unsloth")
    assert [k for k in run["from_pretrained"] if f"from_pretrained.{k}" not in u] == []
    assert [k for k in (run["get_peft_model"] or {}) if f"get_peft_model.{k}" not in u] == []
    trl, tf = engine_flags(f"trl-{run['trainer']}"), engine_flags("transformers")
    assert [k for k in run["config"] if k not in trl and (k not in tf or tf[k].kind == "deprecated")] == []


def test_unsloth_tool_defaults_by_hand():
    run = _run(_scn())
    # tool: unsloth fills method qlora, recompute full + activation_offload (its offloaded checkpointing)
    assert run["from_pretrained"]["load_in_4bit"] is True and run["from_pretrained"]["max_seq_length"] == 8192
    assert run["get_peft_model"]["use_gradient_checkpointing"] == "unsloth"
    assert run["get_peft_model"]["r"] == 32 and len(run["get_peft_model"]["target_modules"]) == 7
    assert (run["trainer"], run["config"]["gradient_accumulation_steps"]) == ("sft", 8)


def test_script_compiles_and_imports_unsloth_first():
    text = launch_files(_scn(), "unsloth")["train_unsloth.py"]
    compile(text, "train_unsloth.py", "exec")
    code = [ln for ln in text.splitlines() if ln.startswith(("import", "from"))]
    assert code[0] == "from unsloth import FastLanguageModel  # first: Unsloth patches transformers and TRL on import"


@pytest.mark.parametrize("change, what", [({"objective": "grpo", "rl": {"prompts_per_step": 8, "group_size": 4,
                                                                          "prompt_len": 256, "max_new_tokens": 256}},
                                           "objective")])
def test_refuses_what_it_cannot_write(change, what):
    with pytest.raises(UnsupportedError) as err:
        launch_files(_scn(**change), "unsloth")
    assert what in str(err.value)


def test_refuses_more_than_one_gpu():
    scn = load_scenario(str(ROOT / "examples" / "dpo-full-8b.yaml"))
    with pytest.raises(UnsupportedError) as err:
        launch_files(scn, "unsloth")
    assert "one GPU" in str(err.value)

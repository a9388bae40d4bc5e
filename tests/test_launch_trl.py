"""TRL launch files (issue 20): every key of trl_config.json is a field of TRL v1.9.0's DPOConfig / GRPOConfig
(read from TRL's source by scripts/engine_facts_trl.py into launch/data/engine_flags.csv) or a current
transformers TrainingArguments field; the mapping checked by hand. When trl is installed, the config
dataclass itself must accept the file."""
from __future__ import annotations

import json

import pytest

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import load_scenario


def _cfg(files):
    return {k: v for k, v in json.loads(files["trl_config.json"]).items() if k != "_gpuplan"}


def _unknown(cfg, trl_engine):
    trl, tf = engine_flags(trl_engine), engine_flags("transformers")
    return [k for k in cfg if k not in trl and (k not in tf or tf[k].kind == "deprecated")]


def test_dpo_config_keys_are_trl_or_training_arguments_fields():
    files = launch_files(load_scenario("examples/dpo-lora-8b.yaml"), "trl")
    cfg = _cfg(files)
    assert _unknown(cfg, "trl-dpo") == []
    assert cfg["loss_type"] == ["sigmoid"] and cfg["precompute_ref_log_probs"] is False
    assert "lora_config.json" in files


def test_grpo_colocated_config_by_hand():
    scn = load_scenario("examples/grpo-7b-colocated.yaml").replace(parallel={"zero": 0})   # plain DDP here
    cfg = _cfg(launch_files(scn, "trl"))
    assert _unknown(cfg, "trl-grpo") == []
    # 64 prompts x 8 = 512 sequences; micro_batch 4 on 8 GPUs -> 512 / 32 = 16 accumulation steps
    assert cfg["gradient_accumulation_steps"] == 16
    assert (cfg["num_generations"], cfg["max_completion_length"]) == (8, 1024)
    assert cfg["vllm_mode"] == "colocate" and cfg["vllm_enable_sleep_mode"] is True
    assert cfg["vllm_gpu_memory_utilization"] == 0.5 and cfg["beta"] == 0.001


def test_grpo_split_starts_a_vllm_server_on_the_rollout_gpus():
    scn = load_scenario("examples/grpo-7b-split.yaml").replace(parallel={"zero": 0})
    files = launch_files(scn, "trl")
    cfg = _cfg(files)
    assert cfg["vllm_mode"] == "server"
    # 512 sequences over micro_batch 4 x 4 training GPUs
    assert cfg["gradient_accumulation_steps"] == 32
    sh = files["launch.sh"]
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve" in sh and "CUDA_VISIBLE_DEVICES=4,5,6,7 accelerate" in sh


def test_refuses_what_it_cannot_write():
    with pytest.raises(UnsupportedError):
        launch_files(load_scenario("examples/grpo-7b-colocated.yaml"), "trl")      # zero 3
    with pytest.raises(UnsupportedError):
        launch_files(load_scenario("examples/dpo-lora-8b.yaml").replace(train={"objective": "kto"}), "trl")


def test_trl_dataclass_accepts_the_config_when_installed():
    trl = pytest.importorskip("trl")
    cfg = _cfg(launch_files(load_scenario("examples/dpo-lora-8b.yaml"), "trl"))
    trl.DPOConfig(output_dir=cfg.pop("output_dir"), **cfg)

"""verl launch file (issue 20): every override key of run_verl.sh is a key of verl v0.7.0's composed trainer
config (verl/trainer/config/_generated_ppo_trainer.yaml, read by scripts/engine_facts_verl.py into
launch/data/engine_flags.csv); the mapping checked by hand; a snapshot of the GRPO example; refusals."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from launch_snapshots import check_snapshot

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "tests" / "snapshots" / "launch_verl" / "grpo-7b-colocated__verl.txt"


def _overrides(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+([a-z_][\w.]*)=(\S+?)(?: \\| \"\$@\")?$", text, flags=re.M))


def _grpo(**train):
    scn = load_scenario(str(ROOT / "examples" / "grpo-7b-colocated.yaml"))
    return scn.replace(train=train) if train else scn


def test_every_override_is_a_key_of_verls_trainer_config():
    table = engine_flags("verl")
    assert len(table) > 400                     # the whole composed config, not a hand list
    for scn in (_grpo(), _grpo(method="lora", lora_rank=32), _grpo(objective="ppo")):
        ov = _overrides(launch_files(scn, "verl")["run_verl.sh"])
        assert ov and [k for k in ov if k not in table] == []


def test_grpo_mapping_by_hand():
    ov = _overrides(launch_files(_grpo(), "verl")["run_verl.sh"])
    # examples/grpo-7b-colocated.yaml: 64 prompts x 8 responses, 512 + 1024 tokens, micro-batch 4, 8 GPUs, vLLM at 0.5
    assert ov["algorithm.adv_estimator"] == "grpo"
    assert (ov["data.train_batch_size"], ov["actor_rollout_ref.actor.ppo_mini_batch_size"]) == ("64", "64")
    assert (ov["data.max_prompt_length"], ov["data.max_response_length"]) == ("512", "1024")
    assert ov["actor_rollout_ref.rollout.n"] == "8" and ov["actor_rollout_ref.rollout.name"] == "vllm"
    assert ov["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.5"
    assert ov["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    assert ov["actor_rollout_ref.actor.use_kl_loss"] == "True" and ov["actor_rollout_ref.actor.kl_loss_coef"] == "0.001"
    assert (ov["trainer.n_gpus_per_node"], ov["trainer.nnodes"]) == ("8", "1")
    assert ov["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-7B"
    assert "critic.model.path" not in ov and "actor_rollout_ref.model.lora_rank" not in ov


def test_ppo_adds_the_critic_and_lora_its_rank():
    ov = _overrides(launch_files(_grpo(objective="ppo", rl={"prompts_per_step": 64, "group_size": 1,
                                                             "prompt_len": 512, "max_new_tokens": 1024}),
                                 "verl")["run_verl.sh"])
    assert ov["algorithm.adv_estimator"] == "gae" and ov["critic.model.path"] == "Qwen/Qwen2.5-7B"
    ov = _overrides(launch_files(_grpo(method="lora", lora_rank=32), "verl")["run_verl.sh"])
    assert (ov["actor_rollout_ref.model.lora_rank"], ov["actor_rollout_ref.model.lora_alpha"]) == ("32", "64")


def test_snapshot():
    text = launch_files(_grpo(), "verl")["run_verl.sh"]
    check_snapshot(text, SNAP)


@pytest.mark.parametrize("change, what", [
    ({"objective": "dpo", "rl": None}, "objective"),
    ({"method": "qlora"}, "qlora"),
    ({"micro_batch": 3}, "micro_batch 3"),
])
def test_refuses_what_it_cannot_write(change, what):
    with pytest.raises(UnsupportedError) as err:
        launch_files(_grpo(**change), "verl")
    assert what in str(err.value)


def test_split_placement_is_refused():
    split = load_scenario(str(ROOT / "examples" / "grpo-7b-split.yaml"))
    with pytest.raises(UnsupportedError) as err:
        launch_files(split, "verl")
    assert "split" in str(err.value)


def _rl_with(**extra):
    rl = load_scenario(str(ROOT / "examples" / "grpo-7b-colocated.yaml")).train.rl.model_dump()
    rl.update(extra)
    return _grpo(rl=rl)


def test_mini_batch_becomes_prompts_per_optimizer_step():
    # 128 sequences per optimizer step at 8 responses per prompt: verl's ppo_mini_batch_size 128 / 8 = 16 prompts
    ov = _overrides(launch_files(_rl_with(mini_batch=128), "verl")["run_verl.sh"])
    assert (ov["data.train_batch_size"], ov["actor_rollout_ref.actor.ppo_mini_batch_size"]) == ("64", "16")
    with pytest.raises(UnsupportedError) as err:     # 100 is not a whole number of prompts of 8
        launch_files(_rl_with(mini_batch=100), "verl")
    assert "mini_batch 100" in str(err.value)

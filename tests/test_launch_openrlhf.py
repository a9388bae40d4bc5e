"""OpenRLHF launch file (issue 20): every option of run_openrlhf.sh is one OpenRLHF v0.11.0's train_ppo_ray.py
parser defines (read by scripts/engine_facts_openrlhf.py into launch/data/engine_flags.csv), choices within its
lists, switches without values; the mapping checked by hand; a snapshot; refusals."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from launch_snapshots import check_snapshot

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "tests" / "snapshots" / "launch_openrlhf"


def _scn(name="grpo-7b-colocated", **train):
    scn = load_scenario(str(ROOT / "examples" / f"{name}.yaml"))
    return scn.replace(train=train) if train else scn


def _argv(scn) -> list[str]:
    text = re.sub(r" *\\\n *", " ", launch_files(scn, "openrlhf")["run_openrlhf.sh"])
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("python3 -m openrlhf.cli.train_ppo_ray"))
    return [a for a in shlex.split(line)[3:] if a != "$@"]


def _options(argv):
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


CASES = {"colocated": _scn(), "split": _scn("grpo-7b-split"),
         "ppo-lora": _scn(objective="ppo", method="lora", rl={"prompts_per_step": 64, "group_size": 1,
                                                               "prompt_len": 512, "max_new_tokens": 1024})}


@pytest.mark.parametrize("name", CASES)
def test_every_option_is_openrlhfs(name):
    table = engine_flags("openrlhf")
    assert len(table) > 100
    for opt, val in _options(_argv(CASES[name])).items():
        f = table.get(opt)
        assert f is not None, opt
        assert (val is True) == (f.kind == "bool"), opt          # switches take no value, others need one
        if f.kind == "choice":
            assert val in f.choices, (opt, val)


def test_colocated_grpo_by_hand():
    o = _options(_argv(CASES["colocated"]))
    # 64 prompts x 8 = 512 sequences per optimizer step; 8 GPUs, rollout TP 1 -> 8 vLLM engines
    assert (o["--rollout.batch_size"], o["--rollout.n_samples_per_prompt"], o["--train.batch_size"]) == ("64", "8", "512")
    assert o["--algo.advantage.estimator"] == "group_norm" and o["--vllm.num_engines"] == "8"
    assert o["--data.max_len"] == "1536" and o["--rollout.max_new_tokens"] == "1024"
    assert o["--train.colocate_all"] is True and o["--algo.kl.use_loss"] is True
    assert o["--ds.zero_stage"] == "3" and o["--actor.num_gpus_per_node"] == "8"


def test_split_places_engines_and_actor_apart():
    o = _options(_argv(CASES["split"]))
    assert "--train.colocate_all" not in o and o["--train.colocate_actor_ref"] is True
    assert (o["--vllm.num_engines"], o["--actor.num_gpus_per_node"]) == ("4", "4")


def test_ppo_has_a_critic_and_lora_a_rank():
    o = _options(_argv(CASES["ppo-lora"]))
    assert o["--algo.advantage.estimator"] == "gae" and o["--critic.model_name_or_path"] == "Qwen/Qwen2.5-7B"
    assert o["--ds.lora.rank"] == "16"


def test_snapshot():
    text = launch_files(CASES["colocated"], "openrlhf")["run_openrlhf.sh"]
    path = SNAP / "grpo-7b-colocated__openrlhf.txt"
    check_snapshot(text, path)


@pytest.mark.parametrize("change, what", [({"objective": "dpo", "rl": None}, "objective"),
                                          ({"method": "qlora"}, "qlora"),
                                          ({"micro_batch": 3}, "micro_batch 3")])
def test_refuses_what_it_cannot_write(change, what):
    with pytest.raises(UnsupportedError) as err:
        launch_files(_scn(**change), "openrlhf")
    assert what in str(err.value)

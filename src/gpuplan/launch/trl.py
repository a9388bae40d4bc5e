"""TRL launch files (issue 20): DPO / IPO (`DPOTrainer`) and GRPO (`GRPOTrainer`) on one node.

Written for TRL v1.9.0 (35def3ee): `trl_config.json` holds the DPOConfig / GRPOConfig keyword arguments (TRL's
own fields and transformers' TrainingArguments ones; launch/data/engine_flags.csv rows `trl-dpo`, `trl-grpo`
are read from trl/trainer/{dpo,grpo,base}_config.py at that tag by scripts/engine_facts_trl.py), `train_trl.py`
builds the trainer, `launch.sh` starts it. GRPO colocated runs vLLM inside the trainer (`vllm_mode: colocate`,
sleep mode on so the engine frees its memory while the trainer steps, as gpuplan's colocated model assumes);
split starts `trl vllm-serve` on the rollout GPUs and trains on the rest (`vllm_mode: server`).

What maps where: micro_batch -> per_device_train_batch_size; DPO: objective ipo -> loss_type ["ipo"], else
["sigmoid"]; seq_len -> max_length; reference precomputed -> precompute_ref_log_probs. GRPO: group_size ->
num_generations; max_new_tokens -> max_completion_length; the step's prompts x group sequences are one
optimizer step (gradient_accumulation_steps = prompts x group / (micro_batch x training GPUs), which TRL also
takes as steps_per_generation); rl.reference -> beta 0.001 (the value TRL's help cites from DeepSeek-R1;
TRL's default 0.0 loads no reference); rl.gpu_memory_utilization and rollout_tp -> vllm_* settings.
"""
from __future__ import annotations

from typing import Any

from ._common import Plan, hash_header, json_text, require_objective, require_training, unsupported
from ._train import hf_training_args, lora_config

TRL_VERSION = "v1.9.0 (35def3ee)"
GRPO_BETA_WITH_REFERENCE = 0.001

TRAIN_TRL_PY = '''
"""Run the plan's TRL trainer: python train_trl.py DATASET (a HF dataset id or a local .jsonl).

DPO needs `prompt`, `chosen`, `rejected` columns; GRPO needs `prompt`. Replace `reward` below with your
task's reward (the placeholder prefers answers near 200 characters)."""
import json
import sys

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer


def load(name):
    with open(name) as f:
        data = json.load(f)
    data.pop("_gpuplan", None)
    return data


def reward(completions, **kwargs):
    return [-abs(len(c if isinstance(c, str) else c[-1]["content"]) - 200) / 200 for c in completions]


def main():
    run, cfg = load("run.json"), load("trl_config.json")
    source = sys.argv[1]
    data = load_dataset("json", data_files=source, split="train") if source.endswith(".jsonl") else \\
        load_dataset(source, split="train")
    peft_config = None
    if run["method"] == "lora":
        from peft import LoraConfig
        peft_config = LoraConfig(**load("lora_config.json"))
    tokenizer = AutoTokenizer.from_pretrained(run["model"])
    model = AutoModelForCausalLM.from_pretrained(run["model"], dtype="auto")
    if run["objective"] == "grpo":
        from trl import GRPOConfig, GRPOTrainer
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(**cfg), train_dataset=data,
                              processing_class=tokenizer, peft_config=peft_config)
    else:
        from trl import DPOConfig, DPOTrainer
        trainer = DPOTrainer(model=model, args=DPOConfig(**cfg), train_dataset=data, processing_class=tokenizer,
                             peft_config=peft_config)
    trainer.train()


if __name__ == "__main__":
    main()
'''

_DROP = ("activation_checkpointing", "activation_checkpointing_kwargs", "remove_unused_columns")


def check(plan: Plan) -> None:
    require_training(plan)
    s, t, p = plan.s, plan.s.train, plan.s.parallel
    if t.objective not in ("dpo", "ipo", "grpo"):
        require_objective(plan, "this launcher writes TRL's DPOTrainer (dpo, ipo) and GRPOTrainer (grpo) configs.")
    if t.method == "qlora":
        raise unsupported(plan, "method 'qlora'", "the TRL script loads a 16-bit base (no bitsandbytes config).",
                          ("hf", "llama-factory", "axolotl", "unsloth"), "use method lora or full, or")
    if plan.multi_node:
        raise unsupported(plan, "more than one node", "the TRL launch here runs on one node.",
                          ("hf", "verl", "llama-factory", "axolotl"))
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.zero > 0 or p.offload != "none":
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}, zero={p.zero}, offload={p.offload}",
                          "the TRL launch here is plain data parallel (accelerate DDP); sharding needs an "
                          "accelerate FSDP/DeepSpeed config of your own.", ("verl", "openrlhf", "llama-factory", "axolotl"),
                          "set parallel to dp only, or")
    if t.precision not in ("bf16", "fp32"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "the TRL launch here trains in bf16 or fp32.",
                          ("hf", "openrlhf", "llama-factory", "axolotl"), "use bf16, or")
    if t.document_len is not None:
        # trl/trainer/dpo_trainer.py @35def3ee: `padding_free=True` "is temporarily unavailable after a refactor
        # and is currently disabled", the trainer warns and pads
        raise unsupported(plan, "train.document_len", f"TRL {TRL_VERSION}'s DPOTrainer switches padding_free off "
                          "(it pads every pair instead), so no packed rows would run.", (),
                          "remove train.document_len (each row one sequence).")


def _train_gpus(plan: Plan) -> int:
    rl = plan.s.train.rl
    return plan.count - rl.rollout_gpus if rl is not None and rl.placement == "split" else plan.count


def trl_config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    t = plan.s.train
    args = {k: v for k, v in hf_training_args(plan).items() if k not in _DROP}
    # TRL's _BaseConfig re-declares gradient_checkpointing (default True); it is TRL's field, not the alias
    args["gradient_checkpointing"] = t.recompute != "none"
    notes: list[str] = [f"written for TRL {TRL_VERSION}"]
    if t.objective in ("dpo", "ipo"):
        args["loss_type"] = ["ipo" if t.objective == "ipo" else "sigmoid"]
        args["max_length"] = t.seq_len
        args["precompute_ref_log_probs"] = t.reference == "precomputed"
        return args, notes
    rl = t.rl
    train_gpus = _train_gpus(plan)
    seqs = rl.prompts_per_step * rl.group_size
    per_step = t.micro_batch * train_gpus
    if seqs % per_step:
        raise unsupported(plan, f"{seqs} sequences per RL step over micro_batch {t.micro_batch} x {train_gpus} "
                          "training GPUs", "GRPOTrainer needs the generation batch to be a whole number of "
                          "micro-batches on every GPU.", (), "choose prompts_per_step x group_size divisible by "
                          f"{per_step}, or another micro_batch; or")
    args.update({
        "gradient_accumulation_steps": seqs // per_step,
        "num_generations": rl.group_size,
        "max_completion_length": rl.max_new_tokens,
        "beta": GRPO_BETA_WITH_REFERENCE if rl.reference else 0.0,
        "use_vllm": True,
        "vllm_mode": "colocate" if rl.placement == "colocated" else "server",
        "vllm_tensor_parallel_size": rl.rollout_tp,
    })
    if rl.placement == "colocated":
        args["vllm_gpu_memory_utilization"] = rl.gpu_memory_utilization
        args["vllm_enable_sleep_mode"] = True
    if rl.async_steps:
        notes.append("TRL's GRPOTrainer generates on-policy here; async_steps (off-policy rollouts) is not written")
    if rl.critic or rl.reward_model:
        notes.append("the reward model / critic is not written: train_trl.py uses a rule-based reward function")
    return args, notes


def _run_json(plan: Plan) -> dict[str, Any]:
    t = plan.s.train
    return {"model": plan.model_ref, "objective": "grpo" if t.objective == "grpo" else "dpo",
            "method": t.method}


def _launch_sh(plan: Plan) -> str:
    rl = plan.s.train.rl
    train_gpus = _train_gpus(plan)
    lines = ["set -euo pipefail", 'DATASET="${1:?usage: launch.sh DATASET}"']
    if rl is not None and rl.placement == "split":
        roll = ",".join(str(i) for i in range(rl.rollout_gpus))
        trn = ",".join(str(i) for i in range(rl.rollout_gpus, plan.count))
        lines += [f"CUDA_VISIBLE_DEVICES={roll} trl vllm-serve --model {plan.model_ref} "
                  f"--tensor_parallel_size {rl.rollout_tp} --data_parallel_size {rl.rollout_gpus // rl.rollout_tp} "
                  f"--gpu_memory_utilization {rl.gpu_memory_utilization} &",
                  "SERVER=$!", "trap 'kill $SERVER' EXIT",
                  f"CUDA_VISIBLE_DEVICES={trn} accelerate launch --num_processes {train_gpus} train_trl.py \"$DATASET\""]
    else:
        lines.append(f"accelerate launch --num_processes {train_gpus} train_trl.py \"$DATASET\"")
    return hash_header(plan, shebang="#!/usr/bin/env bash") + "\n".join(lines) + "\n"


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    cfg, notes = trl_config(plan)
    out = {"trl_config.json": json_text(plan, cfg, notes), "run.json": json_text(plan, _run_json(plan)),
           "train_trl.py": hash_header(plan, shebang="#!/usr/bin/env python") + TRAIN_TRL_PY.lstrip("\n"),
           "launch.sh": _launch_sh(plan)}
    if plan.s.train.method == "lora":
        out["lora_config.json"] = json_text(plan, lora_config(plan))
    return out

"""Unsloth launch files (issue 20): `unsloth_run.json` and `train_unsloth.py` (SFT or DPO through TRL's trainers),
one GPU.

Written for Unsloth at v0.1.801-beta (f3a66cd1) and TRL v1.9.0: the keyword arguments of
`FastLanguageModel.from_pretrained` and `FastLanguageModel.get_peft_model` are parameters those functions take at
that commit (scripts/engine_facts_unsloth.py reads them into launch/data/engine_flags.csv, engine `unsloth`), the
trainer config's keys are SFTConfig / DPOConfig fields of TRL v1.9.0 or TrainingArguments fields
(tests/test_launch_unsloth.py checks all three). The script follows Unsloth's own notebooks' shape: import
unsloth first, load, add adapters, train with TRL.

What maps where: method qlora / lora / full -> load_in_4bit / 16-bit LoRA / full_finetuning; seq_len ->
max_seq_length and the trainer's max_length; lora_rank / lora_alpha / targets (all-linear -> the seven
projections, Unsloth's default list); recompute full + activation_offload -> use_gradient_checkpointing
"unsloth" (its offloaded checkpointing), full -> True, none -> False; objective sft / dpo -> SFTTrainer /
DPOTrainer (reference: the base with adapters disabled under LoRA, as TRL does); the optimizer by its
TrainingArguments name.
"""
from __future__ import annotations

from typing import Any

from ._common import Plan, hash_header, json_text, require_objective, require_training, unsupported
from ._train import hf_optim, learning_rate, warmup_steps

UNSLOTH_VERSION = "v0.1.801-beta (f3a66cd1)"
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

TRAIN_UNSLOTH_PY = '''
"""Run the plan with Unsloth: python train_unsloth.py DATASET (a HF dataset id or a local .jsonl).

SFT needs a `text` (or `messages`) column; DPO needs `prompt`, `chosen`, `rejected`."""
from unsloth import FastLanguageModel  # first: Unsloth patches transformers and TRL on import

import json
import sys

from datasets import load_dataset


def main():
    with open("unsloth_run.json") as f:
        run = json.load(f)
    run.pop("_gpuplan", None)
    source = sys.argv[1]
    data = load_dataset("json", data_files=source, split="train") if source.endswith(".jsonl") else \\
        load_dataset(source, split="train")
    model, tokenizer = FastLanguageModel.from_pretrained(**run["from_pretrained"])
    if run["get_peft_model"] is not None:
        model = FastLanguageModel.get_peft_model(model, **run["get_peft_model"])
    if run["trainer"] == "dpo":
        from trl import DPOConfig, DPOTrainer
        trainer = DPOTrainer(model=model, args=DPOConfig(**run["config"]), train_dataset=data,
                             processing_class=tokenizer)
    else:
        from trl import SFTConfig, SFTTrainer
        trainer = SFTTrainer(model=model, args=SFTConfig(**run["config"]), train_dataset=data,
                             processing_class=tokenizer)
    trainer.train()


if __name__ == "__main__":
    main()
'''


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective not in ("sft", "dpo"):
        require_objective(plan, "the Unsloth script here trains SFT or DPO through TRL's trainers.")
    if plan.count > 1 or p.tp > 1 or p.pp > 1 or p.zero:
        raise unsupported(plan, f"{plan.count} GPUs (zero {p.zero})", "the Unsloth script here runs on one GPU.",
                          ("hf", "llama-factory", "axolotl"), "use one GPU, or")
    if t.precision not in ("bf16", "fp16"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "Unsloth trains in bf16 or fp16.", (),
                          "use bf16, or")
    if t.reference == "precomputed":
        raise unsupported(plan, "train.reference 'precomputed'", "not written for Unsloth here.", ("trl",),
                          "use reference base or copy, or")


def run_json(plan: Plan) -> dict[str, Any]:
    t = plan.s.train
    gc: Any = False
    if t.recompute != "none":
        gc = "unsloth" if t.activation_offload else True
    load: dict[str, Any] = {"model_name": plan.model_ref, "max_seq_length": t.seq_len, "dtype": None,
                            "load_in_4bit": t.method == "qlora", "full_finetuning": t.method == "full",
                            "use_gradient_checkpointing": gc}
    peft = None
    if t.method in ("lora", "qlora"):
        peft = {"r": t.lora_rank, "lora_alpha": t.lora_alpha or 2 * t.lora_rank, "lora_dropout": 0.0, "bias": "none",
                "target_modules": SEVEN if t.lora_targets == "all-linear" else
                (list(t.lora_targets) if isinstance(t.lora_targets, list) else [t.lora_targets]),
                "use_gradient_checkpointing": gc, "random_state": 3407}
    steps = plan.train_steps
    cfg: dict[str, Any] = {"output_dir": "outputs", "per_device_train_batch_size": plan.micro_batch,
                           "gradient_accumulation_steps": plan.grad_accum,
                           "max_steps": steps if steps is not None else 1000, "learning_rate": learning_rate(plan),
                           "warmup_steps": warmup_steps(plan), "lr_scheduler_type": "cosine",
                           "bf16": t.precision == "bf16", "fp16": t.precision == "fp16", **hf_optim(plan),
                           "logging_steps": 10, "report_to": "none", "max_length": t.seq_len}
    return {"from_pretrained": load, "get_peft_model": peft, "trainer": t.objective, "config": cfg}


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    notes = [f"written for Unsloth {UNSLOTH_VERSION} and TRL v1.9.0"]
    if plan.train_steps is None:
        notes.append("train.tokens not set: max_steps is a placeholder (1000)")
    return {"unsloth_run.json": json_text(plan, run_json(plan), notes),
            "train_unsloth.py": hash_header(plan, shebang="#!/usr/bin/env python") + TRAIN_UNSLOTH_PY.lstrip("\n"),
            "launch.sh": hash_header(plan, shebang="#!/usr/bin/env bash")
            + 'set -euo pipefail\npython train_unsloth.py "${1:?usage: launch.sh DATASET}"\n'}

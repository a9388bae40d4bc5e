"""LLaMA-Factory launch files (issue 20): `llamafactory.yaml` for `llamafactory-cli train`, and `launch.sh`.

Written for LLaMA-Factory v0.9.5 (7af90952). LLaMA-Factory parses the YAML with HfArgumentParser.parse_dict
(allow_extra_keys=False) over its argument dataclasses (src/llamafactory/hparams/*.py); scripts/
engine_facts_llamafactory.py reads their fields at that tag into launch/data/engine_flags.csv (engine
`llama-factory`), and tests/test_launch_llamafactory.py checks every key against them and transformers'
TrainingArguments rows. The layout follows the tag's examples/train_lora/qwen3_lora_dpo.yaml.

What maps where: objective sft -> stage sft (task train: pt); dpo / ipo / orpo / simpo -> stage dpo with
pref_loss sigmoid / ipo / orpo / simpo (pref_beta 0.1, its default); kto -> stage kto; reward -> stage rm;
method full / lora -> finetuning_type; qlora -> lora + quantization_bit 4, quantization_method bnb;
lora_rank / lora_alpha / lora_targets (all-linear -> `all`); seq_len -> cutoff_len; document_len (sft) ->
neat_packing; micro_batch (pairs for
the paired objectives, as LLaMA-Factory's per_device_train_batch_size) and global_batch -> batch size and
accumulation; recompute none -> disable_gradient_checkpointing; offloaded checkpointing (recompute full +
activation_offload) -> use_unsloth_gc; loss fused-linear -> enable_liger_kernel; attention -> flash_attn
(fa2 / sdpa / disabled = eager); zero 2 / 3 -> the tag's examples/deepspeed/ds_z{2,3}[_offload]_config.json.
"""
from __future__ import annotations

from typing import Any

from ._common import Plan, hash_header, require_objective, require_training, unsupported, yaml_text
from ._train import hf_optim, learning_rate, warmup_steps

LF_VERSION = "v0.9.5 (7af90952)"
_STAGE = {"sft": "sft", "dpo": "dpo", "ipo": "dpo", "orpo": "dpo", "simpo": "dpo", "kto": "kto", "reward": "rm"}
_PREF_LOSS = {"dpo": "sigmoid", "ipo": "ipo", "orpo": "orpo", "simpo": "simpo"}
_ATTN = {"flash": "fa2", "sdpa": "sdpa", "eager": "disabled"}   # extras/constants.py AttentionFunction


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective not in _STAGE:
        require_objective(plan, "LLaMA-Factory's stages are pt, sft, rm, dpo (sigmoid, ipo, orpo, simpo), kto and a "
                          "PPO stage with a reward model (not written here); GRPO and distillation are not among them.")
    if t.reference == "precomputed":
        raise unsupported(plan, "train.reference 'precomputed'", "LLaMA-Factory computes the reference log-probs "
                          "during training.", ("trl",), "use reference copy/base, or")
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1:
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}, ep={p.ep}", "LLaMA-Factory's HF path here is data "
                          "parallel (DDP or DeepSpeed ZeRO).", ("megatron", "torchrun"), "set parallel to dp only, or")
    if p.zero == 1:
        raise unsupported(plan, "zero 1", "LLaMA-Factory ships DeepSpeed configs for ZeRO 0, 2 and 3 only.", (),
                          "use zero 0, 2 or 3, or")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "the config here trains in bf16, fp16 or fp32.",
                          (), "use bf16, or")
    if t.document_len is not None:
        stage = "pt" if t.objective == "sft" and plan.s.task == "train" else _STAGE[t.objective]
        if stage != "sft":
            # hparams/parser.py @7af90952: "`neat_packing` cannot be set as True except SFT."
            raise unsupported(plan, f"train.document_len with stage {stage}", "LLaMA-Factory packs documents "
                              "that attend only to themselves (neat_packing) in the sft stage only.", ("axolotl",),
                              "use objective sft with task finetune, or remove train.document_len; or")
        if t.attention == "flash" and plan.micro_batch != 1:
            # data/collator.py SFTDataCollatorWith4DAttentionMask @7af90952: "bsz should be 1 for neat packing"
            raise unsupported(plan, f"train.document_len with micro_batch {plan.micro_batch}", "LLaMA-Factory's "
                              "neat packing on flash-attention takes one packed row per device and micro-step.", (),
                              "set micro_batch: 1 (a longer seq_len holds more documents).")


def config(plan: Plan) -> dict[str, Any]:
    t, p = plan.s.train, plan.s.parallel
    stage = "pt" if t.objective == "sft" and plan.s.task == "train" else _STAGE[t.objective]
    cfg: dict[str, Any] = {"model_name_or_path": plan.model_ref}
    if t.method == "qlora":
        cfg.update(quantization_bit=4, quantization_method="bnb")
    cfg.update(stage=stage, do_train=True, finetuning_type="full" if t.method == "full" else "lora")
    if t.method in ("lora", "qlora"):
        cfg.update(lora_rank=t.lora_rank, lora_alpha=t.lora_alpha or 2 * t.lora_rank,
                   lora_target="all" if t.lora_targets == "all-linear" else
                   ",".join(t.lora_targets) if isinstance(t.lora_targets, list) else t.lora_targets)
    if stage == "dpo":
        cfg.update(pref_beta=0.1, pref_loss=_PREF_LOSS[t.objective])
    cfg.update(dataset="REPLACE_WITH_DATASET", template="default", cutoff_len=t.seq_len,
               flash_attn=_ATTN[t.attention], disable_gradient_checkpointing=t.recompute == "none")
    if t.document_len is not None:
        # packs into cutoff_len-token rows; flash (fa2): varlen over the position_ids, sdpa/eager: a 4D
        # block-diagonal mask (block_diag_attn), which masks but computes the whole row
        cfg["neat_packing"] = True
    if t.recompute == "full" and t.activation_offload:
        cfg["use_unsloth_gc"] = True
    if t.loss == "fused-linear":
        cfg["enable_liger_kernel"] = True
    steps = plan.train_steps
    cfg.update(output_dir="outputs", per_device_train_batch_size=plan.micro_batch,
               gradient_accumulation_steps=plan.grad_accum, learning_rate=learning_rate(plan),
               max_steps=steps if steps is not None else 1000, lr_scheduler_type="cosine",
               warmup_steps=warmup_steps(plan), bf16=t.precision == "bf16", fp16=t.precision == "fp16",
               **hf_optim(plan), logging_steps=10, save_steps=1000, report_to="none")
    if p.zero in (2, 3):
        off = "_offload" if p.offload != "none" else ""
        cfg["deepspeed"] = f"examples/deepspeed/ds_z{p.zero}{off}_config.json"
    return cfg


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    t = plan.s.train
    notes = [f"written for LLaMA-Factory {LF_VERSION}", "set `dataset` (a name in data/dataset_info.json) and "
             "`template` (your model's chat template) before training"]
    if plan.train_steps is None:
        notes.append("train.tokens not set: max_steps is a placeholder (1000)")
    if t.objective in ("dpo", "ipo") and t.method == "full":
        notes.append("full-parameter DPO: LLaMA-Factory loads a frozen reference copy (use_ref_model)")
    launch = ["set -euo pipefail", "cd \"${LLAMAFACTORY_DIR:?set LLAMAFACTORY_DIR to a LLaMA-Factory checkout}\""]
    env = "FORCE_TORCHRUN=1 " if plan.count > 1 else ""
    if plan.multi_node:
        env += (f"NNODES={plan.nodes} NODE_RANK=${{NODE_RANK:?}} MASTER_ADDR=${{MASTER_ADDR:?}} "
                "MASTER_PORT=${MASTER_PORT:-29500} ")
    launch.append(f"{env}llamafactory-cli train \"$OLDPWD/llamafactory.yaml\"")
    return {"llamafactory.yaml": hash_header(plan, notes) + yaml_text(config(plan)),
            "launch.sh": hash_header(plan, shebang="#!/usr/bin/env bash") + "\n".join(launch) + "\n"}

"""Axolotl launch files (issue 20): `axolotl.yaml` for `axolotl train`, and `launch.sh`.

Written for Axolotl v0.18.0 (2f5cb9da). Axolotl validates the YAML with its pydantic models
(src/axolotl/utils/schemas/*.py); scripts/engine_facts_axolotl.py reads their fields at that tag into
launch/data/engine_flags.csv (engine `axolotl`; fields declared deprecated are marked so), and
tests/test_launch_axolotl.py checks every key. The layout follows the tag's
examples/llama-3/instruct-dpo-lora-8b.yml. Axolotl itself needs a CUDA stack to import, so its own validator
was not run here.

What maps where: objective sft -> no `rl`; dpo / ipo / orpo / kto / simpo -> rl (axolotl's RLType); method
lora / qlora -> adapter lora / qlora (qlora: load_in_4bit), lora_r / lora_alpha / lora_dropout 0,
all-linear -> lora_target_linear, a list -> lora_target_modules; seq_len -> sequence_len; micro_batch
(pairs for the paired objectives) -> micro_batch_size, the accumulation from global_batch; recompute ->
gradient_checkpointing (true, or `offload` with activation_offload); document_len (SFT) -> sample_packing and
pad_to_sequence_len; attention flash / sdpa / eager ->
attn_implementation flash_attention_2 / sdpa / eager; zero 1 / 2 / 3 -> the tag's deepspeed_configs/zero{n}.json;
the optimizer by its TrainingArguments name (axolotl passes it through).
"""
from __future__ import annotations

from typing import Any

from ._common import Plan, hash_header, require_objective, require_training, unsupported, yaml_text
from ._train import hf_optim, learning_rate, warmup_steps

AXOLOTL_VERSION = "v0.18.0 (2f5cb9da)"
_RL = ("dpo", "ipo", "orpo", "kto", "simpo")
_ATTN = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective != "sft" and t.objective not in _RL:
        require_objective(plan, "the Axolotl config here writes supervised fine-tuning and its preference trainers "
                          "(dpo, ipo, orpo, kto, simpo).")
    if t.reference == "precomputed":
        raise unsupported(plan, "train.reference 'precomputed'", "not written for Axolotl here.", ("trl",),
                          "use reference copy/base, or")
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1 or p.offload != "none":
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}, ep={p.ep}, offload={p.offload}",
                          "the Axolotl config here is data parallel with DeepSpeed ZeRO 0-3, no offload.",
                          ("deepspeed", "megatron"), "set parallel to dp only, or")
    if t.loss != "full":
        raise unsupported(plan, f"train.loss '{t.loss}'", "Axolotl's fused losses (Liger, Cut Cross-Entropy) are "
                          "plugins with their own settings, not written here.", ("hf",), "use loss full, or")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "the config here trains in bf16, fp16 or fp32.",
                          (), "use bf16, or")
    if t.document_len is not None and t.objective in _RL:
        # schemas/validation.py check_sample_packing_w_rl @2f5cb9da; its dpo_padding_free passes TRL's padding_free,
        # which TRL v1.9.0's DPOTrainer switches off (see launch/trl.py)
        raise unsupported(plan, f"train.document_len with objective '{t.objective}'", "Axolotl refuses "
                          "`sample_packing: true` with RLHF trainers (\"does not work with RLHF training\").", (),
                          "remove train.document_len (one pair per row), or use objective sft.")


def config(plan: Plan) -> dict[str, Any]:
    t, p = plan.s.train, plan.s.parallel
    cfg: dict[str, Any] = {"base_model": plan.model_ref}
    if t.method == "qlora":
        cfg["load_in_4bit"] = True
    if t.objective in _RL:
        cfg["rl"] = t.objective
    cfg["datasets"] = [{"path": "REPLACE_WITH_DATASET",
                        "type": "chat_template.default" if t.objective in _RL else "chat_template"}]
    cfg["output_dir"] = "./outputs"
    cfg["sequence_len"] = t.seq_len
    if t.document_len is not None:
        # multipack: documents packed into sequence_len-token rows, each attending only to itself (flash varlen on
        # the position_ids; sdpa/eager through a block-diagonal mask); rows padded to sequence_len
        cfg.update(sample_packing=True, pad_to_sequence_len=True)
    if t.method in ("lora", "qlora"):
        cfg.update(adapter=t.method, lora_r=t.lora_rank, lora_alpha=t.lora_alpha or 2 * t.lora_rank, lora_dropout=0.0)
        if t.lora_targets == "all-linear":
            cfg["lora_target_linear"] = True
        else:
            cfg["lora_target_modules"] = t.lora_targets if isinstance(t.lora_targets, list) else [t.lora_targets]
    steps = plan.train_steps
    cfg.update(micro_batch_size=plan.micro_batch, gradient_accumulation_steps=plan.grad_accum,
               max_steps=steps if steps is not None else 1000, optimizer=hf_optim(plan)["optim"],
               lr_scheduler="cosine", learning_rate=learning_rate(plan), warmup_steps=warmup_steps(plan),
               weight_decay=0.0 if t.method in ("lora", "qlora") else 0.1,
               bf16=t.precision == "bf16", fp16=t.precision == "fp16",
               gradient_checkpointing=("offload" if t.activation_offload else True) if t.recompute != "none" else False,
               attn_implementation=_ATTN[t.attention], logging_steps=10, save_steps=1000)
    if p.zero:
        cfg["deepspeed"] = f"deepspeed_configs/zero{p.zero}.json"
    return cfg


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    t = plan.s.train
    notes = [f"written for Axolotl {AXOLOTL_VERSION}", "set `datasets` (path and prompt format) before training"]
    if plan.train_steps is None:
        notes.append("train.tokens not set: max_steps is a placeholder (1000)")
    if t.recompute == "selective":
        notes.append("HF models have no selective recompute: gradient_checkpointing recomputes whole layers")
    launch = ["set -euo pipefail"]
    if plan.s.parallel.zero:
        launch.append('cd "${AXOLOTL_DIR:?set AXOLOTL_DIR to an Axolotl checkout (deepspeed_configs/)}"')
    launch.append('axolotl train "${CONFIG:-$OLDPWD/axolotl.yaml}"' if plan.s.parallel.zero else "axolotl train axolotl.yaml")
    return {"axolotl.yaml": hash_header(plan, notes) + yaml_text(config(plan)),
            "launch.sh": hash_header(plan, shebang="#!/usr/bin/env bash") + "\n".join(launch) + "\n"}

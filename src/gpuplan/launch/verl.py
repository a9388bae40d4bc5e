"""verl launch file (issue 20): GRPO / PPO / RLOO with verl's PPO trainer (`python3 -m verl.trainer.main_ppo`,
Hydra config `ppo_trainer`), colocated on one or more nodes (verl's hybrid engine: the FSDP actor, the
reference and the vLLM/SGLang rollout share every GPU; the engine frees its cache while the actor trains).

Written for verl v0.7.0 (f9c855f7): every override key is a key of verl's composed trainer config
verl/trainer/config/_generated_ppo_trainer.yaml at that tag (scripts/engine_facts_verl.py reads it into
launch/data/engine_flags.csv, engine `verl`; tests/test_launch_verl.py checks the generated keys). The shape
follows verl's own example examples/grpo_trainer/run_qwen2-7b.sh at that tag.

What maps where: objective grpo/ppo/rloo -> algorithm.adv_estimator grpo/gae/rloo; prompts_per_step ->
data.train_batch_size and, unless rl.mini_batch sets it (in sequences; here / group_size), actor
ppo_mini_batch_size (one optimizer step per rollout batch; verl multiplies both by rollout.n); group_size -> rollout.n; prompt_len / max_new_tokens ->
data.max_prompt_length / max_response_length; micro_batch -> ppo_micro_batch_size_per_gpu and the log-prob
micro-batches; rl.reference -> actor.use_kl_loss with kl_loss_coef 0.001, low_var_kl (verl's GRPO example);
rl.engine, rollout_tp, gpu_memory_utilization -> rollout.name, tensor_model_parallel_size,
gpu_memory_utilization; recompute -> model.enable_gradient_checkpointing; offload_train_states -> the actor's
fsdp_config param/optimizer offload; LoRA -> model.lora_rank / lora_alpha / target_modules; a reward model ->
reward_model.enable + model.path; PPO's critic -> critic.model.path (the actor's model, verl's default shape).
"""
from __future__ import annotations

from ._common import Plan, hash_header, require_objective, require_training, reward_ref, unsupported


VERL_VERSION = "v0.7.0 (f9c855f7)"
KL_COEF = 0.001                     # examples/grpo_trainer/run_qwen2-7b.sh @v0.7.0
_ESTIMATOR = {"grpo": "grpo", "ppo": "gae", "rloo": "rloo"}


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective not in _ESTIMATOR:
        require_objective(plan, "verl's main_ppo trainer runs RL objectives (grpo, ppo, rloo).")
    rl = t.rl
    if rl.placement != "colocated":
        raise unsupported(plan, "rl.placement 'split'", "verl's main_ppo colocates actor, reference and rollout "
                          "(hybrid engine); a disaggregated rollout group is not written here.", ("openrlhf", "trl"),
                          "use placement colocated, or")
    if rl.mini_batch and (min(rl.mini_batch, rl.prompts_per_step * rl.group_size) % rl.group_size):
        raise unsupported(plan, f"rl.mini_batch {rl.mini_batch}", "verl counts ppo_mini_batch_size in prompts "
                          f"(each with rollout.n = {rl.group_size} responses).", ("trl",),
                          f"use a multiple of group_size {rl.group_size}, or")
    if t.method == "qlora":
        # no RL launcher written here loads a 4-bit base (TRL's and OpenRLHF's refuse qlora too)
        raise unsupported(plan, "method 'qlora'", "verl's FSDP actor trains a 16-bit base (LoRA or full).", (),
                          "use method lora or full, or")
    if t.precision != "bf16":
        raise unsupported(plan, f"train.precision '{t.precision}'", "verl's FSDP actor computes in bf16 over fp32 "
                          "parameters (fsdp_config.model_dtype fp32, mixed precision bf16).", (), "use bf16.")
    if not t.master_weights:
        # the estimate of master_weights false prices 16-bit parameters and states; the files keep fp32 ones
        raise unsupported(plan, "train.master_weights false", "verl's FSDP actor keeps fp32 parameters and AdamW "
                          "states (fsdp_config.model_dtype fp32), so the files would not run the plan that was "
                          "estimated.", (), "set master_weights: true (and make it fit another way).")
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1 or p.zero != 3:
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}, ep={p.ep}, zero={p.zero}",
                          "verl's FSDP actor fully shards over all GPUs (fsdp_size -1), which gpuplan estimates as "
                          "zero 3 with dp over every GPU.", ("openrlhf",), "set parallel to {zero: 3} (dp only), or")
    if t.optimizer != "adamw":
        raise unsupported(plan, f"train.optimizer '{t.optimizer}'", "verl's actor optimizer config here is AdamW.",
                          ("trl",), "use adamw, or")
    seqs, world = rl.prompts_per_step * rl.group_size, plan.count
    if seqs % world or (seqs // world) % t.micro_batch:
        raise unsupported(plan, f"{seqs} sequences per step over {world} GPUs x micro_batch {t.micro_batch}",
                          "verl splits the rollout batch (prompts x n) evenly over the GPUs and each GPU's share "
                          "into whole micro-batches (ray_trainer / dp_actor batch checks).", (),
                          f"make prompts_per_step x group_size a multiple of {world * t.micro_batch}, or")


def overrides(plan: Plan) -> list[tuple[str, object]]:
    t = plan.s.train
    rl = t.rl
    mb = t.micro_batch
    out: list[tuple[str, object]] = [
        ("algorithm.adv_estimator", _ESTIMATOR[t.objective]),
        ("data.train_files", "$TRAIN_FILES"),
        ("data.val_files", "$VAL_FILES"),
        ("data.train_batch_size", rl.prompts_per_step),
        ("data.max_prompt_length", rl.prompt_len),
        ("data.max_response_length", rl.max_new_tokens),
        ("actor_rollout_ref.model.path", plan.model_ref),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", t.recompute != "none"),
        # prompts per optimizer step (verl multiplies by rollout.n): rl.mini_batch sequences, or the whole batch
        ("actor_rollout_ref.actor.ppo_mini_batch_size",
         min(rl.mini_batch, rl.prompts_per_step * rl.group_size) // rl.group_size if rl.mini_batch
         else rl.prompts_per_step),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", mb),
        ("actor_rollout_ref.actor.use_kl_loss", bool(rl.reference)),
    ]
    if rl.reference:
        out += [("actor_rollout_ref.actor.kl_loss_coef", KL_COEF),
                ("actor_rollout_ref.actor.kl_loss_type", "low_var_kl"),
                ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", mb)]
    out += [
        ("algorithm.use_kl_in_reward", False),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", bool(rl.offload_train_states)),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", bool(rl.offload_train_states)),
        ("actor_rollout_ref.rollout.name", rl.engine),
        ("actor_rollout_ref.rollout.n", rl.group_size),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", rl.rollout_tp),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", rl.gpu_memory_utilization),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", mb),
    ]
    if t.method == "lora":
        out += [("actor_rollout_ref.model.lora_rank", t.lora_rank),
                ("actor_rollout_ref.model.lora_alpha", t.lora_alpha or 2 * t.lora_rank),
                ("actor_rollout_ref.model.target_modules",
                 "all-linear" if not isinstance(t.lora_targets, list) else "[" + ",".join(t.lora_targets) + "]")]
    if t.objective == "ppo" or rl.critic:
        out += [("critic.model.path", plan.model_ref), ("critic.ppo_micro_batch_size_per_gpu", mb)]
    if rl.reward_model:
        out += [("reward_model.enable", True), ("reward_model.model.path", reward_ref(rl.reward_model))]
    out += [("trainer.n_gpus_per_node", plan.gpus_per_node if plan.multi_node else plan.count),
            ("trainer.nnodes", plan.nodes), ("trainer.logger", '["console"]')]
    return out


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    s = str(v)
    return f"'{s}'" if any(c in s for c in '[]"') else s


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    notes = [f"written for verl {VERL_VERSION}",
             "verl computes the old-policy log-probs every step (gpuplan's old_logprob_pass)"]
    lines = ["set -euo pipefail",
             'TRAIN_FILES="${TRAIN_FILES:?set TRAIN_FILES to a parquet file of prompts (verl data format)}"',
             'VAL_FILES="${VAL_FILES:-$TRAIN_FILES}"',
             "python3 -m verl.trainer.main_ppo \\"]
    ov = overrides(plan)
    lines += [f"    {k}={_value(v)}" + (" \\" if i < len(ov) - 1 else ' "$@"') for i, (k, v) in enumerate(ov)]
    return {"run_verl.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(lines) + "\n"}

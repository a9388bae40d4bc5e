"""OpenRLHF launch file (issue 20): GRPO / PPO / RLOO with `python3 -m openrlhf.cli.train_ppo_ray` on one node,
colocated (`--train.colocate_all`, vLLM and DeepSpeed sleeping in turn) or split (vLLM engines on the first
rollout GPUs, actor and reference on the rest).

Written for OpenRLHF v0.11.0 (3c3be623): every option is one its train_ppo_ray.py parser defines at that tag
(scripts/engine_facts_openrlhf.py reads them into launch/data/engine_flags.csv, engine `openrlhf`;
tests/test_launch_openrlhf.py checks each option, its choices and that switches take no value). The shape
follows the tag's examples/scripts/train_reinforce_baseline_hybrid_engine.sh.

What maps where: objective grpo / rloo / ppo -> --algo.advantage.estimator group_norm / rloo / gae (PPO with
--critic.model_name_or_path = the actor's model); prompts_per_step -> --rollout.batch_size; group_size ->
--rollout.n_samples_per_prompt; --train.batch_size = prompts x group (one optimizer step per rollout batch, as
gpuplan's step); micro_batch -> --train.micro_batch_size and --rollout.micro_batch_size; prompt_len +
max_new_tokens -> --data.max_len, max_new_tokens -> --rollout.max_new_tokens; rl.reference -> KL as a loss
(--algo.kl.use_loss, k3, 0.001), else --algo.kl.init_coef 0; rollout_tp, gpu_memory_utilization -> --vllm.*;
colocated: --train.colocate_all --vllm.enable_sleep, and offload_train_states -> --ds.enable_sleep; parallel.zero
-> --ds.zero_stage; recompute -> --actor.gradient_checkpointing_enable; LoRA -> --ds.lora.*; async_steps >= 1 ->
--train.async_enable; a reward model -> --reward.model_name_or_path, else --reward.remote_url $REWARD (a reward
function file or URL you provide).
"""
from __future__ import annotations

from ._common import Plan, hash_header, require_objective, require_training, reward_ref, unsupported


OPENRLHF_VERSION = "v0.11.0 (3c3be623)"
_ESTIMATOR = {"grpo": "group_norm", "rloo": "rloo", "ppo": "gae"}


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective not in _ESTIMATOR:
        require_objective(plan, "this launcher writes OpenRLHF's PPO-family trainer (grpo, rloo, ppo).")
    if plan.multi_node:
        raise unsupported(plan, "more than one node", "the OpenRLHF launch here runs on one node.", ("verl",))
    if t.method == "qlora":
        # no RL launcher written here loads a 4-bit base (TRL's and verl's refuse qlora too)
        raise unsupported(plan, "method 'qlora'", "OpenRLHF's DeepSpeed actor trains a 16-bit base here.", (),
                          "use lora or full, or")
    if t.precision not in ("bf16", "fp16"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "OpenRLHF's --ds.param_dtype is bf16 or fp16.",
                          (), "use bf16, or")
    if t.optimizer != "adamw":
        # the files set no optimizer: OpenRLHF's DeepSpeed actor builds its (fused) AdamW
        raise unsupported(plan, f"train.optimizer '{t.optimizer}'", "OpenRLHF's DeepSpeed actor trains with AdamW "
                          "here; the files would not run the optimizer that was estimated.", ("trl",), "use adamw, or")
    if not t.master_weights and t.method == "full":
        # DeepSpeed's bf16/fp16 optimizers keep an fp32 master copy of every trained parameter
        raise unsupported(plan, "train.master_weights false", "OpenRLHF trains through DeepSpeed ZeRO, whose 16-bit "
                          "optimizer keeps fp32 master weights, so the files would not run the plan that was "
                          "estimated.", (), "set master_weights: true (and make it fit another way).")
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1 or p.offload != "none":
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}, ep={p.ep}, offload={p.offload}",
                          "OpenRLHF's actor is DeepSpeed ZeRO data parallel here.", ("verl",),
                          "set parallel to dp with a ZeRO stage, or")
    rl = t.rl
    train_gpus = plan.count - rl.rollout_gpus if rl.placement == "split" else plan.count
    seqs = rl.prompts_per_step * rl.group_size
    if seqs % (train_gpus * t.micro_batch):
        raise unsupported(plan, f"{seqs} sequences per step over {train_gpus} training GPUs x micro_batch "
                          f"{t.micro_batch}", "--train.batch_size must split into whole micro-batches on every GPU.",
                          (), f"make prompts_per_step x group_size a multiple of {train_gpus * t.micro_batch}, or")


def arguments(plan: Plan) -> list[tuple[str, object]]:
    """(option, value) pairs; value True: a switch without a value."""
    t, p = plan.s.train, plan.s.parallel
    rl = t.rl
    colocated = rl.placement == "colocated"
    train_gpus = plan.count if colocated else plan.count - rl.rollout_gpus
    rollout_gpus = plan.count if colocated else rl.rollout_gpus
    a: list[tuple[str, object]] = [
        ("--actor.model_name_or_path", plan.model_ref),
        ("--actor.num_nodes", 1), ("--actor.num_gpus_per_node", train_gpus),
        ("--ref.num_nodes", 1), ("--ref.num_gpus_per_node", train_gpus),
        ("--vllm.num_engines", rollout_gpus // rl.rollout_tp),
        ("--vllm.tensor_parallel_size", rl.rollout_tp),
        ("--vllm.gpu_memory_utilization", rl.gpu_memory_utilization),
        ("--algo.advantage.estimator", _ESTIMATOR[t.objective]),
        ("--data.prompt_dataset", "$DATASET"), ("--data.input_key", "prompt"), ("--data.apply_chat_template", True),
        ("--data.max_len", rl.prompt_len + rl.max_new_tokens),
        ("--rollout.max_new_tokens", rl.max_new_tokens),
        ("--rollout.batch_size", rl.prompts_per_step),
        ("--rollout.n_samples_per_prompt", rl.group_size),
        ("--rollout.micro_batch_size", t.micro_batch),
        ("--train.batch_size", rl.prompts_per_step * rl.group_size),
        ("--train.micro_batch_size", t.micro_batch),
        ("--ds.zero_stage", p.zero), ("--ds.param_dtype", t.precision),
    ]
    if rl.reference:
        a += [("--algo.kl.use_loss", True), ("--algo.kl.estimator", "k3"), ("--algo.kl.init_coef", 0.001)]
    else:
        a += [("--algo.kl.init_coef", 0)]
    if colocated:
        a += [("--train.colocate_all", True), ("--vllm.enable_sleep", True)]
        if rl.offload_train_states:
            a.append(("--ds.enable_sleep", True))
    else:
        a.append(("--train.colocate_actor_ref", True))
        if rl.async_steps:
            a.append(("--train.async_enable", True))
    if t.recompute != "none":
        a.append(("--actor.gradient_checkpointing_enable", True))
    if t.method == "lora":
        a += [("--ds.lora.rank", t.lora_rank), ("--ds.lora.alpha", t.lora_alpha or 2 * t.lora_rank),
              ("--ds.lora.target_modules", "all-linear" if not isinstance(t.lora_targets, list)
               else " ".join(t.lora_targets))]
    if t.objective == "ppo" or rl.critic:
        a += [("--critic.model_name_or_path", plan.model_ref), ("--critic.num_nodes", 1),
              ("--critic.num_gpus_per_node", train_gpus)]
    if rl.reward_model:
        a += [("--reward.model_name_or_path", reward_ref(rl.reward_model)), ("--reward.num_nodes", 1),
              ("--reward.num_gpus_per_node", train_gpus)]
    else:
        a.append(("--reward.remote_url", "$REWARD"))
    return a


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    rl = plan.s.train.rl
    notes = [f"written for OpenRLHF {OPENRLHF_VERSION}"]
    if rl.placement == "split":
        notes.append(f"split: Ray places {rl.rollout_gpus // rl.rollout_tp} vLLM engine(s) and the actor/reference on "
                     f"separate GPUs ({rl.rollout_gpus} + {plan.count - rl.rollout_gpus})")
    args = arguments(plan)
    lines = ["set -euo pipefail", 'DATASET="${DATASET:?set DATASET to a prompt dataset (HF id or path)}"',
             'REWARD="${REWARD:-reward_func.py}"   # a reward function file or remote reward URL (ignored with a reward model)',
             f"ray start --head --num-gpus {plan.count}",
             "python3 -m openrlhf.cli.train_ppo_ray \\"]
    for i, (k, v) in enumerate(args):
        tail = " \\" if i < len(args) - 1 else ' "$@"'
        lines.append(f"    {k}{'' if v is True else ' ' + str(v)}{tail}")
    return {"run_openrlhf.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(lines) + "\n"}

"""SLURM: an sbatch script that runs the chosen training engine's launch script once per node;
torchrun (or accelerate) then starts one worker per GPU and meets the others through a c10d
rendezvous on the first node of the allocation."""
from __future__ import annotations

import math

from ._common import Plan, hash_header, require_training, unsupported

INNER_DEFAULT = {"hf": "hf", "deepspeed": "deepspeed", "megatron": "megatron", "torchtitan": "torchrun",
                 "torchtune": "torchrun", "litgpt": "torchrun"}
LAUNCH_SCRIPT = {"torchrun": "launch.sh", "hf": "launch.sh", "deepspeed": "launch.sh", "megatron": "train_megatron.sh"}


def inner_engine(plan: Plan, inner: str | None) -> str:
    name = inner or INNER_DEFAULT[plan.s.framework]
    if name not in LAUNCH_SCRIPT:
        raise unsupported(plan, f"wrapping engine '{name}'", "slurm wraps a training engine.",
                          tuple(LAUNCH_SCRIPT), "pass one of them as the inner engine:")
    return name


def sbatch(plan: Plan, inner: str) -> str:
    est = plan.estimate or {}
    ttt = (est.get("performance") or {}).get("time_to_train_s")
    lines = ["#!/usr/bin/env bash"]
    notes = [f"wraps the '{inner}' engine's {LAUNCH_SCRIPT[inner]}",
             "one task per node: torchrun/accelerate starts one process per GPU"]
    lines += [ln for ln in hash_header(plan, notes).splitlines()]
    lines += [f"#SBATCH --job-name=gpuplan-{inner}",
              f"#SBATCH --nodes={plan.nodes}",
              "#SBATCH --ntasks-per-node=1",
              f"#SBATCH --gpus-per-node={plan.procs_per_node}",
              f"#SBATCH --cpus-per-task={max(8, 8 * plan.procs_per_node)}",
              "#SBATCH --exclusive",
              "#SBATCH --output=%x-%j.out"]
    if ttt:
        # predicted time to train plus 20% and one hour for start-up and checkpoints, whole hours
        hours = math.ceil(ttt * 1.2 / 3600) + 1
        lines.append(f"#SBATCH --time={hours // 24}-{hours % 24:02d}:00:00")
    else:
        lines.append("# no --time: the plan has no predicted time to train; add one for your partition")
    lines += ["",
              "set -euo pipefail",
              'cd "${SLURM_SUBMIT_DIR}"',
              'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
              "export MASTER_PORT=29500",
              'export RDZV_ID="$SLURM_JOB_ID"',
              f"export NNODES={plan.nodes}",
              "# NCCL over InfiniBand/RoCE; uncomment and set the interface if NCCL picks the wrong one",
              "# export NCCL_SOCKET_IFNAME=eth0",
              "",
              f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'NODE_RANK=$SLURM_NODEID bash {LAUNCH_SCRIPT[inner]}'",
              ""]
    return "\n".join(lines)


def files(plan: Plan, inner: str | None = None) -> dict[str, str]:
    require_training(plan)
    from . import _generate
    name = inner_engine(plan, inner)
    out = _generate(plan.scenario, name, plan.estimate)
    out["slurm.sbatch"] = sbatch(plan, name)
    return out

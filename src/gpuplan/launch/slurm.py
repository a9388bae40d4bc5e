"""SLURM: an sbatch script that runs the chosen training engine's launch script once per node, and a
submit.sh that chains as many jobs as the run needs under a partition's time limit.

torchrun (or accelerate) starts one worker per GPU and meets the others through a c10d rendezvous on
the first node. A run longer than the time limit is split into jobs chained with
`--dependency=afterany`; each job asks for `--time` = the limit, gets SIGUSR1 `--signal=B:USR1@<s>`
before it, forwards SIGTERM to the workers so they checkpoint and stop, and the next job resumes
from the newest checkpoint (every wrapped launcher resumes). `--requeue` lets SLURM restart a job
whose node failed. Slurm >= 22.05 no longer passes the job's --cpus-per-task to srun, so srun is
given it explicitly (and SRUN_CPUS_PER_TASK is set); OMP_NUM_THREADS = the cores of one worker.
Sources: sbatch/srun man pages (slurm.schedmd.com/sbatch.html, /srun.html: --signal, --requeue,
--dependency, SRUN_CPUS_PER_TASK; 22.05 release notes); NCCL environment variables
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html); AWS EFA with NCCL
(docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html)."""
from __future__ import annotations

import math

from ._common import Plan, hash_header, require_training, unsupported

INNER_DEFAULT = {"hf": "hf", "deepspeed": "deepspeed", "megatron": "megatron", "torchtitan": "torchrun",
                 "torchtune": "torchrun", "litgpt": "torchrun"}
LAUNCH_SCRIPT = {"torchrun": "launch.sh", "hf": "launch.sh", "deepspeed": "launch.sh", "megatron": "train_megatron.sh"}
DEFAULT_TIME_LIMIT_H = 24.0
SIGNAL_LEAD_S = 600          # USR1 this long before the limit: time to write a checkpoint and exit
CPUS_PER_GPU = 8

# NCCL/libfabric settings per network kind (networks.csv `kind`); values a site must fill stay comments
NCCL_ENV = {
    "infiniband": ["export NCCL_IB_DISABLE=0            # use the InfiniBand verbs transport",
                   "# export NCCL_IB_HCA=mlx5            # restrict to these HCAs if NCCL picks wrong ones"],
    "roce": ["export NCCL_IB_DISABLE=0            # RoCE uses NCCL's IB verbs transport",
             "# export NCCL_IB_GID_INDEX=3         # the RoCE v2 GID index of your fabric (site-specific)"],
    "ethernet": ["export NCCL_IB_DISABLE=1            # plain TCP sockets",
                 "# export NCCL_SOCKET_IFNAME=eth0     # the interface that reaches the other nodes"],
    "efa": ["export FI_PROVIDER=efa                # libfabric EFA provider (needs the aws-ofi-nccl plugin)",
            "export FI_EFA_USE_DEVICE_RDMA=1      # GPUDirect RDMA over EFA (p4d/p5)"],
    "gcp-tcpx": ["# GPUDirect-TCPX/TCPXO: load Google's NCCL plugin and its environment (site image)"],
}


def inner_engine(plan: Plan, inner: str | None) -> str:
    name = inner or INNER_DEFAULT[plan.s.framework]
    if name not in LAUNCH_SCRIPT:
        engines = ", ".join(LAUNCH_SCRIPT)
        raise unsupported(plan, f"wrapping engine '{name}'", f"the slurm job script here wraps the {engines} "
                          f"launches only (engine '{name}' writes no job step for it).",
                          (), f"pass one of {engines} as the inner engine.")
    return name


def run_hours(plan: Plan) -> int | None:
    """Predicted time to train plus 20% and one hour for start-up and checkpoints, whole hours."""
    ttt = ((plan.estimate or {}).get("performance") or {}).get("time_to_train_s")
    return math.ceil(ttt * 1.2 / 3600) + 1 if ttt else None


def job_hours(plan: Plan, limit_h: float) -> tuple[float, int | None]:
    """(--time of one job in hours, number of chained jobs); jobs = None without a prediction."""
    total = run_hours(plan)
    if total is None:
        return limit_h, None
    if total <= limit_h:
        return float(total), 1
    return limit_h, math.ceil(total / limit_h)


def slurm_time(hours: float) -> str:
    minutes = int(round(hours * 60))
    return f"{minutes // 1440}-{minutes % 1440 // 60:02d}:{minutes % 60:02d}:00"


def network_kind(plan: Plan) -> tuple[str, str] | None:
    """(network id, kind) of the plan's inter-node fabric (hardware.network or the node's default)."""
    try:
        from ..hardware.topology import default_network_for, get_network
        net = get_network(plan.s.hardware.network) if plan.s.hardware.network else default_network_for(plan.s.hardware.gpu)
    except Exception:           # a GPU or network the catalog does not know: leave NCCL to its defaults
        return None
    return net.id, net.kind


def nccl_lines(plan: Plan) -> list[str]:
    net = network_kind(plan)
    lines = ["export NCCL_DEBUG=${NCCL_DEBUG:-WARN}"]
    if net is None:
        return lines + ["# inter-node network unknown: NCCL picks its transport itself"]
    return lines + [f"# fabric: {net[0]} ({net[1]})"] + NCCL_ENV.get(net[1], [f"# no NCCL settings for '{net[1]}'"])


def sbatch(plan: Plan, inner: str, limit_h: float) -> str:
    hours, jobs = job_hours(plan, limit_h)
    cpus = CPUS_PER_GPU * plan.procs_per_node
    notes = [f"wraps the '{inner}' engine's {LAUNCH_SCRIPT[inner]}",
             "one task per node: torchrun/accelerate starts one process per GPU",
             f"time limit per job {limit_h:g} h (gpuplan launch --time-limit); "
             + ("no predicted time to train: set CHUNKS when submitting" if jobs is None
                else f"predicted run {run_hours(plan)} h (with margin) = {jobs} chained job(s): bash submit.sh"),
             "each job resumes from the newest checkpoint in CHECKPOINT_DIR / the engine's output folder"]
    lines = ["#!/usr/bin/env bash"] + hash_header(plan, notes).splitlines()
    lines += [f"#SBATCH --job-name=gpuplan-{inner}",
              f"#SBATCH --nodes={plan.nodes}",
              "#SBATCH --ntasks-per-node=1",
              f"#SBATCH --gpus-per-node={plan.procs_per_node}",
              f"#SBATCH --cpus-per-task={cpus}",
              "#SBATCH --exclusive",
              f"#SBATCH --time={slurm_time(hours)}",
              "#SBATCH --requeue",
              f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}",
              "#SBATCH --open-mode=append",
              "#SBATCH --output=%x-%j.out",
              "",
              "set -euo pipefail",
              'cd "${SLURM_SUBMIT_DIR}"',
              'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
              "export MASTER_PORT=29500",
              'export RDZV_ID="$SLURM_JOB_ID"',
              f"export NNODES={plan.nodes}",
              'export CHECKPOINT_DIR="${CHECKPOINT_DIR:-$SLURM_SUBMIT_DIR/checkpoints}"',
              "# Slurm >= 22.05: srun does not inherit the job's --cpus-per-task; one worker gets its share",
              'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
              f"export OMP_NUM_THREADS={max(1, cpus // plan.procs_per_node)}",
              *nccl_lines(plan),
              "",
              f"# SIGUSR1 arrives {SIGNAL_LEAD_S} s before the time limit: SIGTERM the workers so they save and",
              "# stop; the next job of the chain (submit.sh) resumes from that checkpoint",
              'on_usr1() { echo "time limit near: stopping for the next job"; kill -TERM "$SRUN_PID" 2>/dev/null || true; }',
              "trap on_usr1 USR1",
              'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1 \\',
              f"  bash -c 'NODE_RANK=$SLURM_NODEID bash {LAUNCH_SCRIPT[inner]}' &",
              "SRUN_PID=$!",
              "set +e",
              'wait "$SRUN_PID"; rc=$?',
              'while kill -0 "$SRUN_PID" 2>/dev/null; do wait "$SRUN_PID"; rc=$?; done   # wait returns early on USR1',
              'exit "$rc"',
              ""]
    return "\n".join(lines)


def submit_script(plan: Plan, limit_h: float) -> str:
    _, jobs = job_hours(plan, limit_h)
    notes = ["submits slurm.sbatch CHUNKS times, each job after the previous one ends (afterany)",
             "a job that finds training finished exits at once"]
    body = ["set -euo pipefail",
            'cd "$(dirname "$0")"',
            f'CHUNKS="${{CHUNKS:-{jobs or 1}}}"',
            'prev="$(sbatch --parsable slurm.sbatch)"; prev="${prev%%;*}"',
            'echo "job 1/$CHUNKS: $prev"',
            'for i in $(seq 2 "$CHUNKS"); do',
            '  prev="$(sbatch --parsable --dependency=afterany:"$prev" slurm.sbatch)"; prev="${prev%%;*}"',
            '  echo "job $i/$CHUNKS: $prev (starts after the previous job ends)"',
            "done",
            ""]
    return hash_header(plan, notes, shebang="#!/usr/bin/env bash") + "\n".join(body)


def files(plan: Plan, inner: str | None = None, time_limit_h: float | None = None) -> dict[str, str]:
    require_training(plan)
    from . import _generate
    from ..errors import InputError
    limit = DEFAULT_TIME_LIMIT_H if time_limit_h is None else float(time_limit_h)
    if not limit > 0.5:
        raise InputError(f"time limit {time_limit_h!r} h", "a SLURM job needs more than the 0.5 h its start-up "
                         "and checkpoint take.", "pass a partition's time limit in hours, e.g. --time-limit 24.")
    name = inner_engine(plan, inner)
    out = _generate(plan.scenario, name, plan.estimate)
    out["slurm.sbatch"] = sbatch(plan, name, limit)
    out["submit.sh"] = submit_script(plan, limit)
    return out

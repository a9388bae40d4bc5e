"""torchtitan job file for model-parallel plans: FSDP2 + TP (2-D), FSDP2 + TP + PP (3-D), CP.

The plain FSDP2 script (torchrun.py) covers data parallelism; a plan the search runs on torchtitan
with tensor, pipeline or context parallelism gets a job file that torchtitan itself runs:

    torchrun ... -m torchtitan.train --job.config_file torchtitan.toml

Written for torchtitan v0.2.2 (73a0e697), its newest release, which loads TOML job files
(torchtitan/config/manager.py; main after v0.2.x takes Python configs instead). Every key is one of
that release's JobConfig keys (torchtitan/config/job_config.py; launch/data/engine_flags.csv).

torchtitan builds only the architectures it registers, by name and flavor (torchtitan/models/*/
__init__.py); launch/data/torchtitan_models.csv lists the dense ones with their shapes, and a plan
whose ModelSpec matches none is refused rather than written. Batch arithmetic
(torchtitan/train.py, distributed/pipeline_parallel.py at v0.2.2): gradient accumulation =
global_batch_size / (local_batch_size x data-parallel degree); under PP the local batch is cut into
local_batch_size / pipeline_parallel_microbatch_size micro-batches, which must be at least the
number of stages (1F1B), so the plan's m micro-batches of mb sequences become one local batch of
m x mb with micro-batch size mb.
"""
from __future__ import annotations

import csv
import functools
from importlib import resources

from ._common import (Plan, check_train_precision, hash_header, launch_script, require_training, toml_text,
                      torchrun_argv, unsupported)
from ._train import learning_rate

VERSION = "v0.2.2 (73a0e697)"


@functools.cache
def _flavors() -> tuple[dict, ...]:
    text = (resources.files("gpuplan.launch") / "data" / "torchtitan_models.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def flavor_for(spec) -> tuple[str, str] | None:
    """(model.name, model.flavor) of the torchtitan architecture with this ModelSpec's shape, or None."""
    for r in _flavors():
        if (int(r["layers"]) == spec.num_layers and int(r["dim"]) == spec.hidden_size
                and int(r["heads"]) == spec.num_heads and int(r["kv_heads"]) == spec.num_kv_heads
                and int(r["ffn_dim"]) == spec.intermediate_size and int(r["vocab"]) == spec.vocab_size
                and (r["qk_norm"] == "true") == (spec.traits.qk_norm != "none")
                and (r["tie_embeddings"] == "true") == bool(spec.tie_embeddings) and not spec.num_experts):
            return r["name"], r["flavor"]
    return None


def _checks(plan: Plan) -> tuple[str, str]:
    require_training(plan)
    check_train_precision(plan)
    s, t, p = plan.s, plan.s.train, plan.s.parallel
    fl = flavor_for(plan.spec)
    if fl is None:
        known = ", ".join(sorted({f"{r['name']} {r['flavor']}" for r in _flavors()}))
        raise unsupported(plan, f"model '{plan.spec.name}' with tp={p.tp}, pp={p.pp}, cp={p.cp}",
                          f"torchtitan {VERSION} builds only the architectures it registers ({known}); this model's "
                          "shape matches none of them.", ("megatron",), "use framework: megatron, or")
    if t.method != "full":
        raise unsupported(plan, f"method '{t.method}'", "torchtitan trains full models (no LoRA/QLoRA).",
                          ("hf", "deepspeed"))
    if t.precision not in ("bf16", "fp32"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "this torchtitan job file trains in bf16 mixed "
                          "precision or fp32 (mixed_precision_param takes bfloat16 or float32).", ("megatron",),
                          "use bf16, or")
    if t.optimizer != "adamw":
        raise unsupported(plan, f"optimizer '{t.optimizer}'", "the job file uses torchtitan's AdamW.", ("megatron",),
                          "use adamw, or")
    if p.ep > 1:
        raise unsupported(plan, f"ep={p.ep}", "expert parallelism is not written into torchtitan job files here "
                          "(dense architectures only).", ("megatron",))
    if p.zero == 0 and s.dp > 1:
        raise unsupported(plan, f"zero 0 with dp={s.dp} and tp={p.tp}, pp={p.pp}, cp={p.cp}",
                          "torchtitan's DDP refuses more than one parallel dimension (\"DDP has not supported > 1D "
                          "parallelism\", torchtitan/models/llama3/infra/parallelize.py).", ("megatron",),
                          "set parallel.zero: 3 (FSDP2), or")
    if p.offload == "optimizer":
        raise unsupported(plan, "offload 'optimizer' alone", "FSDP2's CPUOffloadPolicy (training.enable_cpu_offload) "
                          "offloads parameters, gradients and the optimizer step together.", ("megatron",),
                          "use offload: optimizer+params, or")
    if p.pp > 1:
        m = plan.grad_accum
        if m < p.pp:
            raise unsupported(plan, f"pp={p.pp} with {m} micro-batches per step",
                              f"torchtitan's 1F1B schedule needs at least as many micro-batches as stages "
                              f"({m} < {p.pp}).", ("megatron",),
                              f"raise train.global_batch to at least {p.pp * plan.micro_batch * s.dp}, or")
        if p.pp > plan.spec.num_layers:
            raise unsupported(plan, f"pp={p.pp}", f"more stages than the model's {plan.spec.num_layers} layers.", ())
    return fl


def files(plan: Plan) -> dict[str, str]:
    name, flavor = _checks(plan)
    s, t, p = plan.s, plan.s.train, plan.s.parallel
    steps = plan.train_steps or 1000
    pipelined = p.pp > 1
    local = plan.micro_batch * plan.grad_accum if pipelined else plan.micro_batch
    parallelism = {
        # hybrid sharding (parallel.shard_group): FSDP2 over the shard degree, replicated across the rest (HSDP)
        "data_parallel_replicate_degree": p.replicas,
        "data_parallel_shard_degree": p.zero_shard_dp,
        # under PP torchtitan's "default" keeps a stage's parameters gathered between forward and
        # backward, which is what the memory estimate assumes (estimate/memory.py _pipeline_fsdp_hold)
        "fsdp_reshard_after_forward": ("default" if pipelined else "always") if p.zero >= 3 else "never",
        "tensor_parallel_degree": p.tp,
        "pipeline_parallel_degree": p.pp,
        "context_parallel_degree": p.cp,
    }
    if pipelined:
        parallelism.update({"pipeline_parallel_schedule": "1F1B", "pipeline_parallel_microbatch_size": plan.micro_batch})
    tables = {
        "job": {"dump_folder": "./outputs", "description": f"gpuplan: {plan.plan_line}"},
        "model": {"name": name, "flavor": flavor, "hf_assets_path": f"./assets/hf/{plan.spec.name}"},
        "optimizer": {"name": "AdamW", "lr": learning_rate(plan), "eps": 1e-8, "weight_decay": 0.1},
        "lr_scheduler": {"warmup_steps": min(2000, max(1, steps // 20))},
        "training": {"local_batch_size": local, "global_batch_size": plan.global_batch, "seq_len": t.seq_len,
                     "max_norm": 1.0, "steps": steps, "dataset": "c4",
                     "mixed_precision_param": "bfloat16" if t.precision == "bf16" else "float32",
                     "mixed_precision_reduce": "float32", "enable_cpu_offload": p.offload == "optimizer+params"},
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": t.recompute, "selective_ac_option": "op"},
        "checkpoint": {"enable": True, "folder": "checkpoint", "interval": min(500, steps)},
    }
    notes = [f"a torchtitan job file for torchtitan {VERSION} (pip install torchtitan==0.2.2); run it with "
             "launch.sh (torchrun -m torchtitan.train --job.config_file torchtitan.toml)",
             f"architecture: torchtitan's {name} {flavor} (layers, hidden, heads, KV heads, MLP width, vocabulary "
             "matched to this model; RoPE settings are the flavor's own)",
             f"tokenizer: put the HF tokenizer files in ./assets/hf/{plan.spec.name} (torchtitan's "
             "scripts/download_hf_assets.py --assets tokenizer)",
             "data: training.dataset c4 streams allenai/c4 from the Hub; set training.dataset_path for a local copy",
             "resumes from the newest ./outputs/checkpoint/step-N (checkpoint.load_step -1, torchtitan's default)"]
    if pipelined:
        notes.append(f"pipeline: local batch {local} = {plan.grad_accum} micro-batches of {plan.micro_batch} "
                     "(1F1B); gradient accumulation 1")
    if p.zero in (1, 2):
        notes.append("FSDP2 has no ZeRO-1: gradients are sharded too (ZeRO-2 layout, reshard_after_forward never)")
    if plan.train_steps is None:
        notes.append("train.tokens not set: [training] steps is a placeholder (1000)")
    out = {"torchtitan.toml": hash_header(plan, notes) + toml_text(tables)}
    argv = torchrun_argv(plan, "-m", ["torchtitan.train", "--job.config_file", "torchtitan.toml", '"$@"'])
    out["launch.sh"] = launch_script(plan, argv)
    return out

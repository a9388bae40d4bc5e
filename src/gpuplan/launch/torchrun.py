"""torchrun + FSDP2: a launch script, a torchtitan-style TOML and a plain train_fsdp2.py that reads it.

The TOML's section and key names follow torchtitan v0.2.2's JobConfig (torchtitan/config/job_config.py
at tag v0.2.2, 73a0e697) where torchtitan has the setting ([training], [parallelism],
[activation_checkpoint], [optimizer], [lr_scheduler], [checkpoint]); [model] and [gpuplan] are read
only by train_fsdp2.py. The TOML is train_fsdp2.py's input, not a torchtitan job file: torchtitan
after v0.2.x (main at b5bcd76c, torchtitan/config/manager.py) loads no TOML at all but a Python
function returning Trainer.Config (--module/--config), so the file says which version it mirrors.
"""
from __future__ import annotations

from ._common import (Plan, launch_script, check_train_precision, hash_header, json_text, require_training,
                      toml_text, torchrun_argv, unsupported)
from ._train import attn_impl, learning_rate, lora_config, require_data_parallel_only

TRAIN_FSDP2_PY = '''
"""Plain FSDP2 training loop driven by train_fsdp2.toml (written by gpuplan).

  torchrun --standalone --nproc-per-node N train_fsdp2.py --config train_fsdp2.toml
  torchrun --standalone --nproc-per-node 2 train_fsdp2.py --smoke      # CPU/gloo, tiny model, 2 steps

Weights: [model] init = "random" builds the architecture from model_config.json on the meta device
(no download; each rank materialises only its shard) and initialises it; "pretrained" loads the
HF checkpoint on every rank's CPU first (host RAM: ranks per node x checkpoint size).
Data: random tokens (measures the plan's memory and speed), or [training] dataset = a path to a
flat binary file of token ids (uint32) read with numpy.memmap.
Checkpoints: [checkpoint] enable saves model + optimizer with torch.distributed.checkpoint every
`interval` steps, at the last step and on SIGTERM, into <dump_folder>/<folder>/step-N; a restart
resumes from the newest complete step-N (the same layout torchtitan uses).
"""
import argparse
import json
import math
import os
import signal
import time
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent


def latest_step(folder):
    """The newest step-N folder whose checkpoint finished (dcp writes .metadata last), or 0."""
    steps = [int(p.name[5:]) for p in folder.glob("step-*") if p.name[5:].isdigit() and (p / ".metadata").exists()]
    return max(steps, default=0)


def checkpoint_state(model, optim):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd}


def save_checkpoint(folder, step, model, optim):
    import torch.distributed.checkpoint as dcp
    dcp.save(checkpoint_state(model, optim), checkpoint_id=str(folder / f"step-{step}"))


def load_checkpoint(folder, step, model, optim):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict
    state = checkpoint_state(model, optim)
    dcp.load(state, checkpoint_id=str(folder / f"step-{step}"))
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])


def read_toml(path):
    try:
        import tomllib
    except ImportError:                      # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def sac_context():
    """Selective activation checkpointing at op level: keep matmul and attention outputs,
    recompute the cheap element-wise ops (norms, activations, rotary) in backward."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    keep = {aten.mm.default, aten.addmm.default, aten.bmm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        op = getattr(aten, name, None)
        if op is not None:
            keep.add(op.default)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def decoder_layers(model):
    for path in ("model.layers", "base_model.model.model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise SystemExit("cannot find the decoder layers of this model; edit decoder_layers() in train_fsdp2.py")


def init_weights(model, std, model_type):
    """Initialise a model materialised with to_empty() (works on FSDP2's sharded DTensors)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or name.endswith("bias"):
                p.zero_()
            elif "norm" in name or "ln_" in name:
                p.zero_() if model_type.startswith("gemma") else p.fill_(1.0)
            else:
                p.normal_(0.0, std)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(HERE / "train_fsdp2.toml"))
    ap.add_argument("--smoke", action="store_true", help="CPU + gloo, tiny random model, 2 steps")
    ap.add_argument("--steps", type=int, default=None, help="override [training] steps")
    a = ap.parse_args()
    cfg = read_toml(a.config)
    tr, par, ac, opt_cfg, mdl, gp = (cfg["training"], cfg["parallelism"], cfg["activation_checkpoint"],
                                      cfg["optimizer"], cfg["model"], cfg.get("gpuplan", {}))
    device_type = "cpu" if a.smoke or not torch.cuda.is_available() else "cuda"
    dist.init_process_group("gloo" if device_type == "cpu" else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    device = torch.device(device_type, local_rank if device_type == "cuda" else 0)

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    seq_len, micro = tr["seq_len"], tr["local_batch_size"]
    steps = a.steps or tr["steps"]
    param_dtype = getattr(torch, tr["mixed_precision_param"])
    master_dtype = getattr(torch, gp.get("master_dtype", "float32"))
    attn = mdl.get("attn_implementation", "sdpa")
    if attn == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            attn = "sdpa"
    init = mdl.get("init", "random")
    config_dict = json.loads((HERE / mdl["config"]).read_text())
    config_dict.pop("_gpuplan", None)
    if a.smoke:
        init, attn, seq_len, micro, steps = "random", "sdpa", 32, 1, a.steps or 2
        param_dtype = torch.bfloat16 if param_dtype != torch.float32 else param_dtype
        config_dict.update(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, vocab_size=256, bos_token_id=0, eos_token_id=0,
                           pad_token_id=None)
    config = AutoConfig.for_model(**config_dict)

    if init == "pretrained":
        model = AutoModelForCausalLM.from_pretrained(mdl["hf_id"], dtype=master_dtype, attn_implementation=attn)
    else:
        from accelerate import init_empty_weights
        with init_empty_weights(include_buffers=False):   # parameters on meta, buffers (rotary) real
            model = AutoModelForCausalLM.from_config(config, dtype=master_dtype, attn_implementation=attn)
    if gp.get("method") == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(**cfg["lora"]))
    model.config.use_cache = False

    layers = decoder_layers(model)
    if ac["mode"] != "none":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
        kw = {"context_fn": sac_context} if ac["mode"] == "selective" else {}
        for i in range(len(layers)):
            layers[i] = checkpoint_wrapper(layers[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT, **kw)

    zero = gp.get("zero", 3)
    if zero == 0:
        from torch.nn.parallel import DistributedDataParallel
        buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        model.to_empty(device=device) if init != "pretrained" else model.to(device)
        if init != "pretrained":
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
            init_weights(model, config.initializer_range if hasattr(config, "initializer_range") else 0.02,
                         config.model_type)
        model = model.to(param_dtype) if param_dtype != master_dtype else model
        model = DistributedDataParallel(model, device_ids=[local_rank] if device_type == "cuda" else None)
    else:
        rep = par.get("data_parallel_replicate_degree", 1)
        # a 2-D mesh makes fully_shard hybrid (HSDP): shard over the inner dim, replicate over the outer
        mesh = (init_device_mesh(device_type, (rep, world // rep), mesh_dim_names=("dp_replicate", "dp_shard"))
                if rep > 1 else init_device_mesh(device_type, (world,)))
        mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=getattr(torch, tr["mixed_precision_reduce"]))
        reshard = par["fsdp_reshard_after_forward"] != "never"
        extra = {"offload_policy": CPUOffloadPolicy()} if gp.get("offload") == "optimizer+params" else {}
        for layer in layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, **extra)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, **extra)
        if init != "pretrained":
            buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
            model.to_empty(device="cpu" if extra else device)
            with torch.no_grad():
                for n, b in model.named_buffers():
                    b.copy_(buffers[n])
            init_weights(model, getattr(config, "initializer_range", 0.02), config.model_type)

    params = [p for p in model.parameters() if p.requires_grad]
    name = opt_cfg["name"]
    impl = {"fused": True} if opt_cfg.get("implementation") == "fused" and device_type == "cuda" else {"foreach": True}
    if name == "AdamW":
        optim = torch.optim.AdamW(params, lr=opt_cfg["lr"], betas=(0.9, 0.95), eps=opt_cfg["eps"],
                                  weight_decay=opt_cfg["weight_decay"], **impl)
    elif name == "SGD":
        optim = torch.optim.SGD(params, lr=opt_cfg["lr"], momentum=0.9, weight_decay=opt_cfg["weight_decay"], **impl)
    else:
        optim = torch.optim.Adafactor(params, lr=opt_cfg["lr"], weight_decay=opt_cfg["weight_decay"])
    warm = cfg["lr_scheduler"]["warmup_steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))

    accum = max(1, tr["global_batch_size"] // (micro * world)) if not a.smoke else 1
    ck = cfg.get("checkpoint", {})
    ck_dir = (HERE / cfg.get("job", {}).get("dump_folder", "outputs") / ck.get("folder", "checkpoint")).resolve()
    start = latest_step(ck_dir) if ck.get("enable") else 0
    if start:
        load_checkpoint(ck_dir, start, model, optim)
        for _ in range(start):
            sched.step()
        if rank == 0:
            print(f"resumed from {ck_dir / f'step-{start}'}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))     # torchrun/SLURM: save, then exit
    vocab = config.vocab_size
    data = None
    if tr.get("dataset", "random") != "random" and not a.smoke:
        import numpy as np
        data = np.memmap(tr["dataset"], dtype=np.uint32, mode="r")
    gen = torch.Generator().manual_seed(1234 + rank + 7919 * start)
    pos = (rank + start * accum * world) * micro * seq_len         # skip the batches already trained on
    if data is not None:
        pos %= max(1, len(data) - micro * seq_len)

    def batch():
        nonlocal pos
        if data is None:
            ids = torch.randint(0, vocab, (micro, seq_len), generator=gen)
        else:
            n = micro * seq_len
            if pos + n > len(data):
                pos = rank * n
            ids = torch.from_numpy(data[pos:pos + n].astype("int64")).view(micro, seq_len)
            pos += world * n
        return ids.to(device)

    model.train()
    t_last = time.perf_counter()
    for step in range(start + 1, steps + 1):
        for _ in range(accum):
            ids = batch()
            loss = model(input_ids=ids, labels=ids).loss / accum
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, tr["max_norm"])
        optim.step()
        sched.step()
        optim.zero_grad(set_to_none=True)
        if step == 1 or step % 10 == 0 or step == steps:
            dt = time.perf_counter() - t_last
            t_last = time.perf_counter()
            n_steps = 1 if step == 1 else (10 if step % 10 == 0 else step % 10)
            tok = micro * seq_len * accum * n_steps / dt
            mem = torch.cuda.max_memory_allocated() / 2**30 if device_type == "cuda" else float("nan")
            if rank == 0:
                print(f"step {step}/{steps} loss {loss.item() * accum:.4f} grad_norm {float(norm):.3f} "
                      f"{tok:,.0f} tokens/s/GPU peak {mem:.2f} GiB", flush=True)
        if ck.get("enable"):
            flag = torch.tensor([float(bool(stop))], device=device)
            dist.all_reduce(flag)                                   # every rank saves, or none
            if step % ck.get("interval", 500) == 0 or step == steps or flag.item():
                save_checkpoint(ck_dir, step, model, optim)
                if rank == 0:
                    print(f"saved {ck_dir / f'step-{step}'}", flush=True)
            if flag.item():
                break
    if rank == 0 and device_type == "cuda" and gp.get("predicted_peak_bytes_per_gpu"):
        print(f"gpuplan predicted peak {gp['predicted_peak_bytes_per_gpu'] / 2**30:.2f} GiB per GPU")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

_OPTIM = {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}


def files(plan: Plan) -> dict[str, str]:
    s, t, p = plan.s, plan.s.train, plan.s.parallel
    if s.is_training and (p.tp > 1 or p.pp > 1 or p.cp > 1):
        # tensor/pipeline/context parallel: a job file for torchtitan itself (launch/torchtitan.py)
        from . import torchtitan
        return torchtitan.files(plan)
    require_training(plan)
    check_train_precision(plan)
    require_data_parallel_only(plan, ("megatron",))
    if p.ep > 1:
        raise unsupported(plan, f"ep={p.ep}", "the FSDP2 script has no expert parallelism.", ("megatron",))
    if t.method == "qlora":
        raise unsupported(plan, "method 'qlora'", "4-bit base weights are not sharded by this FSDP2 script.",
                          ("hf", "deepspeed"))
    if t.precision in ("fp16", "fp8"):
        raise unsupported(plan, f"train.precision '{t.precision}'",
                          "the FSDP2 script trains in bf16 or fp32 (fp16 needs loss scaling, fp8 needs torchao).",
                          ("hf", "deepspeed", "megatron"), "use bf16, or")
    if t.optimizer not in _OPTIM:
        why = ("the FSDP2 script builds one torch.optim optimizer over all parameters; torch.optim.Muon takes only "
               "2-D hidden matrices and needs a second AdamW for the rest, which the script does not write."
               if t.optimizer == "muon" else "torch.optim has no such optimizer.")
        raise unsupported(plan, f"optimizer '{t.optimizer}'", why, ("hf", "deepspeed"),
                          "use adamw, sgd or adafactor, or")
    if p.offload == "optimizer":
        raise unsupported(plan, "offload 'optimizer' alone", "FSDP2's CPUOffloadPolicy offloads parameters, "
                          "gradients and the optimizer step together.", ("deepspeed",), "use offload: optimizer+params, or")
    if p.offload != "none" and p.zero == 0:
        raise unsupported(plan, "offload with zero 0", "the FSDP2 script offloads through FSDP's CPUOffloadPolicy; "
                          "with zero 0 it runs plain DDP, which cannot offload.", ("deepspeed",),
                          "set parallel.zero to 2 or 3, or")
    notes = ["TOML keys as that torchtitan's JobConfig names them; read by train_fsdp2.py (torchtitan after "
             "v0.2.x takes Python configs via --module/--config, not TOML)",
             "resumes from the newest ./outputs/checkpoint/step-N ([checkpoint] enable)"]
    if p.zero == 1:
        notes.append("FSDP2 has no ZeRO-1: gradients are sharded too (ZeRO-2 layout, reshard_after_forward=never)")
    if plan.train_steps is None:
        notes.append("train.tokens not set: [training] steps is a placeholder (1000)")
    est = plan.estimate or {}
    mixed = t.precision == "bf16"
    master = "float32" if (t.master_weights or t.precision == "fp32") else "bfloat16"
    tables = {
        "job": {"description": f"gpuplan: {plan.plan_line}", "dump_folder": "./outputs"},
        "model": {"hf_id": plan.model_ref, "config": "model_config.json",
                  "init": "random" if s.task == "train" else "pretrained",
                  "attn_implementation": attn_impl(plan)},
        "optimizer": {"name": _OPTIM[t.optimizer], "lr": learning_rate(plan), "eps": 1e-8,
                      "weight_decay": 0.1 if t.method == "full" else 0.0, "implementation": t.optimizer_impl},
        "lr_scheduler": {"warmup_steps": 100 if plan.train_steps is None else min(2000, max(1, plan.train_steps // 20))},
        "training": {"local_batch_size": plan.micro_batch, "global_batch_size": plan.global_batch,
                     "seq_len": t.seq_len, "max_norm": 1.0, "steps": plan.train_steps or 1000,
                     "mixed_precision_param": "bfloat16" if mixed else "float32",
                     "mixed_precision_reduce": "float32", "dataset": "random"},
        "parallelism": {"data_parallel_replicate_degree": p.replicas if p.zero else s.dp,
                        "data_parallel_shard_degree": p.zero_shard_dp if p.zero else 1,
                        "fsdp_reshard_after_forward": "always" if p.zero == 3 else "never",
                        "tensor_parallel_degree": 1, "pipeline_parallel_degree": 1, "context_parallel_degree": 1},
        "activation_checkpoint": {"mode": t.recompute, "selective_ac_option": "op"},
        "checkpoint": {"enable": True, "folder": "checkpoint", "interval": min(500, plan.train_steps or 500)},
    }
    if t.method == "lora":
        lc = lora_config(plan)
        tables["lora"] = {k: v for k, v in lc.items()}
    tables["gpuplan"] = {"method": t.method, "zero": p.zero, "offload": p.offload, "master_dtype": master,
                         "predicted_peak_bytes_per_gpu": (est.get("memory") or {}).get("peak_bytes_per_gpu")}
    out = {"train_fsdp2.toml": hash_header(plan, notes) + toml_text(tables)}
    out["train_fsdp2.py"] = hash_header(plan, shebang="#!/usr/bin/env python") + TRAIN_FSDP2_PY.lstrip("\n")
    out["model_config.json"] = json_text(plan, dict(plan.spec.config))
    argv = torchrun_argv(plan, "train_fsdp2.py", ["--config", "train_fsdp2.toml", '"$@"'])
    out["launch.sh"] = launch_script(plan, argv)
    return out

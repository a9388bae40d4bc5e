"""DeepSpeed ZeRO through HF Trainer: ds_config.json (ZeRO stage, offload, batch sizes, bf16/fp16,
gradient clipping) plus the shared TrainingArguments/run files and a torchrun launch script."""
from __future__ import annotations

import math
from typing import Any

from ._common import Plan, json_text, launch_script, torchrun_argv, unsupported
from ._train import grad_scaler, learning_rate
from .hf import check_hf_family, hf_family_files


DEEPSPEED_VERSION = "0.19.8"


def _autotp_checks(plan: Plan) -> None:
    """What DeepSpeed AutoTP training (HF Trainer + DeepSpeed, `tensor_parallel.autotp_size`) runs."""
    p = plan.s.parallel
    if p.pp > 1 or p.cp > 1:
        raise unsupported(plan, f"pp={p.pp}, cp={p.cp}", "DeepSpeed AutoTP through the HF Trainer has no pipeline "
                          "or context parallelism.", ("megatron", "torchrun"), "set parallel.pp/cp to 1, or")
    if p.tp > 1:
        if plan.spec.num_experts:
            raise unsupported(plan, f"tp={p.tp} on a mixture-of-experts model",
                              "transformers 5.24 refuses its MoE weight conversions under DeepSpeed tensor "
                              "parallelism (integrations/deepspeed.py: \"not yet implemented\").", ("megatron",))
        if p.offload == "optimizer+params":
            raise unsupported(plan, f"tp={p.tp} with offload 'optimizer+params'", "parameter offload with AutoTP is "
                              "not verified against DeepSpeed's sources here.", ("megatron",),
                              "use offload: optimizer, or")
        if plan.spec.num_kv_heads % p.tp:
            raise unsupported(plan, f"tp={p.tp}", f"AutoTP needs the {plan.spec.num_kv_heads} KV heads to split "
                              f"evenly (runtime/engine.py: autotp_size exceeds/divides the KV head count).", ())


def ds_config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    p, t = plan.s.parallel, plan.s.train
    notes: list[str] = []
    _autotp_checks(plan)
    if p.offload == "optimizer+params" and p.zero < 3:
        raise unsupported(plan, f"offload 'optimizer+params' with zero {p.zero}",
                          "DeepSpeed offloads parameters only under ZeRO stage 3.", (),
                          "set parallel.zero: 3, or offload: optimizer.")
    if p.offload != "none" and p.zero == 0:
        raise unsupported(plan, "offload without ZeRO", "DeepSpeed offloads optimizer state only under ZeRO 1-3.", (),
                          "set parallel.zero to 1, 2 or 3.")
    zero: dict[str, Any] = {"stage": p.zero}
    if p.zero >= 1:
        zero.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 5e8})
    if p.zero >= 2:
        zero["allgather_bucket_size"] = 5e8
    if p.offload in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if p.zero == 3:
        zero.update({"stage3_prefetch_bucket_size": 5e8, "stage3_param_persistence_threshold": 1e6,
                     "stage3_gather_16bit_weights_on_model_save": True})
    cfg: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
    }
    if p.tp > 1:
        # AutoTP (DeepSpeed >= 0.16.4; with ZeRO-3 in 0.19): the TP group repeats one batch, so the
        # data-parallel width is world / tp. DeepSpeedConfig checks train_batch_size against the whole
        # world when no mpu is passed (runtime/config.py), so the batch is given as micro-batch and
        # accumulation only: micro x accumulation x dp = the plan's global batch.
        del cfg["train_batch_size"]
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
        notes.append(f"AutoTP: tensor_parallel.autotp_size {p.tp} (DeepSpeed >= 0.16.4, ZeRO-3 with AutoTP in "
                     f"{DEEPSPEED_VERSION}; transformers and accelerate apply it from this file); global batch "
                     f"{plan.micro_batch} x {plan.grad_accum} x dp {plan.s.dp} = {plan.global_batch}")
    if t.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif t.precision == "fp16":
        g = grad_scaler(plan)
        # loss_scale 0 = dynamic; 2**initial_scale_power is the starting scale
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": int(math.log2(g["init_scale"])),
                       "loss_scale_window": g["growth_interval"], "hysteresis": 2, "min_loss_scale": 1}
    if t.optimizer == "adamw":
        # DeepSpeed's own AdamW (CPU Adam when offloaded); other optimizers come from the Trainer
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": learning_rate(plan), "betas": [0.9, 0.95], "eps": 1e-8,
                                                         "weight_decay": 0.0 if t.method != "full" else 0.1}}
    elif p.offload != "none":
        raise unsupported(plan, f"optimizer '{t.optimizer}' with offload",
                          "DeepSpeed offloads only its own (CPU) Adam optimizer.", (), "use optimizer: adamw.")
    else:
        notes.append(f"optimizer '{t.optimizer}' is created by the HF Trainer (TrainingArguments.optim), not DeepSpeed")
    cfg.update({"steps_per_print": 10, "wall_clock_breakdown": False})
    return cfg, notes


def files(plan: Plan) -> dict[str, str]:
    check_hf_family(plan)
    cfg, notes = ds_config(plan)
    out = {"ds_config.json": json_text(plan, cfg, notes)}
    out.update(hf_family_files(plan, deepspeed_file="ds_config.json", extra_notes=notes))
    argv = torchrun_argv(plan, "train_hf.py", ['"$@"'])
    out["launch.sh"] = launch_script(plan, argv)
    return out

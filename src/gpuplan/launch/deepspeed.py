"""DeepSpeed ZeRO through HF Trainer: ds_config.json (ZeRO stage, offload, batch sizes, bf16/fp16,
gradient clipping) plus the shared TrainingArguments/run files and a torchrun launch script."""
from __future__ import annotations

import math
from typing import Any

from ._common import Plan, json_text, launch_script, torchrun_argv, unsupported
from ._train import grad_scaler, learning_rate, require_data_parallel_only
from .hf import check_hf_family, hf_family_files


def ds_config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    p, t = plan.s.parallel, plan.s.train
    notes: list[str] = []
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
    require_data_parallel_only(plan, ("megatron",))
    cfg, notes = ds_config(plan)
    out = {"ds_config.json": json_text(plan, cfg, notes)}
    out.update(hf_family_files(plan, deepspeed_file="ds_config.json", extra_notes=notes))
    argv = torchrun_argv(plan, "train_hf.py", ['"$@"'])
    out["launch.sh"] = launch_script(plan, argv)
    return out

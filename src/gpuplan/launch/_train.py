"""Training-side translation shared by the torchrun, hf, deepspeed and megatron generators."""
from __future__ import annotations

from typing import Any

from ._common import Plan, unsupported

# our optimizer name -> HF TrainingArguments.optim (transformers OptimizerNames)
HF_OPTIM = {"adamw": "adamw_torch", "adamw-8bit": "adamw_bnb_8bit", "sgd": "sgd",
            "adafactor": "adafactor", "lion": "lion_32bit", "paged-adamw": "paged_adamw_32bit",
            "paged-adamw-8bit": "paged_adamw_8bit", "galore": "galore_adamw"}


def hf_optim(plan: Plan) -> dict[str, Any]:
    """TrainingArguments' optimizer fields. GaLore through the Trainer (transformers v5.24.0
    `OptimizerNames.GALORE_ADAMW`, needs the galore-torch package) takes its target modules and its rank and
    projection gap as `optim_target_modules` / `optim_args`; the Trainer has no Muon or SOAP."""
    t = plan.s.train
    if t.optimizer not in HF_OPTIM:
        raise unsupported(plan, f"optimizer '{t.optimizer}'", "HF TrainingArguments.optim has no such optimizer "
                          "(transformers v5.24.0 OptimizerNames).", (),
                          "use optimizer adamw, adamw-8bit, paged-adamw(-8bit), adafactor or galore, or write "
                          f"your own training loop with the {t.optimizer} reference implementation (docs/optimizers.md).")
    out: dict[str, Any] = {"optim": ("adamw_torch_fused" if t.optimizer == "adamw" and t.optimizer_impl == "fused"
                                     else HF_OPTIM[t.optimizer])}
    if t.optimizer == "galore":
        out["optim_target_modules"] = [r".*.attn.*", r".*.mlp.*"]
        out["optim_args"] = f"rank={t.galore_rank}, update_proj_gap={t.galore_update_gap}"
    return out

TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16"}


def learning_rate(plan: Plan) -> float:
    t = plan.s.train
    if t.method in ("lora", "qlora"):
        return 2e-4
    return 3e-4 if plan.s.task == "train" else 1e-5


def warmup_steps(plan: Plan) -> int:
    steps = plan.train_steps or 1000
    return max(1, min(2000, steps // 20))


def grad_scaler(plan: Plan) -> dict[str, int]:
    """fp16 loss scaling, chosen on purpose rather than left at GradScaler's 65536 / 2000.

    init_scale 2**12: gradients of a pretrained LLM's loss rarely need more than ~2**12 of headroom,
    and starting at 2**16 only skips the first few optimizer steps while the scale halves down.
    growth_interval: about 1/20 of the run (clamped to 100..2000) so that the scale can grow back
    after an overflow halved it; the default 2000 never recovers in a few-hundred-step fine-tune."""
    steps = plan.train_steps or 1000
    return {"init_scale": 2 ** 12, "growth_factor": 2, "backoff_factor": 0.5,
            "growth_interval": int(min(2000, max(100, steps // 20)))}


def load_dtype(plan: Plan) -> str:
    """dtype the model's parameters are created in (the optimizer's master copy lives there)."""
    t = plan.s.train
    if t.method == "qlora":
        return TORCH_DTYPE["fp16" if t.precision == "fp16" else "bf16"]
    if t.method == "lora":
        return TORCH_DTYPE["fp16" if t.precision == "fp16" else ("fp32" if t.precision == "fp32" else "bf16")]
    if t.precision == "fp32" or t.master_weights:
        return "float32"
    return TORCH_DTYPE[t.precision]


def attn_impl(plan: Plan) -> str:
    return {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}[plan.s.train.attention]


def lora_config(plan: Plan) -> dict[str, Any]:
    t = plan.s.train
    return {"r": t.lora_rank, "lora_alpha": t.lora_alpha or 2 * t.lora_rank, "lora_dropout": 0.0,
            "target_modules": t.lora_targets if isinstance(t.lora_targets, str) else list(t.lora_targets),
            "bias": "none", "task_type": "CAUSAL_LM"}


def bnb_config(plan: Plan, quant_storage: str | None) -> dict[str, Any]:
    t = plan.s.train
    d = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": t.qlora_double_quant,
         "bnb_4bit_compute_dtype": "float16" if t.precision == "fp16" else "bfloat16"}
    if quant_storage:
        d["bnb_4bit_quant_storage"] = quant_storage
    return d


def require_data_parallel_only(plan: Plan, alternatives=("megatron",)) -> None:
    p = plan.s.parallel
    if p.tp > 1 or p.pp > 1 or p.cp > 1:
        raise unsupported(plan, f"tp={p.tp}, pp={p.pp}, cp={p.cp}",
                          "this engine's generated launch covers data parallelism with ZeRO/FSDP sharding only.",
                          alternatives, "set parallel.tp/pp/cp to 1 (shard with parallel.zero instead), or")


def hf_training_args(plan: Plan, *, deepspeed_file: str | None = None) -> dict[str, Any]:
    t = plan.s.train
    steps = plan.train_steps
    args: dict[str, Any] = {
        "output_dir": "outputs",
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "max_steps": steps if steps is not None else 1000,
        "learning_rate": learning_rate(plan),
        "lr_scheduler_type": "cosine",
        "warmup_steps": warmup_steps(plan),
        "weight_decay": 0.0 if t.method in ("lora", "qlora") else 0.1,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "max_grad_norm": 1.0,
        "bf16": t.precision == "bf16",
        "fp16": t.precision == "fp16",
        # transformers 5.x names it activation_checkpointing; gradient_checkpointing is its deprecated
        # alias, "will be removed in v6" (src/transformers/training_args.py at v5.24.0, TrainingArguments)
        "activation_checkpointing": t.recompute != "none",
        "activation_checkpointing_kwargs": {"use_reentrant": False} if t.recompute != "none" else None,
        **hf_optim(plan),
        "logging_steps": 10,
        "save_strategy": "steps",
        "save_steps": 1000,
        "report_to": "none",
        "seed": 0,
        "dataloader_num_workers": 2,
        "remove_unused_columns": False,
    }
    if deepspeed_file:
        args["deepspeed"] = deepspeed_file
    return {k: v for k, v in args.items() if v is not None}


def hf_notes(plan: Plan) -> list[str]:
    t = plan.s.train
    notes = []
    if t.recompute == "selective":
        notes.append("HF models have no selective recompute; activation_checkpointing recomputes whole layers "
                     "(less memory, ~+33% compute vs the plan's selective recompute)")
    if plan.train_steps is None:
        notes.append("train.tokens not set: max_steps is a placeholder (1000)")
    notes.append("activation_checkpointing is transformers 5.x's name (older releases: gradient_checkpointing); "
                 "train_hf.py resumes from the newest outputs/checkpoint-N")
    if t.precision == "fp16":
        g = grad_scaler(plan)
        notes.append(f"fp16 loss scaling: init_scale {g['init_scale']}, growth_interval {g['growth_interval']} (see run.json)")
    return notes


def run_json(plan: Plan) -> dict[str, Any]:
    """What train_hf.py needs beyond TrainingArguments (model, method, data, loss scaling)."""
    t = plan.s.train
    est = plan.estimate or {}
    return {
        "model": plan.model_ref,
        "model_config": "model_config.json",
        "init": "random" if plan.s.task == "train" else "pretrained",
        "method": t.method,
        "load_dtype": load_dtype(plan),
        "attn_implementation": attn_impl(plan),
        "seq_len": t.seq_len,
        "grad_scaler": grad_scaler(plan) if t.precision == "fp16" else None,
        "predicted_peak_bytes_per_gpu": (est.get("memory") or {}).get("peak_bytes_per_gpu"),
    }

"""mlx-lm launch files (issue 20): `mlx_lora.yaml` for `mlx_lm.lora -c`, and `launch.sh`, for Apple silicon.

Written for mlx-lm v0.31.3 (ed1fca4c). `mlx_lm.lora` (mlx_lm/lora.py) parses its command line with argparse
(`build_parser`), then fills every argument left unset from the `-c` YAML file and the rest from
`CONFIG_DEFAULTS` (`main`); a YAML key it does not know is copied in silently, so scripts/engine_facts_mlxlm.py
reads the parser's arguments and the CONFIG_DEFAULTS keys at that tag into launch/data/engine_flags.csv (engine
`mlx-lm`; `mlx-lm-convert` for mlx_lm/convert.py) and tests/test_launch_mlxlm.py checks every key and flag
against them; scripts/check_mlxlm_launch.py runs the tag's own `build_parser` (extracted from the source: the
module imports mlx, which installs only on macOS) on the command and YAML.

What maps where: method lora / full -> fine_tune_type; qlora -> lora on a model that `mlx_lm.convert -q
--q-bits 4 --q-group-size 64` quantized first ("If --model points to a quantized model, the training will use
QLoRA", mlx-lm's LORA.md; mlx's affine 4-bit format, not NF4); precision fp16 / fp32 -> convert --dtype (mlx
trains in the weights' dtype); num_layers -1 (every layer: `model.layers[-max(num_layers, 0):]`); lora_rank /
lora_alpha / lora_dropout -> lora_parameters rank, scale = alpha / rank (mlx's default 20.0 when lora_alpha is
unset), dropout; lora_targets all-linear -> no `keys` (mlx adapts every Linear of each layer by default), a list
-> keys `self_attn.q_proj`, `mlp.gate_proj`, ...; seq_len -> max_seq_length; micro_batch -> batch_size;
accumulation -> grad_accumulation_steps, and `iters` counts micro-steps (tuner/trainer.py: an update every
grad_accumulation_steps iterations); recompute full -> grad_checkpoint; the optimizer by mlx's name (adamw, sgd,
adafactor, muon); a cosine schedule with warmup in the layout of mlx_lm/examples/lora_config.yaml.
"""
from __future__ import annotations

from typing import Any

from ._common import Plan, hash_header, require_objective, require_training, unsupported, yaml_text
from ._train import learning_rate, warmup_steps

MLX_LM_VERSION = "v0.31.3 (ed1fca4c)"
_OPTIM = {"adamw": "adamw", "sgd": "sgd", "adafactor": "adafactor", "muon": "muon"}
_DTYPE = {"fp16": "float16", "fp32": "float32"}
_ATTN_KEYS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP_KEYS = ("gate_proj", "up_proj", "down_proj")
MLX_DEFAULT_SCALE = 20.0        # lora.py CONFIG_DEFAULTS["lora_parameters"]["scale"]
QUANT_DIR = "mlx_model_q4"


def check(plan: Plan) -> None:
    require_training(plan)
    t, p = plan.s.train, plan.s.parallel
    if t.objective != "sft":
        require_objective(plan, "mlx_lm.lora trains a language-model loss (supervised fine-tuning); it has no "
                          "preference, distillation or RL trainer.")
    if plan.count > 1 or p.zero > 0 or p.offload != "none":
        raise unsupported(plan, f"hardware.count {plan.count}" if plan.count > 1 else "ZeRO / offload",
                          "the file written here trains on one Mac (one unified-memory device).",
                          ("hf", "torchrun"), "use one device without ZeRO or offload, or")
    if t.method == "qlora" and t.precision == "fp32":
        raise unsupported(plan, "qlora with precision fp32", "the quantized model's other weights keep the "
                          "model's 16-bit dtype here.", (), "use bf16 or fp16, or")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise unsupported(plan, f"train.precision '{t.precision}'", "mlx trains in the weights' dtype: bf16, fp16 "
                          "or fp32.", ("torchrun", "megatron"), "use bf16, or")
    if t.optimizer not in _OPTIM:
        raise unsupported(plan, f"train.optimizer '{t.optimizer}'", "mlx_lm.lora's optimizers are adam, adamw, muon, "
                          "sgd and adafactor (lora.py build_parser).", ("hf",), "use adamw, sgd, adafactor or muon, or")
    if t.recompute == "selective":
        raise unsupported(plan, "recompute 'selective'", "mlx_lm.lora checkpoints whole layers "
                          "(--grad-checkpoint) or nothing.", ("megatron", "torchrun"), "use recompute full or none, or")
    if t.activation_offload:
        raise unsupported(plan, "activation_offload", "unified memory: there is no host memory to offload to.",
                          ("unsloth", "axolotl"), "remove activation_offload, or")
    if isinstance(t.lora_targets, list) and t.method != "full":
        unknown = [k for k in t.lora_targets if k not in _ATTN_KEYS + _MLP_KEYS]
        if unknown:
            raise unsupported(plan, f"lora_targets {', '.join(unknown)}", "the keys written here are the Llama-style "
                              "module paths of mlx-lm's models (self_attn.q_proj ... mlp.down_proj).", (),
                              "use all-linear or those names, or")


def _dest(flag: str) -> str:
    """The YAML key of an mlx_lm.lora option: argparse's dest for it (`--num-layers` -> `num_layers`). Spelled
    from the flag where the key is also an HF config key, which launch code never reads."""
    return flag.lstrip("-").replace("-", "_")


def lora_keys(targets: list[str]) -> list[str]:
    """Module paths inside one layer of an mlx-lm model (mlx_lm/models/llama.py: self_attn.*, mlp.*)."""
    return [f"self_attn.{k}" if k in _ATTN_KEYS else f"mlp.{k}" for k in targets]


def config(plan: Plan) -> dict[str, Any]:
    t = plan.s.train
    steps = plan.train_steps if plan.train_steps is not None else 1000
    lr = learning_rate(plan)
    warm = warmup_steps(plan)
    cfg: dict[str, Any] = {"model": QUANT_DIR if _converts(plan) else plan.model_ref, "train": True,
                           "fine_tune_type": "full" if t.method == "full" else "lora", "optimizer": _OPTIM[t.optimizer],
                           "data": "REPLACE_WITH_DATA_DIR", "seed": 0, _dest("--num-layers"): -1,
                           "batch_size": plan.micro_batch, "iters": steps * plan.grad_accum,
                           "grad_accumulation_steps": plan.grad_accum, "learning_rate": lr,
                           "lr_schedule": {"name": "cosine_decay", "warmup": warm, "warmup_init": 0.0,
                                           "arguments": [lr, max(1, steps - warm), 0.0]},
                           "max_seq_length": t.seq_len, "grad_checkpoint": t.recompute == "full",
                           "steps_per_report": 10, "steps_per_eval": 200, "val_batches": 25,
                           "adapter_path": "adapters", "save_every": 1000}
    if t.method != "full":
        lp: dict[str, Any] = {"rank": t.lora_rank,
                              "scale": (t.lora_alpha / t.lora_rank) if t.lora_alpha else MLX_DEFAULT_SCALE,
                              "dropout": t.lora_dropout}
        if isinstance(t.lora_targets, list):
            lp = {"keys": lora_keys(t.lora_targets), **lp}
        cfg["lora_parameters"] = lp
    return cfg


def _converts(plan: Plan) -> bool:
    t = plan.s.train
    return t.method == "qlora" or t.precision in _DTYPE


def convert_command(plan: Plan) -> list[str]:
    """`mlx_lm.convert` arguments that make the model the YAML trains on (QLoRA: 4-bit affine, group 64)."""
    t = plan.s.train
    cmd = ["mlx_lm.convert", "--hf-path", plan.model_ref, "--mlx-path", QUANT_DIR]
    if t.method == "qlora":
        cmd += ["-q", "--q-bits", "4", "--q-group-size", "64"]
    if t.precision in _DTYPE:
        cmd += ["--dtype", _DTYPE[t.precision]]
    return cmd


def files(plan: Plan) -> dict[str, str]:
    check(plan)
    t = plan.s.train
    notes = [f"written for mlx-lm {MLX_LM_VERSION} on Apple silicon (pip install mlx-lm)",
             "set `data` to a folder with train.jsonl and valid.jsonl (or a Hugging Face dataset id)"]
    if plan.gpu is not None and plan.gpu.family != "apple":
        notes.append(f"the memory, speed and cost above are those of the plan's GPU ({plan.gpu.id}), not a Mac's: "
                     "plan on an Apple part (`gpuplan gpus apple`, e.g. --gpu m2-ultra) to size it for mlx-lm")
    if plan.train_steps is None:
        notes.append("train.tokens not set: iters is a placeholder (1000 optimizer steps)")
    if t.method == "qlora":
        notes.append("QLoRA: mlx's affine 4-bit (group 64: 4.5 bits per weight), not bitsandbytes NF4")
    if t.method != "full" and not t.lora_alpha:
        notes.append(f"lora_alpha not set: scale {MLX_DEFAULT_SCALE:g}, mlx-lm's default")
    launch = ["set -euo pipefail", 'cd "$(dirname "$0")"']
    if _converts(plan):
        launch.append(f"[ -d {QUANT_DIR} ] || " + " ".join(convert_command(plan)))
    launch.append("mlx_lm.lora -c mlx_lora.yaml")
    return {"mlx_lora.yaml": hash_header(plan, notes) + yaml_text(config(plan)),
            "launch.sh": hash_header(plan, shebang="#!/usr/bin/env bash") + "\n".join(launch) + "\n"}

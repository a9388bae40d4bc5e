"""Megatron-LM / Megatron-core: a torchrun script calling pretrain_gpt.py with the plan's args."""
from __future__ import annotations

from ..models.traits import DEFAULT_ROPE_THETA
from ._common import (Plan, check_train_precision, hash_header, require_training, shell_command, torchrun_argv,
                      unsupported)
from ._train import grad_scaler, learning_rate, warmup_steps


def model_args(plan: Plan) -> list[str]:
    m = plan.spec
    if m.is_mla:
        raise unsupported(plan, f"model '{m.name}' (MLA attention)",
                          "the generic GPT arguments cannot describe multi-latent attention.", ("torchrun", "hf", "deepspeed"),
                          "use Megatron-Bridge's recipe for this model, or")
    args = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
            "--ffn-hidden-size", str(m.intermediate_size), "--num-attention-heads", str(m.num_heads),
            "--kv-channels", str(m.head_dim)]
    if m.num_kv_heads != m.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    args += ["--max-position-embeddings", str(m.max_position), "--position-embedding-type", "rope",
             "--rotary-base", str(int(m.traits.rope_theta or DEFAULT_ROPE_THETA))]
    if m.traits.rope_scaling == "llama3":
        args.append("--use-rope-scaling")        # Llama-3.1 frequency scaling (factor 8)
    args += ["--normalization", "RMSNorm" if m.norm == "rms" else "LayerNorm"]
    if m.gated_mlp:
        args.append("--swiglu")
    if not m.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.traits.mlp_bias:
        args.append("--disable-bias-linear")
        if m.traits.attention_bias:
            args.append("--add-qkv-bias")        # Qwen2: biases on q/k/v only
    if m.is_moe:
        args += ["--num-experts", str(m.num_experts), "--moe-router-topk", str(m.experts_per_tok),
                 "--moe-ffn-hidden-size", str(m.moe_intermediate_size), "--moe-grouped-gemm",
                 "--moe-token-dispatcher-type", "alltoall"]
    return args


def megatron_args(plan: Plan) -> tuple[list[str], list[str]]:
    t, p = plan.s.train, plan.s.parallel
    notes: list[str] = []
    if t.method != "full":
        raise unsupported(plan, f"method '{t.method}'", "Megatron-LM trains full models; it has no PEFT path here.",
                          ("hf", "deepspeed", "torchrun"))
    if p.offload != "none":
        raise unsupported(plan, f"offload '{p.offload}'", "the generated Megatron arguments do not offload to CPU.",
                          ("deepspeed",))
    if t.optimizer not in ("adamw", "sgd"):
        raise unsupported(plan, f"optimizer '{t.optimizer}'", "Megatron-LM offers adam (decoupled weight decay) and sgd.",
                          ("hf", "deepspeed"), "use adamw or sgd, or")
    if p.vpp > 1 and (p.pp == 1 or plan.spec.num_layers % (p.pp * p.vpp)):
        raise unsupported(plan, f"vpp={p.vpp} with pp={p.pp} and {plan.spec.num_layers} layers",
                          "interleaved pipelining needs pp > 1 and layers divisible by pp x vpp.", (),
                          "change parallel.vpp or parallel.pp.")
    if plan.spec.num_layers % p.pp:
        raise unsupported(plan, f"pp={p.pp}", f"{plan.spec.num_layers} layers do not split evenly into {p.pp} stages.",
                          (), "choose a pp that divides the layer count.")
    args = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.vpp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(plan.spec.num_layers // (p.pp * p.vpp))]
    if p.tp > 1 and p.sp:
        args.append("--sequence-parallel")
    if p.cp > 1:
        args += ["--context-parallel-size", str(p.cp)]
    if p.ep > 1:
        args += ["--expert-model-parallel-size", str(p.ep)]
    if p.zero >= 1:
        args.append("--use-distributed-optimizer")
        if p.zero > 1:
            notes.append(f"zero {p.zero}: Megatron's distributed optimizer shards optimizer state and master weights "
                         "(ZeRO-1 layout); gradients and parameters stay replicated across dp")
    args += model_args(plan)
    args += ["--seq-length", str(t.seq_len), "--micro-batch-size", str(plan.micro_batch),
             "--global-batch-size", str(plan.global_batch)]
    _ = plan.grad_accum          # validates global batch divisibility
    steps = plan.train_steps or 1000
    if plan.train_steps is None:
        notes.append("train.tokens not set: --train-iters is a placeholder (1000)")
    args += ["--train-iters", str(steps), "--lr", str(learning_rate(plan)), "--min-lr", str(learning_rate(plan) / 10),
             "--lr-decay-style", "cosine", "--lr-warmup-iters", str(warmup_steps(plan)),
             "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--clip-grad", "1.0",
             "--init-method-std", "0.02", "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
             "--optimizer", "adam" if t.optimizer == "adamw" else "sgd"]
    if t.precision == "bf16":
        args.append("--bf16")
    elif t.precision == "fp16":
        g = grad_scaler(plan)
        args += ["--fp16", "--initial-loss-scale", str(g["init_scale"]), "--loss-scale-window", str(g["growth_interval"])]
    elif t.precision == "fp8":
        args += ["--bf16", "--fp8-format", "hybrid", "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]
    if not t.master_weights and t.precision != "fp32":
        notes.append("master_weights false: Megatron keeps fp32 master weights in its optimizer regardless")
    if t.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif t.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if t.attention == "eager":
        notes.append("attention 'eager' has no Megatron equivalent; Transformer Engine picks a fused kernel")
    args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", plan.model_ref,
             "--log-interval", "10", "--eval-iters", "0", "--save-interval", "1000", "--save", '"$CHECKPOINT_DIR"']
    return args, notes


def files(plan: Plan) -> dict[str, str]:
    require_training(plan)
    check_train_precision(plan)
    args, notes = megatron_args(plan)
    argv = torchrun_argv(plan, '"$MEGATRON_LM"/pretrain_gpt.py', args + ['"${DATA_ARGS[@]}"', '"$@"'])
    body = (
        "set -euo pipefail\n"
        ': "${MEGATRON_LM:?set MEGATRON_LM to your Megatron-LM checkout}"\n'
        'CHECKPOINT_DIR="${CHECKPOINT_DIR:-$PWD/checkpoints}"\n'
        "# DATA_PREFIX: a preprocessed dataset prefix (tools/preprocess_data.py); unset = --mock-data\n"
        'if [ -n "${DATA_PREFIX:-}" ]; then DATA_ARGS=(--data-path "$DATA_PREFIX" --split 99,1,0); '
        "else DATA_ARGS=(--mock-data); fi\n"
        "export CUDA_DEVICE_MAX_CONNECTIONS=1   # Megatron's TP/SP comm-compute overlap needs in-order launches\n"
        + ("# multi-node: run this on every node with MASTER_ADDR set, or submit slurm.sbatch\n" if plan.multi_node else "")
        + shell_command(argv) + "\n")
    return {"train_megatron.sh": hash_header(plan, notes, shebang="#!/usr/bin/env bash") + body}

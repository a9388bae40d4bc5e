"""Megatron-LM / Megatron-core: a torchrun script calling pretrain_gpt.py with the plan's args."""
from __future__ import annotations

from ..models.traits import DEFAULT_ROPE_THETA
from ._common import (Plan, check_train_precision, hash_header, require_training, shell_command, torchrun_argv,
                      unsupported)
from ._train import grad_scaler, learning_rate, warmup_steps


# Megatron-LM's argument names are cited from megatron/training/arguments.py and the dataclasses its
# ArgumentGroupFactory turns into flags (megatron/core/transformer/transformer_config.py:
# layernorm_epsilon -> --norm-epsilon, add_bias_linear -> --disable-bias-linear, add_qkv_bias ->
# --add-qkv-bias, qk_layernorm -> --qk-layernorm) at tag core_v0.19.0 (5be96267); the table of every
# flag is launch/data/engine_flags.csv (scripts/engine_facts_megatron.py).


def _refuse_unexpressible(plan: Plan) -> None:
    """Architectures the generic GPT arguments cannot describe: refuse rather than train another model."""
    m, t = plan.spec, plan.spec.traits
    why = []
    if m.is_mla:
        why.append("multi-latent attention")
    if t.norm_placement != "pre":
        why.append(f"{t.norm_placement} norm placement (pretrain_gpt.py builds pre-norm layers)")
    if t.qk_norm == "full":
        why.append("a q/k norm over the whole projection (--qk-layernorm normalises per head)")
    if t.final_logit_softcap or t.attn_logit_softcap:
        why.append("logit soft-capping")
    if t.window_pattern not in ("none", "all"):
        why.append(f"sliding windows on some layers only ({t.window_pattern})")
    if t.mlp not in ("swiglu", "plain"):
        why.append(f"a {t.mlp} MLP (the arguments offer --swiglu or a plain MLP)")
    if t.moe_shared_experts:
        why.append("shared experts")
    if t.rope_scaling not in (None, "llama3"):
        why.append(f"{t.rope_scaling} rope scaling (the arguments express llama3-style scaling only)")
    if why:
        raise unsupported(plan, f"model '{m.name}' ({'; '.join(why)})",
                          "the generic GPT arguments of pretrain_gpt.py cannot describe it.",
                          ("torchrun", "hf", "deepspeed"), "use Megatron-Bridge's recipe for this model, or")


def model_args(plan: Plan) -> list[str]:
    """Architecture flags, every switch taken from the ModelSpec (models/spec.py, models/traits.py)."""
    _refuse_unexpressible(plan)
    m, tr = plan.spec, plan.spec.traits
    args = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
            "--ffn-hidden-size", str(m.intermediate_size), "--num-attention-heads", str(m.num_heads),
            "--kv-channels", str(m.head_dim)]
    if m.num_kv_heads != m.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    args += ["--max-position-embeddings", str(m.max_position), "--position-embedding-type", "rope",
             "--rotary-base", str(int(tr.rope_theta or DEFAULT_ROPE_THETA))]
    if tr.rope_scaling == "llama3":
        # Megatron's llama3 scaling fixes low/high frequency factors 1/4 and 8192 original positions
        # (rotary_pos_embedding.py _apply_scaling, core_v0.19.0) as Llama-3.1/3.2 do; the factor varies
        args += ["--use-rope-scaling", "--rope-scaling-factor", f"{tr.rope_scaling_factor or 8.0:g}"]
    args += ["--normalization", "RMSNorm" if m.norm == "rms" else "LayerNorm"]
    if tr.norm_eps is not None:
        args += ["--norm-epsilon", f"{tr.norm_eps:g}"]
    if tr.qk_norm == "per_head":
        args.append("--qk-layernorm")            # Qwen3: RMSNorm on q and k per head
    if tr.window_pattern == "all":
        args += ["--window-size", f"{tr.sliding_window},0"]
    if m.gated_mlp:
        args.append("--swiglu")
    if not m.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not tr.mlp_bias:
        args.append("--disable-bias-linear")     # add_bias_linear=False: no bias on any linear ...
        if tr.attention_bias:
            args.append("--add-qkv-bias")        # ... except q/k/v (Qwen2/2.5)
    elif not tr.attention_bias:
        raise unsupported(plan, f"model '{m.name}' (MLP biases without q/k/v biases)",
                          "Megatron's add_bias_linear puts a bias on every linear layer.", ("torchrun", "hf"))
    if m.is_moe:
        args += ["--num-experts", str(m.num_experts), "--moe-router-topk", str(m.experts_per_tok),
                 "--moe-ffn-hidden-size", str(m.moe_intermediate_size), "--moe-grouped-gemm"]
        dispatcher = plan.s.parallel.ep_dispatcher
        if dispatcher == "alltoall":
            args += ["--moe-token-dispatcher-type", "alltoall"]
            if plan.s.train is None or plan.s.train.moe_permute_fusion:
                # Transformer Engine's fused permutations, which the estimate times (train.moe_permute_fusion);
                # Megatron-LM's --moe-permute-fusion is off unless given (arguments.py, core_v0.15.0 L3139)
                args.append("--moe-permute-fusion")
            cf = plan.s.train.moe_capacity_factor if plan.s.train is not None else None
            if cf is not None:   # token-drop, each expert padded to its capacity (what the estimate timed)
                args += ["--moe-expert-capacity-factor", f"{cf:g}",
                         "--moe-pad-expert-input-to-capacity"]
        if plan.s.train is not None and plan.s.train.moe_router_dtype != "model":
            # train.moe_router_dtype: Megatron-LM's --moe-router-dtype {fp32,fp64} (arguments.py, core_v0.15.0 L3081)
            args += ["--moe-router-dtype", plan.s.train.moe_router_dtype]
        if dispatcher != "alltoall":   # the flex dispatcher over DeepEP/HybridEP (TransformerConfig fields, core_v0.19.0)
            args += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", dispatcher]
            sms = plan.s.parallel.ep_dispatcher_sms
            if sms is not None:   # the SMs the estimate gave the dispatcher (TransformerConfig moe_*_num_sms)
                args += [f"--moe-{dispatcher}-num-sms", str(sms)]
    return args


def megatron_args(plan: Plan) -> tuple[list[str], list[str]]:
    t, p = plan.s.train, plan.s.parallel
    notes: list[str] = []
    if t.method != "full":
        raise unsupported(plan, f"method '{t.method}'", "Megatron-LM trains full models; it has no PEFT path here.",
                          ("hf", "deepspeed", "torchrun"))
    if p.offload == "optimizer+params":
        raise unsupported(plan, "offload 'optimizer+params'", "Megatron-LM offloads the optimizer "
                          "(--optimizer-cpu-offload), not the parameters.", ("deepspeed", "torchrun"),
                          "use offload: optimizer, or")
    if p.offload == "optimizer" and t.optimizer != "adamw":
        raise unsupported(plan, f"offload 'optimizer' with optimizer '{t.optimizer}'", "Megatron's optimizer CPU "
                          "offload needs --use-precision-aware-optimizer, which runs adam only "
                          "(megatron/core/optimizer/optimizer_config.py at core_v0.19.0).", ("deepspeed",),
                          "use adamw, or")
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
        if p.tp_comm_overlap:   # Transformer Engine userbuffers; what the speed estimate assumed
            args.append("--tp-comm-overlap")
    if p.cp > 1:
        args += ["--context-parallel-size", str(p.cp)]
        if p.cp_comm_type != "p2p":
            args += ["--cp-comm-type", p.cp_comm_type]
    if p.ep > 1:
        args += ["--expert-model-parallel-size", str(p.ep)]
        if p.ep_comm_overlap:   # what the speed estimate assumed (EP all-to-all beside another micro-batch)
            args.append("--overlap-moe-expert-parallel-comm")
    if plan.spec.num_experts and (p.ep > 1 or p.etp is not None):
        # always explicit: Megatron's default expert TP is tp (arguments.py @core_v0.19.0), the plan's is 1 under EP
        args += ["--expert-tensor-parallel-size", str(p.expert_tp)]
        if p.ep * p.expert_tp > plan.s.dp * p.cp or p.expert_tp != p.tp:
            notes.append(f"MoE parallel folding: the routed experts run on their own grid of ep {p.ep} x etp "
                         f"{p.expert_tp} x expert-dp {p.expert_dp} over each stage's tp {p.tp} x cp {p.cp} x dp "
                         f"{plan.s.dp} ranks (megatron/core/parallel_state.py)")
    if p.zero >= 1 or p.offload == "optimizer":
        args.append("--use-distributed-optimizer")
    if p.zero > 1:
        notes.append(f"zero {p.zero}: Megatron's distributed optimizer shards optimizer state and master weights "
                     "(ZeRO-1 layout); gradients and parameters stay replicated across dp")
    if p.offload == "optimizer":
        # core_v0.19.0: validate_args asserts --use-precision-aware-optimizer with --optimizer-cpu-offload
        # (the hybrid device optimizer reuses its code path), and OptimizerConfig asserts that flag runs
        # adam under the distributed optimizer
        args += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
        notes.append("optimizer offload: Megatron's hybrid device optimizer steps the fp32 master weights and "
                     "Adam states on the CPU (--optimizer-cpu-offload; --optimizer-offload-fraction 1.0 default)")
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
        args += ["--bf16", "--fp8-format", "hybrid"] + _fp8_recipe_args(plan)
    # train.grad_reduce_dtype (arguments.py, core_v0.19.0): with --bf16 Megatron-LM turns on
    # accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16; with --fp16 it stays off unless asked
    if t.grad_reduce_dtype == "bf16":
        args.append("--grad-reduce-in-bf16")
    elif t.grad_reduce_dtype == "fp32" and t.precision == "fp16":
        args.append("--accumulate-allreduce-grads-in-fp32")
    if not t.activation_fusion:
        # train.activation_fusion false: Megatron's gated activation as torch ops (TransformerConfig
        # bias_activation_fusion = args.bias_swiglu_fusion, which --no-bias-swiglu-fusion turns off; arguments.py)
        args.append("--no-bias-swiglu-fusion")
    if not t.grad_accum_fusion:
        # train.grad_accum_fusion false: the weight gradients added to the gradient buffer by the DDP hook instead of
        # accumulated in the GEMM (gradient_accumulation_fusion, --no-gradient-accumulation-fusion: arguments.py L1804)
        args.append("--no-gradient-accumulation-fusion")
    if t.master_weight_remainders:
        # the precision-aware optimizer (TE FusedAdam), whose store_param_remainders defaults to true
        # (megatron/core/optimizer/optimizer_config.py) and needs --use-distributed-optimizer (zero >= 1, checked)
        args.append("--use-precision-aware-optimizer")
    if not t.master_weights and t.precision != "fp32":
        notes.append("master_weights false: Megatron keeps fp32 master weights in its optimizer regardless")
    if t.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
        if t.recompute_modules:
            args += ["--recompute-modules", *t.recompute_modules]
    elif t.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if t.attention == "eager":
        notes.append("attention 'eager' has no Megatron equivalent; Transformer Engine picks a fused kernel")
    args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", plan.model_ref,
             "--log-interval", "10", "--eval-iters", "0", "--save-interval", "1000", "--save", '"$CHECKPOINT_DIR"',
             # resume: --load reads the latest iteration recorded in CHECKPOINT_DIR (none yet: starts fresh);
             # --exit-signal-handler saves a checkpoint and exits on SIGTERM (SLURM's pre-emption warning)
             "--exit-signal-handler", "--load", '"$CHECKPOINT_DIR"']
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


# Megatron-LM --fp8-recipe choices (megatron/training/arguments.py: tensorwise, delayed, mxfp8, blockwise);
# gpuplan's `auto` is tensorwise (Transformer Engine current scaling, what the speed model times)
MEGATRON_FP8_RECIPE = {"auto": "tensorwise", "tensorwise": "tensorwise", "delayed": "delayed", "mxfp8": "mxfp8"}


def _fp8_recipe_args(plan: Plan) -> list[str]:
    """Megatron's FP8 recipe flags for train.fp8_recipe; torchao's row-wise recipes have no Megatron path."""
    r = getattr(plan.s.train, "fp8_recipe", "auto")
    if r not in MEGATRON_FP8_RECIPE:
        raise unsupported(plan, f"train.fp8_recipe '{r}'", "row-wise FP8 scaling is a torchao recipe; Transformer "
                          "Engine in Megatron-LM offers tensorwise (current), delayed, mxfp8 and blockwise scaling.",
                          (), "use fp8_recipe tensorwise or delayed with megatron.")
    args = ["--fp8-recipe", MEGATRON_FP8_RECIPE[r]]
    if r == "delayed":
        args += ["--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]
    return args

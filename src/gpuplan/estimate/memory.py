"""Per-GPU peak memory for training, fine-tuning and inference.

The peak is the largest of the phases a step goes through (DESIGN §4): forward end / backward start
(all activations and the loss block alive, no gradients yet), the optimizer step (weights,
gradients, states and the foreach optimizer's temporary) and, for inference, load, prefill and
decode. Every component is computed once; a phase picks which ones it holds. Equations and sources
are listed in docs/model.md.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..dtypes import kv_bytes, weight_format
from ..errors import UnsupportedError
from ..models.spec import ModelSpec
from ..scenario import Scenario
from ..units import GiB, MiB
from .activations import (ActivationSetup, _mlp_mix, embedding_dropout_bytes, layer_activations,
                          math_path_attention, unsloth_layer_bytes)
from . import encdec
from .layout import RankParams, grad_accum_steps, rank_params, stages
from . import optim as opt
from .lora_targets import (ALL_LINEAR, EXPERT_ROLE, LORA_NAME_MAP, _lora_targets, lora_params,  # noqa: F401
                           lora_role, out_factor, peft_fused_experts, scenario_lora_targets)
from .recompute import RecomputePlan, op_sac_layer_bytes, recompute_plan
from .results import MEMORY_COMPONENTS, MemoryEstimate

# ---- runtime overhead ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Overhead:
    """Memory outside PyTorch's allocated bytes (DESIGN §4): the CUDA context, library workspaces,
    NCCL buffers and the caching allocator's unused reserve."""
    cuda_context: int = 512 * MiB        # 300-600 MiB on Ampere/Hopper with lazy module loading (CUDA 11.7+)
    workspaces: int = 64 * MiB           # cuBLAS(Lt) workspace(s) and attention scratch
    nccl_per_peer_group: int = 256 * MiB # NCCL channel buffers when the GPU talks to peers
    fragmentation: float = 0.05          # caching-allocator reserve beyond allocated, share of the peak

    def bytes(self, allocated: float, world: int) -> int:
        nccl = self.nccl_per_peer_group if world > 1 else 0
        return int(self.cuda_context + self.workspaces + nccl + self.fragmentation * allocated)


def _overhead(scn: Scenario, allocated: float) -> int:
    if scn.overhead_bytes is not None:
        return scn.overhead_bytes
    return Overhead().bytes(allocated, _peers(scn))


def _peers(scn: Scenario) -> int:
    """GPUs this one exchanges tensors with. Training: all of them (gradients). Serving: its replica
    (tp × pp, and the expert-parallel group); independent replicas never talk, so a 1-GPU replica has
    no NCCL buffers however many replicas run."""
    if scn.is_training:
        return scn.hardware.count
    p = scn.parallel
    return p.tp * p.pp * max(1, p.ep)


# ---- training -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StateBytes:
    """Bytes per trainable parameter held for weights, gradients and optimizer states."""
    weight: float
    grad: float
    optim: float
    optim_temp: float      # foreach step temporary per parameter


def _optimizer_state_bytes(optimizer: str, state_elem: float) -> float:
    """Optimizer-state bytes per parameter of the element-wise optimizers (explain.py replays with it). The
    shape-dependent ones (Adafactor, Muon, GaLore, SOAP) have no per-parameter figure: 0 here; their states are
    counted per tensor (estimate/optim.py)."""
    return opt.elementwise_state_bytes(optimizer, state_elem) if optimizer in opt.ELEMENTWISE else 0.0


def state_bytes(scn: Scenario) -> StateBytes:
    """Per-parameter bytes. For the shape-dependent optimizers (Adafactor, Muon, GaLore, SOAP) `optim` holds
    only the master copy and `optim_temp` nothing: their states and temporaries are counted per tensor in
    `_model_states` (estimate/optim.py)."""
    t = scn.train
    assert t is not None
    low = 4 if t.precision == "fp32" else 2
    fw = scn.framework
    if t.precision == "fp32":
        w, g, master = 4, 4, 0
    elif not t.master_weights:
        w, g, master = low, low, 0
    elif fw == "megatron":
        # bf16 params, fp32 main grads (unless grad_reduce_in_fp32 is off: the params' dtype), fp32 master copy
        # (master_weight_remainders: the precision-aware optimizer keeps only the 16 bits the bf16 copy lacks)
        w, g, master = low, (2 if t.grad_reduce_dtype in ("bf16", "fp16") else 4), 2 if t.master_weight_remainders else 4
    elif fw == "deepspeed":
        w, g, master = low, low, 4        # ZeRO paper accounting: 2 + 2 + (4 + 4 + 4)
    else:
        w, g, master = 4, 4, 0            # torch AMP / FSDP2 mixed precision: fp32 params and grads
    state_elem = 4 if (t.master_weights or t.precision == "fp32") else low
    if t.optimizer in opt.SHAPED:
        return StateBytes(weight=w, grad=g, optim=master, optim_temp=0.0)
    optim = master + opt.elementwise_state_bytes(t.optimizer, state_elem)
    temp = 0.0 if (t.optimizer_impl == "fused" or t.optimizer in ("adamw-8bit", "paged-adamw-8bit",
                                                                 "paged-adamw")) else state_elem
    return StateBytes(weight=w, grad=g, optim=optim, optim_temp=temp)


def _state_elem(t) -> float:
    return 4.0 if (t.master_weights or t.precision == "fp32") else 2.0


def _shaped_states(ts: "_TrainSetup", tensors: list) -> tuple[float, float]:
    """(state bytes, step temporary bytes) of a shape-dependent optimizer over `tensors` (estimate/optim.py)."""
    t = ts.scn.train
    se = _state_elem(t)
    if ts.peft:     # peft's adapters are fp32 unless the trainer is pure 16-bit
        se = 4.0 if (t.master_weights or t.precision == "fp32") else ts.low
    states = opt.state_bytes(t.optimizer, tensors, se, t.galore_rank)
    temp = opt.step_temporary_bytes(t.optimizer, tensors, se, fused=t.optimizer_impl == "fused",
                                    params_fp32=se == 4.0, galore_rank=t.galore_rank)
    return states, temp


def rank_tensors(scn: Scenario, model: ModelSpec, stage: str) -> list:
    """The trainable parameter tensors of one rank (full fine-tuning: the model's; LoRA: the adapters)."""
    t, p = scn.train, scn.parallel
    native_tp = scn.framework in ("megatron", "torchtitan")
    if t.method in ("lora", "qlora"):
        frac = math.ceil(model.num_layers / p.pp) / model.num_layers
        return opt.adapter_tensors(model, t.lora_rank, scenario_lora_targets(scn, model), lora_role, tp=p.tp,
                                   layer_frac=frac, out_factor=out_factor)
    return opt.param_tensors(model, tp=p.tp, pp=p.pp, ep=p.ep, stage=stage, vocab_parallel=native_tp, etp=p.etp)


def _weight_bytes_frozen(rp: RankParams, model: ModelSpec, method: str, double_quant: bool, low: int,
                         extra_head: float = 0.0, quantize_head: bool = False) -> float:
    """`extra_head`: an untied lm_head the framework keeps although the checkpoint ties it (litgpt);
    `quantize_head`: the quantizer also replaces lm_head (Fabric's BitsandbytesPrecision)."""
    if method == "qlora":
        fmt = weight_format("nf4-dq" if double_quant else "nf4")
        quantized = rp.linear - rp.lm_head     # bitsandbytes (transformers) keeps lm_head in 16-bit
        if quantize_head:
            quantized = rp.linear + extra_head
        return quantized * fmt.bits / 8 + (rp.total + extra_head - quantized) * low
    return (rp.total + extra_head) * low


@dataclass(frozen=True)
class _TrainSetup:
    """Facts of one training scenario on one pipeline stage that the component functions share."""
    scn: Scenario
    model: ModelSpec
    stage: str
    rp: RankParams
    shard: int                 # ZeRO/FSDP shard group: shard_group (default dp) x cp (Megatron shards over dp x cp)
    low: int                   # bytes of a 16-bit (or fp32) element
    peft: bool
    targets: frozenset[str]
    native_tp: bool            # Megatron/torchtitan split vocabulary and sequence over TP ranks
    untied_head: float         # litgpt's own lm_head copy of a tied embedding
    fabric_bnb: bool           # litgpt + bitsandbytes through Lightning Fabric

    @property
    def last(self) -> bool:
        return self.stage in ("last", "only")


def _train_setup(scn: Scenario, model: ModelSpec, stage: str) -> _TrainSetup:
    t, p = scn.train, scn.parallel
    assert t is not None
    # Megatron and torchtitan split the vocabulary and the sequence (SP) over TP ranks; HF's
    # tensor-parallel plan (and DeepSpeed AutoTP) replicate embeddings, lm_head and norms' inputs
    native_tp = scn.framework in ("megatron", "torchtitan")
    peft = t.method in ("lora", "qlora")
    litgpt = scn.framework == "litgpt"
    # litgpt's GPT always has its own lm_head matrix: convert_hf_checkpoint copies the embedding into
    # lm_head.weight when the checkpoint ties them (litgpt/scripts/convert_hf_checkpoint.py @00af8b0
    # L206-207, L281-282; lit_gpt/model.py has no weight tying)
    untied_head = (model.vocab_size * model.hidden_size
                   if litgpt and model.tie_embeddings and stage in ("last", "only") else 0.0)
    # litgpt + bitsandbytes goes through Lightning Fabric's BitsandbytesPrecision, which replaces every
    # torch.nn.Linear, lm_head included (litgpt passes no ignore_modules), and quantizes from an fp16
    # copy (`_Linear4bit.quantize`: weight.to(dtype=torch.half); lightning 2.1-2.4)
    fabric_bnb = litgpt and t.method == "qlora" and t.qlora_backend == "bitsandbytes"
    return _TrainSetup(scn=scn, model=model, stage=stage,
                       rp=rank_params(model, tp=p.tp, pp=p.pp, ep=p.ep, stage=stage, vocab_parallel=native_tp,
                                      etp=p.etp),
                       shard=p.zero_shard_dp * p.cp, low=4 if t.precision == "fp32" else 2, peft=peft,
                       targets=scenario_lora_targets(scn, model) if peft else frozenset(), native_tp=native_tp,
                       untied_head=untied_head, fabric_bnb=fabric_bnb)


def _adapter_params_rank(ts: _TrainSetup) -> float:
    """LoRA adapter parameters on this rank: the stage's share of the layers, split over TP."""
    t, p = ts.scn.train, ts.scn.parallel
    return lora_params(ts.model, t.lora_rank, ts.targets) / p.tp * (ts.rp.stage_layers / ts.model.num_layers)


def _model_states(ts: _TrainSetup, text_only: bool = True) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer states, optimizer-step temporary) on this rank, ZeRO-sharded; `text_only`:
    the step feeds no images (a vision tower then stays idle, _idle_tower_params)."""
    t, p, rp, shard = ts.scn.train, ts.scn.parallel, ts.rp, ts.shard
    if ts.peft:
        n_train = _adapter_params_rank(ts)
        # peft creates fp32 adapters (trained under autocast); pure 16-bit trainers (torchtune,
        # litgpt bf16-true) build them in the training dtype with 16-bit optimizer states
        a_bytes = 4 if (t.master_weights or t.precision == "fp32") else ts.low
        w_frozen = _weight_bytes_frozen(rp, ts.model, t.method, t.qlora_double_quant, ts.low, ts.untied_head,
                                        ts.fabric_bnb)
        weights = w_frozen + n_train * a_bytes
        grads = n_train * a_bytes
        if t.optimizer in opt.SHAPED:
            optim, optim_temp = _shaped_states(ts, rank_tensors(ts.scn, ts.model, ts.stage))
        else:
            optim = n_train * opt.elementwise_state_bytes(t.optimizer, a_bytes)
            # bitsandbytes' paged kernels step in place; the older optimizers keep the foreach buffer
            optim_temp = n_train * (0 if (t.optimizer_impl == "fused" or t.optimizer in opt.PAGED) else a_bytes)
    else:
        sb = state_bytes(ts.scn)
        n = rp.total + ts.untied_head
        n_step = n - (_idle_tower_params(ts) if text_only else 0.0)
        weights, grads, optim, optim_temp = n * sb.weight, n_step * sb.grad, n_step * sb.optim, n_step * sb.optim_temp
        n32 = _fp32_kept_params(ts)
        if n32:
            # pure 16-bit HF training: these stay fp32, and so do their gradients and AdamW states (a state takes
            # its parameter's dtype: torch/optim/adamw.py _init_group zeros_like(p))
            se = _state_elem(t)
            weights += n32 * (4 - sb.weight)
            grads += n32 * (4 - sb.grad)
            if t.optimizer not in opt.SHAPED:
                optim += n32 * (opt.elementwise_state_bytes(t.optimizer, 4) - opt.elementwise_state_bytes(t.optimizer, se))
                optim_temp += n32 * (4 - se) if sb.optim_temp else 0.0
        if t.optimizer in opt.SHAPED:
            shaped, optim_temp = _shaped_states(ts, rank_tensors(ts.scn, ts.model, ts.stage))
            optim += shaped
        # routed experts are sharded over their own expert-data-parallel group, not dp x cp
        ne, e_shard = _expert_shard(ts)
        if ne:
            e = zero_divisors(p.zero, e_shard)
            d = zero_divisors(p.zero, shard)
            return tuple(x * (1 - ne / m) / dv + x * (ne / m) / de for x, m, dv, de in
                         zip((weights, grads, optim, optim_temp), (n, n_step, n_step, n_step), (*d, d[2]), (*e, e[2])))
    d_w, d_g, d_o = zero_divisors(p.zero, shard)
    qconst = quant_constants_bytes(ts) if d_w > 1 else 0.0
    return (weights - qconst) / d_w + qconst, grads / d_g, optim / d_o, optim_temp / d_o


def quant_constants_bytes(ts: _TrainSetup) -> float:
    """bitsandbytes QLoRA: the block constants of the 4-bit weights (absmax, and with double quantization its
    second-level scales), every rank's full copy. They live in each `Params4bit.quant_state`, a plain attribute,
    not a parameter: FSDP flattens and shards only parameters (the packed codes, stored as `bnb_4bit_quant_storage`
    so they can be flattened), and moves only those to the host under CPU offload; bitsandbytes' matmul reads
    `weight.quant_state` on the GPU (Answer.AI fsdp_qlora train.py @049515f `load_and_quantize`, which moves
    each quant_state to the rank's GPU; bitsandbytes nn/modules.py Params4bit). DeepSpeed ZeRO-3 partitions
    parameters the same way."""
    t = ts.scn.train
    if t.method != "qlora" or t.qlora_backend != "bitsandbytes" or ts.fabric_bnb:
        return 0.0
    fmt = weight_format("nf4-dq" if t.qlora_double_quant else "nf4")
    return (ts.rp.linear - ts.rp.lm_head) * (fmt.bits - 4) / 8


def _expert_shard(ts: _TrainSetup) -> tuple[float, int]:
    """(routed-expert parameters on this rank, their ZeRO shard group). Megatron gives the routed experts their
    own grid over each pipeline stage's tp·cp·dp ranks (MoE parallel folding): each rank holds E/ep experts split
    over etp ranks, and the ranks holding the same shard form the expert-data-parallel group of tp·cp·dp/(ep·etp)
    (megatron/core/parallel_state.py @core_v0.19.0 initialize_model_parallel: expert_data_parallel_size =
    world_size // (etp·ep·pp); the distributed optimizer shards expert states over it). Speed's optimizer step
    and expert gradient reduction use the same group."""
    p = ts.scn.parallel
    etp = p.expert_tp
    if (p.ep <= 1 and etp == p.tp) or ts.peft:
        return 0.0, ts.shard
    experts = sum(b.total for b in ts.model.blocks if b.kind == "expert")
    ne = experts / (p.ep * etp) * ts.rp.stage_layers / max(ts.model.num_layers, 1)
    return ne, max(1, ts.shard * p.tp // (p.ep * etp))


def _fp32_kept_params(ts: _TrainSetup) -> float:
    """Parameters on this rank that transformers keeps in fp32 although the model is loaded in 16 bits
    (ModelSpec.params_fp32: a module built in fp32, `_keep_in_fp32_modules_strict`). They matter only where the
    rest is 16-bit and the model is transformers' own: pure 16-bit training (no master weights) in framework hf.
    DeepSpeed's engine casts the whole module (`module.bfloat16()`), the other frameworks build their own models."""
    t, m = ts.scn.train, ts.model
    if not m.params_fp32 or ts.scn.framework != "hf" or t.master_weights or t.precision not in ("bf16", "fp16"):
        return 0.0
    return m.params_fp32 * min(1.0, ts.rp.total / max(m.params_total, 1))


def _idle_tower_params(ts: _TrainSetup) -> float:
    """Parameters of a vision (or audio) tower and its projector, or of a cross-attention onto an encoder the causal
    LM is not given (TrOCR's decoder), that a text-only step never runs: autograd gives them no
    gradient, and torch's AdamW creates state only for parameters with one (torch/optim/adamw.py `_init_group`:
    `if p.grad is None: continue`), so they hold weights only (traced: 2-layer Gemma 3 with its SigLIP tower,
    text-only fine-tuning). Only unsharded training: ZeRO/FSDP flat buffers cover every parameter."""
    m = ts.model
    # a decoder's cross-attention onto an encoder output the causal LM is not given (Block stream "cross_idle")
    cross = sum(b.total for b in m.blocks if b.stream == "cross_idle") * ts.rp.stage_layers / max(m.num_layers, 1)
    if not (ts.rp.vision or cross) or ts.scn.parallel.zero or _fsdp(ts):
        return 0.0
    return ts.rp.vision + cross


def zero_divisors(zero, shard):
    """(weights, gradients, optimizer states) divisors of ZeRO stage `zero` over `shard` ranks: stage 1
    shards the optimizer states, 2 also the gradients, 3 also the weights (Rajbhandari et al. 2020 §5).
    Plain arithmetic, so `zero` and `shard` may be numbers or numpy arrays (the search's batched
    memory bound, search/grid.py, divides with this same function)."""
    return 1 + (shard - 1) * (zero >= 3), 1 + (shard - 1) * (zero >= 2), 1 + (shard - 1) * (zero >= 1)


def _offload(ts: _TrainSetup, states: tuple[float, float, float, float],
             notes: list[str]) -> tuple[tuple[float, float, float, float], float]:
    """Model states moved to host memory (optimizer / parameter offload, paged optimizer): (states, cpu bytes)."""
    t, p = ts.scn.train, ts.scn.parallel
    weights, grads, optim, optim_temp = states
    cpu = 0.0
    if p.offload in ("optimizer", "optimizer+params"):
        cpu += optim + (0 if ts.peft else ts.rp.total * 4 / (ts.shard if p.zero >= 1 else 1))
        optim, optim_temp = 0.0, 0.0
        notes.append("optimizer states (and fp32 master copy) offloaded to CPU memory")
    if p.offload == "optimizer+params":
        if p.zero < 3:
            notes.append("parameter offload needs ZeRO-3/FSDP full-shard; treated as optimizer offload only")
        else:
            # FSDP CPUOffload / ZeRO-Infinity keep sharded params and gradients in host memory;
            # the GPU holds only the all-gathered layers (and QLoRA's block constants, not parameters)
            qconst = quant_constants_bytes(ts)
            cpu += weights - qconst + grads
            weights, grads = qconst, 0.0
    if (t.paged_optimizer or t.optimizer in opt.PAGED) and optim:
        # bitsandbytes paged states live in CUDA managed memory: outside PyTorch's allocator, and
        # evicted to host memory under pressure
        cpu += optim
        optim, optim_temp = 0.0, 0.0
        notes.append("paged optimizer states live in managed memory and page to the host under pressure")
    return (weights, grads, optim, optim_temp), cpu


def _fsdp(ts: _TrainSetup) -> bool:
    return ts.scn.parallel.zero >= 3 and ts.shard > 1


# DeepSpeed ZeRO working buffers, in elements, as gpuplan's launch files configure them
# (launch/deepspeed.py: reduce/allgather buckets 5e8, stage3_prefetch_bucket_size 5e8, overlap_comm on)
# with DeepSpeed's own defaults for the rest (deepspeed/runtime/zero/config.py:
# stage3_max_live_parameters = stage3_max_reuse_distance = 1e9).
DS_REDUCE_BUCKET = 5e8
DS_PREFETCH_BUCKET = 5e8
DS_MAX_REUSE_DISTANCE = 1e9
DS_MAX_LIVE_PARAMETERS = 1e9
# stage3_param_persistence_threshold as launch/deepspeed.py writes it (DeepSpeed's own default is 1e5): a
# parameter with fewer elements is never released once gathered (`ds_persist`, partition_parameters.py /
# parameter_offload.py mark_persistent_parameters), so every rank keeps it whole in 16-bit
DS_PERSISTENCE_THRESHOLD = 1e6


def _deepspeed_buffers(ts: _TrainSetup) -> float:
    """Bytes of DeepSpeed ZeRO's communication and prefetch buffers during backward.

    ZeRO-1/2 (runtime/zero/stage_1_and_2.py): with overlap_comm and contiguous_gradients the
    gradients of a bucket are copied into one of two `ipg_buffer`s of reduce_bucket_size elements, and
    the bucket is flattened once more for the reduction: three bucket-sized 16-bit tensors.
    ZeRO-3 (runtime/zero/stage3.py, partitioned_param_coordinator.py): the same two reduce buffers;
    the prefetcher gathers up to stage3_prefetch_bucket_size parameters ahead of the one in use; a
    gathered parameter is not released when its next use is closer than stage3_max_reuse_distance
    parameters, which at the forward/backward turn keeps the last max_reuse_distance / 2 parameters
    of the model gathered (their next use is the backward right after), within max_live_parameters.
    Every bucket is capped by the parameters the rank actually holds."""
    p, rp = ts.scn.parallel, ts.rp
    if ts.scn.framework != "deepspeed" or p.zero == 0 or ts.shard <= 1:
        return 0.0
    trainable = rp.total if not ts.peft else lora_params(ts.model, ts.scn.train.lora_rank, ts.targets) / p.tp
    reduce = 3 * min(DS_REDUCE_BUCKET, trainable) * ts.low
    if p.zero < 3:
        return reduce
    live = min(DS_MAX_REUSE_DISTANCE / 2, DS_MAX_LIVE_PARAMETERS, rp.total)
    prefetch = min(DS_PREFETCH_BUCKET, rp.total)
    return reduce + (live + prefetch + _ds_persistent_params(ts)) * ts.low


def _ds_persistent_params(ts: _TrainSetup) -> float:
    """Parameters of this rank below ZeRO-3's persistence threshold (norm weights, biases, the small matrices of
    small models): kept gathered for the whole run. Per-tensor sizes after TP; layer tensors on this stage only."""
    p, m = ts.scn.parallel, ts.model
    total = 0.0
    for b in m.blocks:
        numel = b.numel / (p.tp if b.linear is not None else 1)
        if numel >= DS_PERSISTENCE_THRESHOLD:
            continue
        share = ts.rp.stage_layers / max(m.num_layers, 1) if b.layer_scope == "layer" else (1.0 if ts.last else 0.0)
        total += numel * b.count * share
    return total


def _shard_buffers(ts: _TrainSetup) -> tuple[float, float]:
    """(gather, root_unsharded): transient buffers of sharded weights (ZeRO-3 / FSDP2): the layer being
    processed, all-gathered in 16-bit, and FSDP2's root module (embedding, final norm, lm_head), which
    stays unsharded from forward to backward (traced)."""
    t, rp = ts.scn.train, ts.rp
    fsdp = _fsdp(ts)
    gather = rp.layer_max * ts.low if fsdp else 0.0
    if fsdp and t.method == "qlora":
        # FSDP all-gathers the stored parameters: a QLoRA layer travels as packed NF4 (+ scales), and
        # is dequantized one weight at a time (the `dequant` temporary below), not as a 16-bit layer
        gather = rp.layer_max * weight_format("nf4-dq" if t.qlora_double_quant else "nf4").bits / 8
    root_unsharded = 0.0
    if fsdp and ts.scn.framework in ("hf", "torchtitan", "torchtune", "litgpt"):
        root_unsharded = (rp.embedding + rp.lm_head + rp.model_norm) * ts.low
    return gather, root_unsharded


def _pipeline_fsdp_hold(ts: _TrainSetup, grad_accum: int, notes: list[str]) -> tuple[float, float]:
    """(unsharded 16-bit weights, unsharded gradients) FSDP2 keeps across micro-batches under pipeline
    parallelism. torchtitan resolves `fsdp_reshard_after_forward = "default"` to no reshard when PP is
    on (torchtitan/distributed/fsdp.py @b5bcd76 `get_fsdp_reshard_after_forward_policy`), and torch's
    pipeline stage turns off reshard-after-backward and gradient sync for every micro-batch but the
    last (torch/distributed/pipelining/stage.py `backward_maybe_with_nosync`), so the stage's
    parameters stay gathered and its gradients accumulate unsharded, in the reduce dtype (fp32 in
    torchtitan's mixed-precision policy), until the last micro-batch's backward."""
    p = ts.scn.parallel
    if not (_fsdp(ts) and p.pp > 1 and ts.scn.framework == "torchtitan" and grad_accum > 1):
        return 0.0, 0.0
    n = ts.rp.total
    trainable = _adapter_params_rank(ts) if ts.peft else n
    notes.append("FSDP under pipeline parallelism keeps the stage's parameters gathered and its gradients "
                 "unsharded until the last micro-batch (torchtitan default)")
    return n * ts.low, trainable * 4.0


def _pipeline_outputs(ts: _TrainSetup, sv: "_Saved", in_flight: float, grad_accum: int, notes: list[str]) -> float:
    """Bytes of stage outputs and receive buffers torch.distributed.pipelining holds (torchtitan's PP).

    * `forward_one_chunk` caches each micro-batch's output in `fwd_cache` until that micro-batch's backward
      (torch/distributed/pipelining/stage.py), so the in-flight micro-batches' outputs are alive; on the last stage
      that is the 16-bit vocabulary-sharded logits, which the schedule's loss keeps through the loss backward
      (the single-stage loop frees them first). With `train.pp_keep_outputs` every micro-batch's output also goes
      to `output_chunks`, cleared only when the next step starts (every stage until pytorch#153383, 2025-05;
      `schedule.step(return_outputs=False)` later): all of the step's outputs are alive at its last backward.
    * `_prepare_forward_infra` / `_prepare_backward_infra` allocate one receive buffer per micro-batch up front
      (`_make_tensor_from_meta`): activations on every stage but the first (a buffer is the stage input, counted
      as a checkpoint while its micro-batch is in flight), output gradients on every stage but the last."""
    t, p, m = ts.scn.train, ts.scn.parallel, ts.model
    if p.pp <= 1 or ts.scn.framework != "torchtitan":
        return 0.0
    hidden = 2.0 * m.hidden_size / sv.seq_split * sv.tokens
    per_output = 2.0 * m.vocab_size / (p.tp if ts.native_tp else 1) * sv.tokens if ts.last else hidden
    held = grad_accum if t.pp_keep_outputs else (1.0 if ts.last else in_flight)
    if t.pp_keep_outputs:
        notes.append(f"pipeline: the stage outputs of all {grad_accum} micro-batches stay alive until the step "
                     "returns (train.pp_keep_outputs)")
    recv = (0.0 if ts.stage == "first" else (grad_accum - in_flight) * hidden) \
        + (0.0 if ts.last else grad_accum * hidden)
    return per_output * held + recv


def _autocast_on(ts: _TrainSetup) -> bool:
    t = ts.scn.train
    return (t.master_weights and t.precision in ("bf16", "fp16")
            and ts.scn.framework in ("hf", "torchtitan", "torchtune", "litgpt")
            and not ts.peft and not _fsdp(ts))


def _autocast(ts: _TrainSetup, notes: list[str]) -> tuple[bool, float]:
    """(autocast on, bytes of its weight copies): autocast keeps a 16-bit copy of each matmul weight
    from forward to backward (traced); FSDP2's mixed-precision policy instead gathers 16-bit
    parameters, so no autocast there. Checkpointed layers drop theirs after forward and recast
    during recompute."""
    t, rp = ts.scn.train, ts.rp
    autocast = _autocast_on(ts)
    tied_head = (rp.embedding if ts.model.tie_embeddings and ts.last else 0.0)
    cast_params = (rp.lm_head + tied_head) if t.recompute == "full" else (rp.linear + tied_head)
    copies = cast_params * ts.low if (autocast and ts.scn.parallel.zero < 3) else 0.0
    if copies:
        notes.append("torch.autocast keeps 16-bit copies of the fp32 matmul weights until backward")
    return autocast, copies


def _activation_setup(ts: _TrainSetup, autocast: bool) -> ActivationSetup:
    t = ts.scn.train
    return ActivationSetup(
        compute_bytes=4 if t.precision == "fp32" else 2,
        residual_bytes=4 if (autocast or t.precision == "fp32") else 2,
        autocast=autocast, frozen_base=ts.peft, lora_targets=ts.targets,
        lora_rank=t.lora_rank if ts.peft else 0, lora_copy_per_target=ts.peft and t.master_weights,
        lora_dropout=ts.peft and t.lora_dropout > 0,
        base_saves_input=t.method == "qlora" and t.qlora_backend == "bitsandbytes", compile=t.compile,
        attention=t.attention, framework=ts.scn.framework, ssm_kernels=t.ssm_kernels)


def _recompute_plan(ts: _TrainSetup) -> RecomputePlan:
    t = ts.scn.train
    return recompute_plan(ts.scn.framework, t.recompute, ts.model, ts.rp.stage_layers,
                          t.recompute_layers, t.recompute_group)


def _in_flight(ts: _TrainSetup, grad_accum: int) -> float:
    """Micro-batches in flight on this stage (1F1B: pp on the first stage; Korthikanti §4.2.3)."""
    p = ts.scn.parallel
    in_flight = 1.0
    if p.pp > 1:
        in_flight = min(grad_accum, p.pp if ts.stage == "first" else 1)
        if p.vpp > 1 and ts.stage == "first":
            in_flight *= 1 + (p.pp - 1) / (p.pp * p.vpp)
    return in_flight


@dataclass(frozen=True)
class _Saved:
    saved: float               # activations saved for backward on this rank
    working: float             # the layer being recomputed (full recompute)
    per_layer_token: float     # saved bytes per token per layer
    tokens: float              # tokens per rank per micro-batch
    seq_split: int             # sequence parallel divisor of h-sized tensors
    cpu: float = 0.0           # offloaded to host memory


def _encdec_saved(ts: _TrainSetup, setup: ActivationSetup, notes: list[str]) -> _Saved:
    """Encoder-decoder (T5): the encoder over seq_len input tokens, the decoder over target_len target
    tokens (estimate/encdec.py); `tokens` is the target tokens the loss runs over."""
    t, tp, model = ts.scn.train, ts.scn.parallel.tp, ts.model
    src, tgt = t.seq_len, t.target_len or t.seq_len
    notes.append(f"encoder-decoder: encoder activations over {src:,} input tokens, decoder over {tgt:,} target "
                 "tokens (train.target_len) with cross-attention over the input")
    if t.recompute == "none":
        saved, working = encdec.saved_activations(model, setup, t.micro_batch, src, tgt, tp), 0.0
    else:
        saved, working = encdec.checkpointed_activations(model, setup, t.micro_batch, src, tgt, tp)
    dec = encdec.ngram_decoder_token_bytes if encdec.is_ngram(model) else \
        encdec.bart_decoder_token_bytes if encdec.is_bart_style(model) else encdec.decoder_token_bytes
    per_token = dec(model, setup, tp) / max(model.num_layers, 1)
    return _Saved(saved, working, per_token, t.micro_batch * tgt, 1)


def _encdec_forward_end(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved, backward: dict, weights: float) -> dict:
    """End of forward under checkpointing (T5): autocast's weight cache holds every 16-bit weight copy until the
    autocast region exits, next to the checkpoints and the loss's forward tensors (traced)."""
    all_copies = (ts.rp.linear + (ts.rp.embedding if ts.model.tie_embeddings else 0.0)) * ts.low
    return dict(backward, weights=weights + all_copies, activations=sv.saved,
                logits=encdec.forward_logits_per_token(ts.model, setup) * sv.tokens)


def _saved_activations(ts: _TrainSetup, setup: ActivationSetup, in_flight: float, notes: list[str]) -> _Saved:
    t, p, model = ts.scn.train, ts.scn.parallel, ts.model
    if model.is_encoder_decoder:
        return _encdec_saved(ts, setup, notes)
    tp, cp = p.tp, p.cp
    la = layer_activations(model, setup)
    tokens = t.micro_batch * t.seq_len / cp                  # tokens per rank per micro-batch
    seq_split = tp if (p.sp and tp > 1 and ts.native_tp) else 1  # sequence parallel shards the h-sized tensors
    per_layer_token = la.replicated / seq_split + la.sharded / tp
    # eager attention materialises the full S x S scores (causal masking does not skip them)
    per_layer_token += la.score_bytes * model.num_heads / tp * (t.seq_len / cp)
    layers = ts.rp.stage_layers
    checkpoint = setup.residual_bytes * model.hidden_size / seq_split   # full recompute keeps each layer's input
    rplan = _recompute_plan(ts)
    if rplan.kind == "full":
        # checkpointed layers keep one input per group of `group` layers; the others keep everything;
        # backward recomputes one group at a time
        f, g = rplan.full_fraction, rplan.group
        saved = tokens * layers * in_flight * (f * checkpoint / g + (1.0 - f) * per_layer_token)
        working = tokens * per_layer_token * min(g, max(layers, 1))
    elif rplan.kind == "selective-op":
        rep, shard, per_rank = op_sac_layer_bytes(model, setup.compute_bytes, setup.residual_bytes, p.ep)
        saved = tokens * layers * in_flight * (rep / seq_split + shard / tp + per_rank)
        working = tokens * per_layer_token                   # one layer's dropped tensors recomputed
    else:
        if rplan.kind == "selective-core" and (t.attention == "eager" or model.traits.eager_attention_only):
            per_layer_token -= la.score_bytes * model.num_heads / tp * (t.seq_len / cp)
        saved = tokens * layers * per_layer_token * in_flight
        working = 0.0
    if ts.peft and peft_fused_experts(ts.scn, model) and any(r.startswith(EXPERT_ROLE) for r in ts.targets):
        # peft adapts transformers' fused expert parameters (gate_up_proj, down_proj [E, out, in]) with a
        # ParamWrapper: forward builds W + s * B @ A (baddbmm) for every expert and grouped_mm saves that
        # merged 16-bit weight for its input gradient, so each MoE layer keeps a full copy of its experts
        # until backward (traced: Qwen3-MoE); under full recompute only the layer being recomputed
        experts = sum(b.total for b in model.blocks if b.kind == "expert") / (p.ep if p.ep > 1 else tp)
        per_layer = experts / max(model.num_moe_layers, 1) * ts.low
        if rplan.kind == "full":
            working += per_layer
        else:
            saved += per_layer * model.num_moe_layers * ts.rp.stage_layers / model.num_layers * in_flight
    if ts.scn.tool == "unsloth" and rplan.kind == "full" and ts.peft and unsloth_layer_bytes(model) is not None:
        # Unsloth's fused LoRA autograd functions save less than HF + peft, and its MLP backward works in
        # place: the recomputed layer holds its own saved set plus the incoming gradient and dY @ W_down^T
        # attention other than flash: no flash-attn package, so Unsloth runs xformers with K, V expanded
        layer = unsloth_layer_bytes(model, lora_addmm=t.unsloth_lora_addmm, flash_attn=t.attention == "flash") or 0.0
        working = tokens * (layer / tp) * min(rplan.group, max(layers, 1))
        if t.activation_offload:
            # Unsloth's offloaded checkpointer recomputes the layer and then calls
            # torch.autograd.backward(output, dY) with the recomputed layer output still bound in its frame
            # (unslothai/unsloth-zoo unsloth_zoo/gradient_checkpointing.py, Unsloth_Offloaded_Gradient_Checkpointer
            # .backward @9c643b6 and @ce232d6): one more hidden-size tensor through the layer's whole backward
            working += tokens * setup.residual_bytes * model.hidden_size / seq_split
            # the embedding output stays on the GPU through the whole backward: Unsloth's
            # prepare_model_for_kbit_training(use_reentrant=True) calls enable_input_require_grads, whose hook
            # makes that (leaf) output require grad, so the first checkpointer's graph edge is an AccumulateGrad
            # node that holds the tensor until backward ends (unsloth/models/_utils.py and llama.py get_peft_model
            # at d9ed4bef and f4633d8); offloading moves only each layer's saved copy to the host
            working += tokens * setup.residual_bytes * model.hidden_size / seq_split
        notes.append("Unsloth: fused LoRA kernels (fast_lora.py) save the layer input, e and g of the MLP")
        if t.attention != "flash":
            notes.append(f"Unsloth with attention {t.attention}: no flash-attn package, so Unsloth runs xformers with "
                         "K and V copied to every head (saved for backward)")
        if not t.unsloth_lora_addmm:
            notes.append("Unsloth before 2025-03 (train.unsloth_lora_addmm: false): matmul_lora's out-of-place LoRA "
                         "add, a tokens x intermediate temporary at the MLP backward")
        notes.append("Unsloth's published max-context rows (its 2024-12 release, modelled with "
                     "train.unsloth_lora_addmm: false and xformers attention) are ~7% shorter than gpuplan's "
                     "(docs/finetune-tools.md): the error bar shown does not cover tool: unsloth; long-context "
                     "limits are somewhat optimistic")
    cpu = 0.0
    if t.activation_offload and ts.scn.tool is not None and rplan.kind == "full" and rplan.full_fraction >= 1.0:
        # offloaded gradient checkpointing of the HF tools (Unsloth's "unsloth" mode, Axolotl's
        # gradient_checkpointing: offload, LLaMA-Factory's use_unsloth_gc): each layer's input goes to host
        # memory in forward and comes back for its recompute; one checkpoint is in flight on the GPU. (torchtune's
        # OffloadActivations keeps its own rule below, validated on its published rows.)
        cpu += saved
        saved = tokens * checkpoint * in_flight
        notes.append("offloaded gradient checkpointing: layer inputs in host memory, one in flight on the GPU")
    elif t.activation_offload:
        # saved activations stream to host memory; about two layers stay on the GPU (in flight)
        cpu += saved
        saved = min(saved, tokens * 2 * per_layer_token * in_flight)
        notes.append("activation offloading keeps about two layers' activations on the GPU")
    return _Saved(saved, working, per_layer_token, tokens, seq_split, cpu)


def _head_and_loss(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved) -> tuple[float, float]:
    """(head activations, loss block) on the last stage: final norm + lm_head input, and the logits."""
    if not ts.last:
        return 0.0, 0.0
    t, model = ts.scn.train, ts.model
    vocab_rank = model.vocab_size / (ts.scn.parallel.tp if ts.native_tp else 1)
    head_acts = sv.tokens * (setup.residual_bytes * 2 + 2) * model.hidden_size / sv.seq_split
    if sv.seq_split > 1 and ts.scn.framework == "torchtitan":
        # torchtitan's lm_head is ColwiseParallel(input_layouts=Shard(1)): the sequence-parallel norm output
        # is all-gathered and the mm saves the whole sequence for its weight gradient (parallelize_llama.py
        # @9dec370 apply_tp); Megatron's ColumnParallelLinear saves its shard and gathers again in backward
        head_acts += sv.tokens * 2 * model.hidden_size * (1 - 1 / sv.seq_split)
    if model.is_encoder_decoder:
        head_acts = 0.0           # the decoder's final norm and lm_head input are in encdec.decoder_token_bytes
    head_acts += sv.tokens * embedding_dropout_bytes(model)
    logits = loss_block_bytes(ts.scn, vocab_rank) * sv.tokens
    if encdec.is_ngram(model) and t.loss == "full":
        logits = encdec.ngram_loss_bytes_per_token(model, setup, t.micro_batch) * sv.tokens
    elif model.is_encoder_decoder and t.loss == "full":
        logits = encdec.loss_bytes_per_token(model, setup) * sv.tokens
    elif not model.traits.loss_fp32 and ts.scn.framework == "hf" and t.loss == "full":
        # the model's own CrossEntropyLoss on the 16-bit logits (no upcast): T5's loss block (3 x 2 bytes x V;
        # 12 under autocast, where log_softmax runs in fp32), plus what the loop holds of the output
        logits = (encdec.loss_bytes_per_token(model, setup) + held_logits_bytes(ts.scn)) * vocab_rank / \
            model.vocab_size * sv.tokens
    if model.traits.final_logit_softcap and ts.scn.framework == "hf" and t.loss == "full":
        # Gemma 2: logits = tanh(logits / cap) * cap; the tanh output (16-bit) is saved (traced)
        logits += 2.0 * model.vocab_size / (ts.scn.parallel.tp if ts.native_tp else 1) * sv.tokens
    return head_acts, logits


def _dequant_temp(ts: _TrainSetup) -> float:
    """QLoRA: bitsandbytes dequantizes one weight at a time to 16-bit."""
    t = ts.scn.train
    if t.method != "qlora":
        return 0.0
    dequant = max((b.numel for b in ts.model.linear_blocks), default=0) / ts.scn.parallel.tp * ts.low
    if ts.fabric_bnb:
        # MatMul4Bit: F.dequantize_4bit(B, quant_state).to(A.dtype): dequantize_4bit returns the
        # dtype the weight was quantized from (QuantState.dtype, fp16 under Fabric), cast to the bf16
        # compute dtype: both copies exist during the cast (bitsandbytes 0.41-0.42
        # autograd/_functions.py). The largest quantized matrix is the (quantized) lm_head.
        head = ts.rp.lm_head + ts.untied_head if ts.last else 0.0
        dequant = max(dequant / ts.low, head) * (2 + (0 if t.precision == "fp16" else ts.low))
    return dequant


def _fabric_next_forward(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved, backward: dict) -> dict | None:
    """bitsandbytes <= 0.43.1 MatMul4Bit keeps its input as a ctx attribute (`ctx.tensors = (A, B)`,
    autograd/_functions.py @0.42.0; removed in 0.43.2, bitsandbytes#1270 "fix QLoRA mem bug"), not via
    save_for_backward, so backward does not free it: it lives as long as the graph. litgpt's loop keeps
    the graph through `logits` (a list of lm_head chunks) until the next iteration's `logits = model(...)`
    returns (litgpt/finetune/lora.py @00af8b0 fit; finetune/lora.py @8641822 train). At the end of that
    forward the previous micro-batch's 4-bit-linear inputs are alive next to the new activations: per
    token and layer the qkv and fc inputs (norm outputs), the attention output (proj's input, a view of
    the SDPA output that keeps it alive) and the MLP product (down-proj input); plus the final-norm output
    read by lm_head, and the old and new 16-bit logit chunks (the old list is released only by the
    rebinding)."""
    if not (ts.fabric_bnb and ts.scn.train.recompute == "none" and ts.last):
        return None
    model, tp = ts.model, ts.scn.parallel.tp
    h_, cb = model.hidden_size, setup.compute_bytes
    i_eff = _mlp_mix(model)[1]
    held = sv.tokens * (ts.rp.stage_layers * cb * (2 * h_ + model.num_heads * model.v_head_dim / tp + i_eff / tp)
                        + cb * h_)
    return dict(backward, activations=backward["activations"] + held,
                logits=2 * ts.low * model.vocab_size * sv.tokens)


def _attention_backward(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved, states: tuple, extra: dict,
                        grad_accum: int) -> dict | None:
    """SDPA's math path keeps S x S probabilities, and its backward in the last layer allocates two more
    fp32 score-sized tensors (the gradient of the probabilities from bmm and the softmax backward
    output). By then the loss block is freed and the gradients of the head (V x h) and of the last
    layer's o_proj/MLP exist, their autocast copies released (traced: Falcon)."""
    t, p, model = ts.scn.train, ts.scn.parallel, ts.model
    if not (math_path_attention(model, setup) and ts.last and t.recompute != "full"):
        return None
    weights, grads, optim, _ = states
    post = sum(b.numel for b in model.blocks if b.layer_scope == "layer" and (
        b.kind in ("mlp", "expert", "shared_expert") or b.name in ("o_proj", "dense", "c_proj")))
    post = post / p.tp + model.vocab_size * model.hidden_size / (p.tp if ts.native_tp else 1)
    grad_div = ts.shard if p.zero >= 2 else 1
    score_grads = 2 * 4.0 * model.num_heads / p.tp * (t.seq_len / p.cp) * sv.tokens
    copies = extra["autocast_copies"]
    return dict(
        weights=weights + extra["root_unsharded"] + (max(0.0, copies - post * ts.low) if copies else 0.0),
        gradients=grads if grad_accum > 1 else post * state_bytes(ts.scn).grad / grad_div, optimizer_states=optim,
        activations=sv.saved + extra["head_acts"], temporary=extra["temporary"] + score_grads)


def _ssm_scan_backward(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved, states: tuple, extra: dict,
                       grad_accum: int) -> dict[str, float] | None:
    """transformers' torch path of the Mamba-1 scan (kernels absent, `train.ssm_kernels: false`): the
    backward of the last SSM layer's sequential loop turns each step's slice gradient of exp(dt·A) and of
    dt·B·x into a zero-filled full-size fp32 tensor (select_backward) that is added into a full-size
    accumulation buffer: four fp32 d x N tensors per token (16·d·N bytes) while every saved activation is
    still alive and the loss block is already freed (traced: Mamba-1 small config)."""
    t, p, model = ts.scn.train, ts.scn.parallel, ts.model
    ssm = model.ssm
    if ssm is None or setup.ssm_kernels or ssm.variant != "mamba1" or not model.num_ssm_layers \
            or t.recompute == "full" or not ts.last:
        return None
    weights, grads, optim, _ = states
    grad_div = ts.shard if p.zero >= 2 else 1
    head = model.vocab_size * model.hidden_size / (p.tp if ts.native_tp else 1) * state_bytes(ts.scn).grad / grad_div
    # a mixer scanning d_inner in sequential slices (one loop per slice) runs one slice's backward at a time
    scan = 16.0 * ssm.d_inner / p.tp * ssm.d_state * sv.tokens / ssm.scan_slices
    return dict(weights=weights + extra["root_unsharded"] + extra["autocast_copies"],
                gradients=grads if grad_accum > 1 else head, optimizer_states=optim,
                activations=sv.saved + extra["head_acts"], temporary=extra["temporary"] + scan)


def _train_components(scn: Scenario, model: ModelSpec, stage: str, vision_saved: float = 0.0,
                      vision_end: float | None = None) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Memory components of each training phase on one pipeline stage (+ '_cpu': host bytes).
    `vision_saved`: a vision tower's saved activations on this stage (estimate/vision.py); they live from
    the start of the forward until the tower's backward, the last of the step, so both backward phases hold
    them; `vision_end` (default `vision_saved`): what the tower holds during its own backward (under full
    recompute its checkpoints plus one recomputed layer)."""
    t, p = scn.train, scn.parallel
    assert t is not None
    notes: list[str] = []
    ts = _train_setup(scn, model, stage)
    states, cpu = _offload(ts, _model_states(ts, text_only=vision_end is None), notes)   # images: vision_end set
    gather, root_unsharded = _shard_buffers(ts)
    autocast, autocast_copies = _autocast(ts, notes)
    setup = _activation_setup(ts, autocast)
    grad_accum = _grad_accum(scn)
    in_flight = _in_flight(ts, grad_accum)
    sv = _saved_activations(ts, setup, in_flight, notes)
    cpu += sv.cpu
    head_acts, logits = _head_and_loss(ts, setup, sv)
    ds = _deepspeed_buffers(ts)
    if ds:
        notes.append("DeepSpeed ZeRO buckets and gathered parameters (reduce buckets, prefetch, reuse distance) "
                     "as the generated ds_config sets them")
    temporary = max(gather, ds) + _dequant_temp(ts)
    weights, grads, optim, optim_temp = states
    if t.optimizer_in_backward:
        if grad_accum > 1:
            notes.append("optimizer-in-backward cannot accumulate gradients; accumulation ignored")
        # each parameter steps as soon as its gradient is ready: one layer's gradients at a time
        grads = grads / max(ts.rp.stage_layers, 1)
        optim_temp = 0.0
        grad_accum = 1
    held_w, held_g = _pipeline_fsdp_hold(ts, grad_accum, notes)
    head_acts += _pipeline_outputs(ts, sv, in_flight, grad_accum, notes)
    # FSDP under PP: the unsharded accumulators stand in for the sharded gradients, which exist only after the
    # last micro-batch's reduce-scatter (zero_grad(set_to_none) at the step start), group by group as the
    # accumulators are freed
    g_accum = held_g or (grads if grad_accum > 1 else 0.0)
    weights_live = weights + held_w
    phases = {
        # backward starts: every saved activation and the loss block alive, no new gradients yet
        "backward": dict(weights=weights_live + autocast_copies + root_unsharded, gradients=g_accum,
                         optimizer_states=optim, activations=sv.saved + head_acts + vision_saved, logits=logits,
                         temporary=temporary),
        # backward ends: gradients complete, checkpoints still held, the first layer recomputed
        "backward_end": dict(weights=weights_live + root_unsharded, gradients=held_g or grads, optimizer_states=optim,
                             activations=sv.saved * (1.0 / max(ts.rp.stage_layers, 1)) + sv.working + vision_saved,
                             temporary=temporary),
        "optimizer_step": dict(weights=weights, gradients=grads, optimizer_states=optim, temporary=optim_temp),
    }
    if vision_end is not None:
        _vision_tower_phases(ts, model, phases, vision_end)
    extra = dict(autocast_copies=autocast_copies, root_unsharded=root_unsharded, head_acts=head_acts, temporary=temporary,
                 weights_live=weights_live, autocast=autocast, end=phases["backward_end"], vision_saved=vision_saved)
    phases.update(_situational_phases(ts, setup, sv, phases["backward"], (weights, grads, optim, optim_temp), extra,
                                      grad_accum, notes))
    if grad_accum > 1:
        notes.append(f"gradient accumulation over {grad_accum} micro-batches keeps gradients alive during backward")
    return {"_cpu": {"cpu": cpu, "stranded": _stranded_segments(ts, setup, sv)}, **phases}, notes


def _stranded_segments(ts: _TrainSetup, setup: ActivationSetup, sv: "_Saved") -> float:
    """Cached segments free at the loss peak that the loss block cannot use (reserved, not allocated). Only the
    head's hidden-sized activations can sit in the layer segments (a pipeline's held outputs are logit-sized)."""
    return stranded_layer_segments(ts, sv, _head_and_loss(ts, setup, sv)[0]) + fsdp1_gather_segments(ts)


def fsdp1_gather_segments(ts: _TrainSetup) -> float:
    """A second unit's all-gather segment that FSDP1's unshard stream keeps at the loss peak.

    FSDP1 (HF accelerate's FSDP plugin, Answer.AI fsdp_qlora) all-gathers each unit's padded flat parameter on
    its own unshard stream and, when resharding, records the compute stream on it before freeing
    (flat_param.py `_free_unsharded_flat_param`: `_no_dispatch_record_stream`), so the block is reusable only once
    the compute stream is past it; with `limit_all_gathers` the CPU issues up to two all-gathers ahead
    (_limiter_utils.py `_FreeEventQueue`: `_max_num_inflight_all_gathers = 2`, torch v2.2.0). A freed block is
    reused only on the stream that allocated it (c10/cuda/CUDACachingAllocator.cpp, header comment), so the
    unshard stream holds two units' segments that the default stream's loss block cannot use; one of them is
    already counted as the gather buffer (`_shard_buffers`). Under CPUOffload(offload_params=True) each of the
    two also has the GPU copy of its host shard that feeds the all-gather (flat_param.py `pre_unshard`:
    `flat_param_to(self.device)`), alive until the unit reshards."""
    if ts.scn.framework != "hf" or not _fsdp(ts):
        return 0.0
    unit = _shard_buffers(ts)[0]
    return unit + (2 * unit / ts.shard if ts.scn.parallel.offload == "optimizer+params" else 0.0)


def stranded_layer_segments(ts: _TrainSetup, sv: "_Saved", head_acts: float) -> float:
    """Bytes the caching allocator holds reserved but free at the loss peak under full-layer recompute: the
    segments that one layer's forward working set made.

    With every layer checkpointed, each layer's forward (no_grad under reentrant checkpointing; under
    non-reentrant its saved tensors are dropped) allocates its intermediates (norm output, q/k/v, gate, up,
    act: the HF no_grad working set of `_prefill_bytes_per_token`) and frees them at the layer's end. The
    first forward finds no free block for them, so they get their own segments. CUDACachingAllocator never
    merges two segments and serves a request only from one free block of one segment
    (c10/cuda/CUDACachingAllocator.cpp: get_free_block / alloc_block, pytorch v2.2.0), and every loss-block
    request (16-bit or fp32 logits) is larger than any of those blocks: at the loss peak the layer segments
    are free but unusable, beside the loss block that new segments hold. Counted only when the vocabulary
    rows are wider than the intermediate ones (else the logits fit in them). Replaying whole fake-tensor
    steps of Llama-2-7B LoRA/QLoRA (reentrant recompute, the fsdp_qlora loop) through the large-pool model of
    scripts/trace_loss_block.py (scripts/trace_step_reserve.py) strands 1.1-3.1 GiB here at batch 4-10 x 2048,
    1.4-1.7x this figure (the recomputed layer's backward makes more such segments; 2-6x at 512-2048 tokens, where
    segment rounding dominates): this is the lower bound. Only reserved-memory readings (max reserved,
    nvidia-smi) see it, and the allocator frees wholly free segments before it reports an OOM (`_finish`)."""
    t, model, tp = ts.scn.train, ts.model, ts.scn.parallel.tp
    if not ts.last or t.loss != "full" or model.is_encoder_decoder or not model.num_layers:
        return 0.0
    rplan = _recompute_plan(ts)
    if rplan.kind != "full" or rplan.full_fraction <= 0:
        return 0.0
    vocab_rank = model.vocab_size / (tp if ts.native_tp else 1)
    inter_rank = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_tok, 1)) / tp
    if vocab_rank <= inter_rank:
        return 0.0
    per_token = _prefill_bytes_per_token(model, tp)
    if ts.peft and model.gated_mlp and "up" in ts.targets:
        # peft's LoRA forward adds out of place (`result = result + lora_B(lora_A(dropout(x))) * scaling`,
        # peft tuners/lora/layer.py Linear.forward): while act(gate) is alive, up_proj holds its base output, the
        # scaled adapter output and their sum, one intermediate-sized tensor more than the plain MLP's peak
        per_token += 2.0 * model.intermediate_size / tp
    return max(0.0, sv.tokens * per_token - head_acts)


def _vision_tower_phases(ts: _TrainSetup, model: ModelSpec, phases: dict, vision_end: float) -> None:
    """A vision tower's backward is the last of the step (estimate/vision.py). At the decoder's backward end the
    tower's activations are alive (in `backward_end` already) and its weights have no gradients yet; during
    its own backward the decoder's activations are gone, the projector's gradients exist and the tower
    layers' do not yet, and it holds `vision_end`."""
    if ts.scn.train.method != "full" or not ts.rp.total:
        phases["vision_backward"] = dict(phases["backward_end"], activations=vision_end)
        return
    g = phases["backward_end"]["gradients"]
    proj = sum(k * n for k, n in model.vision_tower.projector)
    phases["backward_end"]["gradients"] = g * (1.0 - ts.rp.vision / ts.rp.total)
    phases["vision_backward"] = dict(phases["backward_end"], activations=vision_end,
                                     gradients=g * (1.0 - max(0.0, ts.rp.vision - proj) / ts.rp.total))


def _tied_grad_accumulation(ts: _TrainSetup) -> float:
    """A tied embedding's gradient arrives twice: lm_head's contribution early in backward waits in the shared
    weight's autograd input buffer, the embedding's own at the very end is a second full-size gradient that
    autograd then adds to it, so at the end of backward the matrix's gradient exists twice (traced:
    SmolLM-135M under autocast, +vocab x hidden x 4 bytes). Whether the sum is taken in place depends on what
    the head delivers (torch/csrc/autograd/input_buffer.cpp, InputBuffer::accumulate: in place only when the
    buffered gradient holds the last reference to its storage, can_accumulate_inplace). Under autocast it
    is the fresh fp32 output of the weight cast's backward: added in place, one extra copy. Without a cast
    (pure 16-bit or fp32 weights) it comes straight from linear's backward and the sum is taken out of
    place, so the head's gradient, the embedding's and their sum are alive together: two extra copies
    (traced: 2-layer Gemma-2; the same three copies with real CPU tensors, by allocation tracking and by
    peak RSS, torch 2.13). Only where the full gradient lives on the rank (no gradient sharding, no pipeline split of
    the tied pair) and the embedding trains."""
    m, p = ts.model, ts.scn.parallel
    if not m.tie_embeddings or ts.peft or ts.untied_head or p.pp > 1 or p.zero >= 2 or ts.stage != "only":
        return 0.0
    copies = 1 if _autocast_on(ts) else 2
    # the shared matrix only (other embedding tables on the rank, e.g. per-layer input embeddings, are not tied)
    tied = min(ts.rp.embedding, m.vocab_size * m.hidden_size)
    return copies * tied * state_bytes(ts.scn).grad


def _situational_phases(ts: _TrainSetup, setup: ActivationSetup, sv: _Saved, backward: dict[str, float],
                        states: tuple[float, float, float, float], extra: dict, grad_accum: int,
                        notes: list[str]) -> dict[str, dict[str, float]]:
    """Peaks that only some setups have: T5's end of forward under recompute, Lightning Fabric's next forward,
    eager attention's backward, the SSM torch path's scan backward, a full state-dict save."""
    t, p = ts.scn.train, ts.scn.parallel
    weights, grads, optim, optim_temp = states
    out: dict[str, dict[str, float]] = {}
    if ts.model.is_encoder_decoder and extra["autocast"] and t.recompute != "none":
        out["forward_end"] = _encdec_forward_end(ts, setup, sv, backward, extra["weights_live"] + extra["root_unsharded"])
    nxt = _fabric_next_forward(ts, setup, sv, backward)
    if nxt is not None:
        out["next_forward"] = nxt
    tied = _tied_grad_accumulation(ts)
    if tied:
        # the embedding's backward is the last of the step: every layer's activations are freed by then (a
        # vision tower's, whose backward comes after, are not)
        end = extra["end"]
        out["tied_grad_sum"] = dict(end, activations=extra["vision_saved"], temporary=end["temporary"] + tied)
    att = _attention_backward(ts, setup, sv, states, extra, grad_accum)
    if att is not None:
        out["attention_backward"] = att
    scan = _ssm_scan_backward(ts, setup, sv, states, extra, grad_accum)
    if scan is not None:
        out["ssm_scan_backward"] = scan
        notes.append("SSM layers on transformers' torch path (no mamba_ssm kernels): every step's fp32 state is "
                     "saved for backward")
    if t.full_state_dict and p.zero >= 3 and ts.shard > 1:
        # loading/saving a full state dict materialises the whole 16-bit model next to the shard
        out["checkpoint"] = dict(weights=weights + ts.rp.total * ts.low, optimizer_states=optim)
        notes.append("full state-dict load/save holds an unsharded 16-bit copy of the model on each GPU")
    return out


def loss_block_bytes(scn: Scenario, vocab_per_rank: float) -> float:
    """Bytes per token of the loss at the start of backward.

    HF full cross-entropy: the fp32 log-softmax output, its gradient and the gradient into the
    16-bit logits, 12 bytes x vocab (traced). Chunked loss (torchtune CEWithChunkedOutputLoss,
    litgpt chunked_cross_entropy) keeps all 16-bit logit chunks plus one chunk's fp32 block.
    Fused linear+cross-entropy (Liger) never materialises full logits: about one chunk.
    Megatron's fused vocab-parallel cross-entropy keeps fp32 logits + 16-bit logits: 6 bytes."""
    t = scn.train
    assert t is not None
    if t.loss == "cce":
        # Cut Cross-Entropy (Wijmans et al. 2024, arXiv:2411.09009; Unsloth's default): logits are computed
        # blockwise in SRAM and recomputed in backward; only the per-token log-sum-exp (fp32) and loss remain
        return 8.0
    if t.loss == "fused-linear":
        return 12.0 * vocab_per_rank / t.loss_chunks
    if t.loss == "chunked":
        n = t.loss_chunks
        if scn.framework == "torchtune":
            if _compiled_loss(scn):
                # training.compile_loss compiles compute_cross_entropy: the fused graph keeps its bf16
                # input chunk (and a per-row logsumexp), not the fp32 log-softmax; backward writes
                # one chunk's 16-bit gradient
                return 2.0 * vocab_per_rank + 2.0 * vocab_per_rank / n
            # CEWithChunkedOutputLoss: F.cross_entropy(chunk.float()) saves every chunk's fp32
            # log-softmax (4 B); the recipe deletes the 16-bit logits before backward; one chunk's
            # fp32 grad-out and grad-in are alive in its backward
            return 4.0 * vocab_per_rank + 8.0 * vocab_per_rank / n
        if scn.framework == "litgpt":
            # chunked_cross_entropy in the training dtype: the loop holds the bf16 logit chunks until
            # backward (2 B) and each chunk's bf16 log-softmax is saved (2 B); one chunk's bf16
            # grad-out and grad-in in its backward
            return 4.0 * vocab_per_rank + 4.0 * vocab_per_rank / n
        return 2.0 * vocab_per_rank + 12.0 * vocab_per_rank / n
    if scn.framework == "torchtitan" and loss_parallel(scn) and not _compiled_loss(scn):
        # torchtitan runs the loss under torch's loss_parallel() when TP > 1 (logits stay vocabulary-sharded
        # DTensors). Its nll_loss backward (torch/distributed/tensor/parallel/loss.py
        # _nll_loss_and_log_softmax_backward) folds the log-softmax backward in:
        # (zeros_like(x) + exp(x)) * grad_output with x the saved fp32 log-softmax: four fp32 vocabulary
        # tensors at once, 16 bytes (traced on CPU: scripts/trace_loss_block.py)
        return 16.0 * vocab_per_rank
    if scn.framework == "torchtitan" and _compiled_loss(scn):
        # torchtitan compiles its cross-entropy with the model (components/loss.py
        # build_cross_entropy_loss, since bbb1b61 2025-04-02): the fused graph keeps the 16-bit logits
        # and a per-row logsumexp, not the fp32 copy and log-softmax; backward writes one 16-bit
        # gradient. (Releases before April 2025 compiled only the blocks: 12 bytes.)
        return 4.0 * vocab_per_rank
    return (6.0 if scn.framework == "megatron" else 12.0) * vocab_per_rank + held_logits_bytes(scn) * vocab_per_rank


# Bytes per logit of the model output a training loop keeps through backward (train.held_logits). transformers
# before 4.46 upcast the logits in LlamaForCausalLM.forward (`.float()`, kept in the returned output: its 4.45
# warning "the `logits` model output will have the same type as the model (except at train time, where it will
# always be FP32)"); 4.46 moved the upcast into the loss (loss_utils.ForCausalLMLoss) and returns 16-bit logits.
HELD_LOGITS_BYTES = {"none": 0.0, "model": 2.0, "fp32": 4.0}


def held_logits_bytes(scn: Scenario) -> float:
    """Bytes per logit the caller's reference to the model output keeps alive at the start of backward (on top of
    the loss block). Answer.AI's fsdp_qlora train.py @049515f holds `output = model(...)` until after the optimizer
    step ("Delete the output so more memory frees up before the next forward pass"); HF Trainer's compute_loss
    returns only the loss. Replayed on CPU (the loss block of scripts/trace_loss_block.py with transformers 4.44's
    forward and the output held): 16.0 bytes per logit allocated, 4 above the 12 of the loss alone."""
    t = scn.train
    if t is None or scn.framework != "hf" or t.loss != "full":
        return 0.0
    return HELD_LOGITS_BYTES[t.held_logits]


def loss_parallel(scn: Scenario) -> bool:
    """torchtitan enables loss parallel whenever TP is on (`training.disable_loss_parallel` defaults to False,
    torchtitan/parallelisms/parallel_dims.py @9dec370 `loss_parallel_enabled = tp_enabled and enable_loss_parallel`)."""
    return scn.framework == "torchtitan" and scn.parallel.tp > 1


def stranded_segments_bytes(scn: Scenario, model: ModelSpec, stage: str) -> float:
    """`_stranded_segments` of a training scenario's `stage`, before the headroom cap `_finish` applies (what
    `gpuplan explain` lists beside the stranded logits)."""
    ts = _train_setup(scn, model, stage)
    setup = _activation_setup(ts, _autocast_on(ts))
    sv = _saved_activations(ts, setup, _in_flight(ts, _grad_accum(scn)), [])
    return _stranded_segments(ts, setup, sv)


def stranded_logits_bytes(scn: Scenario, model: ModelSpec, stage: str) -> float:
    """Bytes the caching allocator holds reserved but cannot use at the loss backward: the freed 16-bit logits.

    torchtitan (uncompiled loss, train.py @9dec370) computes `cross_entropy(pred.flatten(0, 1).float(), labels)`
    and `del pred` before backward: the 16-bit logits block (2 bytes per logit) and the fp32 copy beside it are
    freed, and backward then asks for fp32 vocabulary tensors (4 bytes per logit) twice the 16-bit block's size.
    CUDACachingAllocator serves a request only from one free block (best fit, split) merged with its free
    neighbours, or from new memory (a new segment, or with expandable segments pages mapped at the segment's
    end), so the 2-byte block stays reserved beside the 12 (16 with loss parallel) allocated. Replaying the loss
    block's allocation sequence through that rule gives reserved = allocated + 2 bytes per logit
    (scripts/trace_loss_block.py). Only the reserved figure (`max reserved`, nvidia-smi, an OOM) sees it."""
    t = scn.train
    if scn.framework in ("hf", "deepspeed") and t.loss == "full" and t.held_logits != "model" and stage in ("last", "only"):
        # transformers before 4.46 with the output held: `.float()` frees the 16-bit logits in forward and backward
        # then asks for fp32 vocabulary tensors, so the 2-byte block stays reserved as in torchtitan's case
        # (replayed: 18.0 reserved against 16.0 allocated bytes per logit). Without the hold (HF Trainer's
        # compute_loss returns the loss only) the 16-bit logits are freed before backward too (before 4.46 by the
        # upcast, since then when the output is dropped): the sequence of torchtitan's loss, 12 allocated / 14
        # reserved. Only a loop that holds the 16-bit output (`held_logits: model`) keeps the block in use.
        return 2.0 * model.vocab_size / scn.parallel.tp * t.micro_batch * t.seq_len / scn.parallel.cp
    if scn.framework != "torchtitan" or _compiled_loss(scn) or t.loss != "full" or stage not in ("last", "only"):
        return 0.0
    if scn.parallel.pp > 1:
        return 0.0                      # the pipeline schedule keeps the 16-bit logits alive (_pipeline_outputs)
    vocab_rank = model.vocab_size / scn.parallel.tp
    return 2.0 * vocab_rank * t.micro_batch * t.seq_len / scn.parallel.cp


def _compiled_loss(scn: Scenario) -> bool:
    """Whether the loss runs compiled: the user's `compile_loss`, else the framework's behaviour with
    `compile` on (torchtune's training.compile compiles its loss; torchtitan since bbb1b61)."""
    t = scn.train
    if t.compile_loss is not None:
        return t.compile_loss
    return t.compile and scn.framework in ("torchtune", "torchtitan")


def _grad_accum(scn: Scenario) -> int:
    t = scn.train
    assert t is not None
    if not t.global_batch:
        return 1
    return grad_accum_steps(t.global_batch, t.micro_batch, scn.dp)


# ---- inference ----------------------------------------------------------------------------------------
# each engine's own name for the share of GPU memory it reserves up front (scenario: infer.gpu_memory_utilization):
# vLLM --gpu-memory-utilization (vllm/engine/arg_utils.py), SGLang --mem-fraction-static
# (python/sglang/srt/server_args.py), TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction (tensorrt_llm/llmapi)
_RESERVE_KNOB = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static",
                 "trtllm": "free_gpu_memory_fraction"}


def _reserve_knob(inf) -> str:
    knob = _RESERVE_KNOB.get(inf.engine, "gpu_memory_utilization")
    text = f"{knob}={inf.gpu_memory_utilization:g}"
    return text if knob == "gpu_memory_utilization" else text + " (scenario infer.gpu_memory_utilization)"


def sglang_mem_fraction_static(capacity: float, tp: int, pp: int) -> float:
    """SGLang's default --mem-fraction-static when none is given (sgl-project/sglang v0.5.5.post1, the PyPI wheel of
    tag v0.5.5.post1, `srt/server_args.py` ServerArgs._handle_gpu_memory_settings): gpu_mem is nvidia-smi's
    memory.total in MiB; reserved = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2
    + tp x pp / 8 x 1024 MiB, at least 10 GiB on cards over 60 GiB, with the chunk and graph sizes its own
    defaults by gpu_mem (2048 / 8 below 20 GiB, 2048 / 24 or 80 below 35 GiB, 4096 / 32 or 160 below 60 GiB,
    8192 / 256 or 512 below 160 GiB, 16384 / 512 above; the larger graph size from tp 4); the fraction is
    round((gpu_mem - reserved) / gpu_mem, 3). Speculative decoding, DP attention, piecewise graphs and
    multimodal models adjust it further there; not here."""
    mib = capacity / MiB
    wide = tp >= 4
    if mib < 20 * 1024:
        chunk, graphs = 2048, 8
    elif mib < 35 * 1024:
        chunk, graphs = 2048, 80 if wide else 24
    elif mib < 60 * 1024:
        chunk, graphs = 4096, 160 if wide else 32
    elif mib < 160 * 1024:
        chunk, graphs = 8192, 512 if wide else 256
    else:
        chunk, graphs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp * pp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def sglang_fraction(scn: Scenario, capacity: float) -> float:
    """The --mem-fraction-static an SGLang plan runs with: infer.gpu_memory_utilization when the scenario sets it,
    else SGLang's own default on this GPU (the launch file passes the same value)."""
    inf = scn.infer
    assert inf is not None
    if "gpu_memory_utilization" in inf.model_fields_set:
        return inf.gpu_memory_utilization
    return sglang_mem_fraction_static(capacity, scn.parallel.tp, scn.parallel.pp)


def _kv_pool_bytes(inf, capacity: float, rest: float) -> float:
    """The KV pool the engine allocates beside `rest` (weights, profiled activations, graphs, context). vLLM and
    SGLang take their share of the whole GPU and give the pool what is left of it; TensorRT-LLM takes
    `free_gpu_memory_fraction` (default 0.9) of the memory still free after its profiling run: PyTorch backend
    `KvCacheCreator._cal_max_tokens`, available_kv_mem = (total - peak + profiling KV) x fraction
    (NVIDIA/TensorRT-LLM@d8ae02c tensorrt_llm/_torch/pyexecutor/_util.py; the C++ executor that runs TensorRT
    engines likewise: BaseKVCacheManager::calculateFreeMemBytes takes the fraction, "Default is 90%"
    (@0165bd7 cpp/include/tensorrt_llm/executor/executor.h KvCacheConfig), of the memory free after the engine,
    its runtime buffers and decoder are allocated (@00825c4 cpp/tensorrt_llm/batch_manager/
    trtGptModelInflightBatching.cpp); memory.md's 85 % is the older GptSession's): ~10 % more than vLLM's pool
    at 0.9. The total is `torch.cuda.mem_get_info()`'s (`KvCacheCreator.configure_kv_cache_capacity`), i.e. without
    the driver's reserve; `rest` for TensorRT-LLM holds its own profile (`_trtllm_profile_bytes`)."""
    if inf.engine == "trtllm":
        # total_gpu_memory is torch.cuda.mem_get_info()'s total: nvidia-smi's less the driver's reserve
        return inf.gpu_memory_utilization * (capacity - DRIVER_RESERVE_BYTES - rest)
    return capacity * inf.gpu_memory_utilization - rest


# The driver's reserve that CUDA never hands out: cudaMemGetInfo's total is nvidia-smi's "Total" less its "Reserved".
# Measured: H200 143771 MiB total, 616 MiB reserved, torch.cuda.mem_get_info() total 143155.94 MiB (615 MiB less;
# this project's device check, 2026-12-04); H100 80GB 81559 MiB by nvidia-smi against vLLM's logged total_gpu_memory
# 79.22 GiB (vllm-project/vllm PR 10511, H100-80G): 438 MiB; a 24 GB card vLLM logged at 23.55 GiB (vLLM issue 11550)
# against the RTX 4090's 24564 MiB by nvidia-smi (issue 7553): ~449 MiB (the card is not named there). The median.
# vLLM's share is gpu_memory_utilization of the CUDA total (gpu_worker.init_device: requested_memory =
# init_snapshot.total_memory x utilization).
DRIVER_RESERVE_BYTES = 449 * MiB


def vllm_requested_bytes(inf, capacity: float) -> float:
    """vLLM V1's share of the GPU: gpu_memory_utilization x the total CUDA reports (torch.cuda.mem_get_info)."""
    return inf.gpu_memory_utilization * (capacity - DRIVER_RESERVE_BYTES)


CUDA_GRAPH_BYTES = 512 * MiB     # vLLM logs "Graph capturing finished ... took 0.3-1.5 GiB" for 7-70B models


def _engine_batched_tokens(scn: Scenario, capacity: int) -> int:
    """Tokens per engine step (the profile run's batch): the user's value, else vLLM V1's
    `vllm serve` default from EngineArgs.get_batch_defaults (8192 on GPUs with >= 70 GiB other than
    A100, 2048 otherwise; vllm/engine/arg_utils.py)."""
    inf = scn.infer
    assert inf is not None
    if inf.max_num_batched_tokens:
        return inf.max_num_batched_tokens
    if getattr(inf, "num_scheduler_steps", 1) > 1:   # vLLM V0 without chunked prefill: SchedulerConfig's default
        return max(inf.max_model_len or 2048, 2048)
    return 8192 if vllm_large_gpu(scn, capacity) else 2048


def engine_max_num_seqs(scn: Scenario, capacity: int, seqs: int | None = None) -> int:
    """The engine's running-request cap (max_num_seqs): the user's value, else the requests in
    flight (`seqs`, default the scenario's concurrency, which gpuplan's launch files pass) capped
    at vLLM V1's `vllm serve` default from EngineArgs.get_batch_defaults (1024 on GPUs with >= 70 GiB
    other than A100, 256 otherwise; vllm/engine/arg_utils.py). Requests beyond the cap wait in the
    queue: they do not change what the engine reserves at start-up."""
    inf = scn.infer
    assert inf is not None
    if inf.max_num_seqs:
        return inf.max_num_seqs
    return max(1, min(inf.concurrency if seqs is None else seqs, vllm_default_max_num_seqs(scn, capacity)))


def vllm_default_max_num_seqs(scn: Scenario, capacity: int) -> int:
    """vLLM V1's `vllm serve` running-request cap when none is given (EngineArgs.get_batch_defaults,
    vllm/engine/arg_utils.py): 1024 on GPUs with >= 70 GiB other than A100, 256 otherwise; 256 everywhere
    for V0's multi-step scheduler."""
    big = vllm_large_gpu(scn, capacity) and getattr(scn.infer, "num_scheduler_steps", 1) <= 1
    return 1024 if big else 256


def vllm_large_gpu(scn: Scenario, capacity: int) -> bool:
    """vLLM's batch defaults (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py) take their larger values on
    GPUs with >= 70 GiB of memory other than A100."""
    return capacity >= 70 * GiB and "a100" not in scn.hardware.gpu.lower()


def vllm_v1(scn: Scenario) -> bool:
    """The plan runs vLLM's V1 engine (every vLLM since V0 was removed; V0 only with multi-step scheduling here)."""
    return scn.infer is not None and scn.infer.engine == "vllm" and getattr(scn.infer, "num_scheduler_steps", 1) <= 1


# Bytes per request x vocabulary that vLLM V1's dummy sampler run holds at its peak with FlashInfer's top-k/top-p
# sampler (vllm-project/vllm v0.11.0, git f71952c1c: gpu_model_runner._dummy_sampler_run keeps the 16-bit logits,
# 2; sampler.Sampler.forward converts them to fp32, 4; topk_topp_sampler.flashinfer_sample calls FlashInfer's
# top_k_top_p_sampling_from_logits, which with its default filter_apply_order "top_k_first" makes the top-k masked
# fp32 logits, 4, and their fp32 softmax, 4 (flashinfer-python 0.3.1, flashinfer/sampling.py)). V1 takes this path
# whenever FlashInfer imports (VLLM_USE_FLASHINFER_SAMPLER unset means on); vLLM's container image installs it.
VLLM_FLASHINFER_SAMPLER_BYTES = 2 + 4 + 4 + 4
# V0's and the other engines' sort-based top-k/top-p: fp32 logits, their sorted copy, int64 sort indices, fp32
# probabilities and the scattered result
SORTED_SAMPLER_BYTES = 24.0


def _profile_run_bytes(scn: Scenario, model: ModelSpec, capacity: int, seqs: int) -> float:
    """Peak of vLLM's (and SGLang's, vLLM V0's) start-up profile, which it keeps free next to the KV pool;
    TensorRT-LLM runs its own (`_trtllm_profile_bytes`).

    Two runs, one after the other, so the larger counts (vLLM V1 gpu_model_runner.profile_run):
    * a forward over the step's token budget: per token the residual, norm output and q/k/v/o
      (4h) and the MLP's gate/up/act (3i/tp) in 16-bit, plus fused-MoE intermediate caches
      (tokens x top-k x (2i + i + h) per rank, vllm fused_moe);
    * the dummy sampler over max_num_seqs requests with top-k/top-p, the logits gathered to the full
      vocabulary: vLLM V1 with FlashInfer's sampler, VLLM_FLASHINFER_SAMPLER_BYTES per request and vocabulary
      entry, beside the forward's 16-bit hidden states (profile_run keeps them until the sampler has run);
      otherwise the sort-based path, SORTED_SAMPLER_BYTES (vllm/v1/sample/ops/topk_topp_sampler.py)."""
    inf, tp = scn.infer, scn.parallel.tp
    assert inf is not None
    h = model.hidden_size
    i = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_tok, 1))
    tokens = _engine_batched_tokens(scn, capacity)
    forward = tokens * (4 * h + 3 * i / tp) * 2
    if model.is_moe:
        i_rank = 2 * model.moe_intermediate_size / (tp if scn.parallel.ep == 1 else 1)
        forward += min(tokens, 32768) * model.experts_per_tok * (i_rank + i_rank / 2 + h) * 2
    # the dummy run has min(tokens, max_num_seqs) requests (gpu_model_runner._dummy_run): the engine's
    # limits, never the number of requests waiting (a huge `concurrency` once emptied the KV pool)
    requests = min(tokens, engine_max_num_seqs(scn, capacity, seqs))
    if vllm_v1(scn):
        return max(forward, tokens * h * 2 + requests * model.vocab_size * VLLM_FLASHINFER_SAMPLER_BYTES)
    return max(forward, requests * model.vocab_size * SORTED_SAMPLER_BYTES)


# TensorRT-LLM's CUTLASS fused MoE: the unfused GEMM output type of its workspace (UnfusedGemmOutputType, bf16) and
# the bytes of the activation it permutes (T): FP8 per-tensor checkpoints quantize the MoE input to FP8 before the
# gather (fused_moe_cutlass.py @000a01de forward_chunk: static_quantize_e4m3_per_tensor), NVFP4 to FP4 (fp4_quantize,
# 0.5 bytes), the others (block-FP8 included: `use_deepseek_fp8_block_scale` quantizes inside the op) stay 16-bit
TRTLLM_MOE_GEMM_OUT_BYTES = 2.0
_TRTLLM_MOE_ACT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}


def trtllm_profile_tokens(scn: Scenario, model: ModelSpec, capacity: float) -> int:
    """Tokens each rank's dummy context batch holds in TensorRT-LLM's KV-cache estimation: its `max_num_tokens`
    (KvCacheCreator._create_dummy_context_requests fills max_num_tokens with prompts), the pair the rest of gpuplan
    runs it with (trtllm_bench.engine_limits: stated, trtllm-serve's default 8192 under a load, else trtllm-bench's
    own heuristic)."""
    from .trtllm_bench import engine_limits
    return int(engine_limits(scn, model, capacity / GiB)[1])


def trtllm_moe_workspace_bytes(model: ModelSpec, rows: float, weights: str, i_rank: float) -> float:
    """The CUTLASS fused MoE's workspace for `rows` tokens (CutlassMoeFCRunner::getWorkspaceDeviceBufferSizes,
    cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu @ac73e3116fb44f06ec9873d68b114a3fc11c19a7):
    per expanded row (rows x top-k) the overlapped GEMM inputs, max(permuted data h*T, FC2 result h*G, FC1 result
    i*T), the overlapped outputs, max(gated FC1 output 2i*G, FC2 result h*G, FC1 result i*T), and three int32/fp32
    maps; T is the permuted activation's bytes, G the GEMM output's, i the expert's intermediate size on this rank.
    The router's int32 expert ids and fp32 scales, the gathered input (h*T) and the 16-bit output (h*2) per row
    sit beside it."""
    h, k = model.hidden_size, max(1, model.experts_per_tok)
    t = _TRTLLM_MOE_ACT_BYTES.get(weight_format(weights).name, 2.0)
    g = TRTLLM_MOE_GEMM_OUT_BYTES
    per_expanded = max(h * t, h * g, i_rank * t) + max(2 * i_rank * g, h * g, i_rank * t) + 3 * 4
    return rows * k * per_expanded + rows * (h * t + 2 * h + k * 8)


def _trtllm_profile_bytes(scn: Scenario, model: ModelSpec, capacity: int) -> float:
    """Peak of TensorRT-LLM's KV-cache estimation run above its weights (PyTorch backend, `KvCacheCreator`,
    tensorrt_llm/_torch/pyexecutor/_util.py @d8ae02caed59708512e5aa578a09bb09f365bfed; the same steps in the later
    `configure_kv_cache_capacity`): dummy context requests of min(max_num_tokens, max_seq_len - 1) tokens each, one
    output token, together `max_num_tokens` (`_create_dummy_context_requests`; under attention DP the list is
    repeated tp_size times, so every attention rank gets its own max_num_tokens), run through the executor once;
    the pool is `free_gpu_memory_fraction` of (total - torch peak - memory outside torch + the temporary KV it
    allocated for the run) (`estimate_max_tokens` / `_cal_max_tokens`). The torch peak above the weights is that one
    context step: per local token the residual, norm output and attention projections (4h x 2 bytes) and the dense
    MLP's (3i/tp x 2), or for an MoE layer the CUTLASS fused MoE's workspace over the tokens it sees: under
    attention DP every rank's tokens are all-gathered into one chunk (`moe_max_num_tokens = max_num_tokens x
    world_size`, fused_moe_cutlass.py @000a01de66f0eab4ab05640711f0253f50f5209c `__init__`/`forward`), so 8 x the
    local tokens on DEP8 (trtllm_moe_workspace_bytes). Only the last position of each dummy request reaches the
    LM head and sampler (no context logits are gathered), a few rows: the sampler over max_num_seqs that vLLM's
    profile holds is not part of this run. CUDA graphs are captured while the estimation executor is built
    (its graphs are released after the pool is sized, py_executor_creator.py @bab0f2e6 create_py_executor:
    `_release_cuda_graphs`), so they count in the memory outside torch (`_profiled_rest`)."""
    inf, p = scn.infer, scn.parallel
    assert inf is not None
    h, tp = model.hidden_size, p.tp
    tokens = trtllm_profile_tokens(scn, model, capacity)
    # max_seq_len: the stated one, else trtllm-bench's, the dataset's longest ISL + OSL (bench/benchmark/throughput.py
    # @5685103 throughput_command)
    ctx = inf.max_model_len or (inf.prompt_len + inf.output_len)
    requests = math.ceil(tokens / max(1, min(tokens, ctx - 1)))
    local = tokens * 4 * h * 2
    if model.is_moe and model.num_experts > 0:
        adp = min(scn.dp, p.ep) if p.ep > 1 else 1
        i_rank = model.moe_intermediate_size / (tp if p.ep == 1 else 1)
        moe = trtllm_moe_workspace_bytes(model, tokens * adp, inf.weights, i_rank)
        moe += tokens * 3 * model.shared_expert_intermediate / tp * 2       # shared experts, on the local tokens
        # dense-MLP layers (DeepSeek's first_k_dense_replace), if any, run one at a time beside the MoE layers
        dense = tokens * 3 * model.intermediate_size / tp * 2 if model.num_moe_layers < model.num_layers else 0.0
        forward = local + max(moe, dense)
    else:
        forward = local + tokens * 3 * model.intermediate_size / tp * 2
    return max(forward, tokens * h * 2 + requests * model.vocab_size * SORTED_SAMPLER_BYTES)


def _profiled_rest(scn: Scenario, weights: float, act: float, graphs: float) -> float:
    """What the engine subtracts from its share of the GPU before the KV pool. vLLM V1 (v0.11.0, git f71952c1c,
    vllm/v1/worker/gpu_worker.py): init_device takes its memory snapshot after the CUDA context and the NCCL
    communicators exist, and determine_available_memory gives the pool requested_memory (gpu_memory_utilization x
    total) less weights, the profile's torch peak increase and the non-torch memory added since that snapshot
    (vllm/utils memory_profiling); CUDA graphs are captured afterwards (compile_or_warm_up_model: "memory_profiling
    does not consider CUDAGraph memory size"), so the context, NCCL and the graphs sit in the 1 - utilization the
    engine leaves free, not in its share. Of gpuplan's runtime overhead only the library workspaces are left.
    The other engines: weights, profile, graphs and the whole runtime overhead."""
    if vllm_v1(scn):
        extra = scn.overhead_bytes if scn.overhead_bytes is not None else Overhead().workspaces
        return weights + act + extra
    return weights + act + graphs + _overhead(scn, 0)


def inference_weight_bytes(model: ModelSpec, weights: str, *, tp: int = 1, pp: int = 1, ep: int = 1,
                           stage: str = "only") -> float:
    fmt = weight_format(weights)
    rp = rank_params(model, tp=tp, pp=pp, ep=ep, stage=stage)
    if fmt.scope in ("linear", "expert"):
        quantized = rp.expert if fmt.scope == "expert" else rp.linear - rp.lm_head
        return quantized * fmt.bits / 8 + (rp.total - quantized) * 2
    return rp.total * fmt.bits / 8


def _ssm_state_per_seq_rank(model: ModelSpec, engine: str, kv_fmt: str, tp: int, pp: int) -> float:
    """SSM state of one sequence on one rank (0 without SSM layers). vLLM keeps d_conv - 1 convolution
    columns and the recurrent state in the model dtype unless --mamba-ssm-cache-dtype says otherwise
    (vllm @2afe1e8 vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator /
    MambaStateDtypeCalculator,
    "auto" = the model's dtype); an fp8 KV format does not apply to it. transformers' cache keeps d_conv
    columns in the model dtype and the recurrent state as the scan returns it (cache_utils.py: zeros_like of
    the final state): fp32 for both Mamba-1 (mamba_selective_scan computes exp(dt·A) in fp32) and Mamba-2
    (mamba2_chunk_scan upcasts x, B and C to fp32) (traced). TP splits d_inner (vLLM shards the mixer); PP
    holds its share of the layers."""
    if model.recurrent is not None:
        # a RecurrentMixer's state as transformers' cache keeps it (models/spec.py RecurrentMixer.state_bytes), for
        # every engine; TP splits its channels, PP its layers
        return model.ssm_state_bytes_per_sequence() / tp * math.ceil(model.num_layers / pp) / model.num_layers
    if model.ssm is None or not model.num_ssm_layers:
        return 0.0
    hf = engine == "hf"
    state_b = 4.0 if hf else 2.0
    per_seq = model.ssm_state_bytes_per_sequence(state_b, 2.0, conv_columns=model.ssm.d_conv if hf else None)
    return per_seq / tp * math.ceil(model.num_layers / pp) / model.num_layers


def _kv_per_token_rank(model: ModelSpec, kv_fmt: str, tp: int, pp: int) -> float:
    el = model.kv_elements_per_token_layer()
    if not model.is_mla:
        heads = max(1, model.num_kv_heads // tp)     # replicated when tp > kv heads (vLLM)
        el = heads * (model.head_dim + model.v_head_dim)
    return el * kv_bytes(kv_fmt) * math.ceil(model.num_attention_layers / pp)


def _infer_components(scn: Scenario, model: ModelSpec, capacity: int) -> tuple[dict[str, dict[str, float]], list[str], dict]:
    inf, p = scn.infer, scn.parallel
    assert inf is not None
    notes: list[str] = []
    tp, pp = p.tp, p.pp
    weights = max(inference_weight_bytes(model, inf.weights, tp=tp, pp=pp, ep=p.ep, stage=s) for s in stages(pp))
    if inf.engine == "hf" and model.params_fp32 and weight_format(inf.weights).name in ("bf16", "fp16"):
        # transformers keeps these parameters in fp32 under a 16-bit load (ModelSpec.params_fp32): 2 more bytes
        weights += model.params_fp32 * 2.0 / tp
        notes.append(f"{model.params_fp32 / 1e6:,.1f} M parameters stay fp32 under transformers' 16-bit load "
                     "(_keep_in_fp32_modules_strict, or built in fp32 by the model's code)")
    ctx = inf.prompt_len + inf.output_len
    per_token = _kv_per_token_rank(model, inf.kv_cache, tp, pp)
    if getattr(inf, "speculative", None) is not None:
        # the drafter's weights sit beside the target's and its KV grows with every token (speculative.py)
        from .speculative import draft_rank_bytes
        d_w, d_kv = draft_rank_bytes(scn, model)
        weights += d_w
        per_token += d_kv
        if d_w:
            notes.append(f"speculative decoding ({inf.speculative.method}): the drafter adds {d_w / GiB:.2f} GiB of "
                         f"weights and {d_kv:,.0f} bytes of KV per token on each GPU")
    block = 16 if inf.engine in ("vllm", "sglang", "trtllm") else 1
    tokens_per_seq = math.ceil(ctx / block) * block
    # with expert parallelism over data-parallel ranks the attention layers run data-parallel across
    # them (attention DP, TensorRT-LLM/SGLang "DEP"), so each GPU holds its share of the sequences;
    # experts spread over the tensor-parallel ranks (vLLM) leave attention tensor-parallel
    attn_dp = min(scn.dp, p.ep) if p.ep > 1 else 1
    seqs = math.ceil(inf.concurrency / attn_dp)
    kv_need = per_token * tokens_per_seq * seqs
    beams = inf.beam_width
    if beams > 1:
        kv_need = per_token * beam_kv_tokens(inf, block) * seqs
        notes.append(beam_note(inf))
    state_seq = _ssm_state_per_seq_rank(model, inf.engine, inf.kv_cache, tp, pp)
    kv_need += state_seq * seqs
    if state_seq:
        notes.append(f"kv_cache includes {model.num_ssm_layers or model.num_recurrent_layers} SSM/recurrent "
                     "layers' fixed state "
                     f"({state_seq / 2**20:.1f} MiB per sequence, any length)")
    if model.is_encoder_decoder:
        return _encdec_infer_components(scn, model, weights, per_token, seqs, notes)
    if inf.engine == "hf" and any(model.layer_windows):
        # transformers' StaticCache sizes a sliding-window layer's cache to min(W, max_len) (traced:
        # Mistral, Gemma 3, gpt-oss); paged engines size every layer as full
        L = model.num_attention_layers
        capped = sum(min(w, tokens_per_seq) if w else tokens_per_seq for w in model.attention_windows[:L])
        kv_need = per_token * capped / L * seqs + state_seq * seqs
    h, i = model.hidden_size, max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_tok, 1))
    extra = {}
    if inf.engine in ("vllm", "sglang", "trtllm"):
        act = (_trtllm_profile_bytes(scn, model, capacity) if inf.engine == "trtllm"
               else _profile_run_bytes(scn, model, capacity, seqs))
        graphs = CUDA_GRAPH_BYTES if inf.cuda_graphs else 0
        rest = _profiled_rest(scn, weights, act, graphs)
        pool = vllm_requested_bytes(inf, capacity) - rest if vllm_v1(scn) else _kv_pool_bytes(inf, capacity, rest)
        if inf.engine == "sglang":
            # SGLang's pool is its fraction of the memory free before the weights load, less the weights
            # (ModelRunner.profile_max_num_token: free after the weights - free before x (1 - fraction)); the
            # activations and CUDA graphs live in the 1 - fraction it holds back, not in the pool's share.
            # Without --mem-fraction-static (infer.gpu_memory_utilization) the fraction is SGLang's own default
            frac = sglang_fraction(scn, capacity)
            if "gpu_memory_utilization" not in inf.model_fields_set:
                notes.append(f"sglang: --mem-fraction-static not given; its default on this GPU is {frac:.3f} "
                             "(ServerArgs._handle_gpu_memory_settings)")
            pool = frac * (capacity - _overhead(scn, 0)) - weights
        reserved = int(rest + pool)          # what the engine holds: its share of the GPU (TensorRT-LLM: of the free part)
        per_seq = per_token * (beam_kv_tokens(inf, block) if beams > 1 else tokens_per_seq) + state_seq
        extra = dict(kv_pool_bytes=max(0, int(pool)), reserved_bytes=reserved,
                     # a pure SSM model keeps no per-token cache: its pool holds whole sequences' states
                     kv_tokens=max(0, int(pool // per_token)) if per_token else None,
                     # sequences one model copy can hold: each attention-DP rank holds its share
                     # (beam search: a request holds every beam's KV, memory.beam_kv_tokens)
                     max_concurrency=max(0, int(pool // per_seq)) * attn_dp)
        if model.is_mla and tp > 1:
            notes.append(f"MLA latent cache is replicated on every TP rank ({inf.engine}: attention is tensor "
                         "parallel)")
        if not model.is_mla and model.num_attention_layers and tp > model.num_kv_heads:
            notes.append(f"tp={tp} exceeds {model.num_kv_heads} KV heads: KV heads are replicated")
        notes.append(f"{inf.engine} reserves {_reserve_knob(inf)} of the GPU up front; the peak shown is what this "
                     "workload needs inside that reservation")
        temp = graphs
    elif inf.engine == "llama.cpp":
        # compute buffers scale with the micro-batch (512) x context; llama.cpp logs ~0.3-1.5 GiB for 8B at 8k
        act = 512 * (h * 4 + i * 2) * 2 + 512 * model.vocab_size * 4 + ctx * model.num_heads * 512 * 4 / 64
        temp = 0.0
        if inf.gpu_layers is not None and inf.gpu_layers < model.num_layers:
            frac = inf.gpu_layers / model.num_layers
            cpu_w = weights * (1 - frac)
            weights *= frac
            kv_need *= frac
            extra["cpu_bytes"] = int(cpu_w)
            notes.append(f"-ngl {inf.gpu_layers}: {model.num_layers - inf.gpu_layers} layers stay in CPU memory")
    else:  # hf generate: prefill of the whole batch, logits of the last position only
        act = seqs * inf.prompt_len * max(_prefill_bytes_per_token(model, tp),
                                          _ssm_prefill_bytes_per_token(model, tp, inf.ssm_kernels),
                                          _recurrent_prefill_bytes_per_token(model, tp),
                                          _moe_prefill_bytes_per_token(model))
        if math_path_attention(model):
            # SDPA math path (Falcon MQA, see activations.math_path_attention) against the static cache's
            # full length: the fp32 scores from bmm and the masked/softmaxed copy (2 x 4 bytes x heads x
            # cache length), the fp32 copy and scaled copy of q, the fused qkv output and four h-sized
            # 16-bit tensors (embeddings, residual, norm output, rotated q) alive together (traced)
            a, d, kvh = model.num_heads / tp, model.head_dim, max(1, model.num_kv_heads // tp)
            attn = 8 * a * tokens_per_seq + 8 * a * d + 2 * (a + 2 * kvh) * d + 8 * h
            act = max(act, seqs * inf.prompt_len * attn)
        if model.traits.rope_fp32:
            act = max(act, seqs * inf.prompt_len * _rope_fp32_prefill_bytes_per_token(model, tp))
        kda = _kda_fallback_prefill_bytes(model, tp, inf.prompt_len, inf.ssm_kernels)
        if kda:
            act = max(act, seqs * (inf.prompt_len * _prefill_bytes_per_token(model, tp) + kda))
        act += seqs * model.vocab_size * 4
        if not model.traits.logits_to_keep:
            # generate passes no logits_to_keep (the forward takes none): the prefill's 16-bit logits cover every
            # prompt position, alive once the layers' activations are freed
            act = max(act, seqs * inf.prompt_len * model.vocab_size * 2 + seqs * model.vocab_size * 4)
        if model.traits.eager_attention_only:
            act = max(act, seqs * inf.prompt_len * _eager_prefill_bytes_per_token(model, tp, tokens_per_seq))
        temp = 0.0
    if beams > 1 and inf.engine == "hf":
        act = act * beams          # generate expands the prompts by num_beams before the prefill
    if inf.engine == "hf" and weight_format(inf.weights).family == "gptq" and getattr(inf, "gptq_kernel", None):
        # AutoGPTQ's persistent kernel buffers (quant_kernels.gptq_kernel_buffer_bytes), alive in every phase
        from .quant_kernels import gptq_kernel_buffer_bytes
        gbuf = gptq_kernel_buffer_bytes(inf.gptq_kernel, [b.linear for b in model.linear_blocks
                                                          if b.kind in ("attn", "mlp")])
        if gbuf:
            temp += gbuf
            notes.append(f"AutoGPTQ {inf.gptq_kernel} kernel buffers: {gbuf / GiB:.2f} GiB (auto_gptq 0.5.0 "
                         "autogptq_post_init)")
    legacy = legacy_tuple_cache_bytes(inf, per_token * seqs * beams, ctx)
    if legacy:
        notes.append(f"transformers {inf.transformers_version}: generate passes the KV cache as tuples; each decode "
                     "step's forward builds a new tuple by torch.cat while the old one stays referenced, so the "
                     f"last step holds both ({legacy / GiB:.2f} GiB above the cache)")
    phases = {
        "prefill": dict(weights=weights, kv_cache=kv_need, activations=act, temporary=temp),
        "decode": dict(weights=weights, kv_cache=kv_need, activations=seqs * beams * (4 * h + 3 * i / tp) * 2,
                       logits=beam_logits_bytes(model, seqs, beams, inf.engine),
                       temporary=temp + beam_reorder_bytes(model, kv_need, beams, inf.engine) + legacy),
    }
    return phases, notes, extra


# transformers releases whose generate() hands the KV cache to the model as tuples of tensors and whose attention grows
# them by concatenation (v4.35.0 modeling_llama.py LlamaAttention.forward: `key_states = torch.cat([past_key_value[0],
# key_states], dim=2)` ... `past_key_value = (key_states, value_states) if use_cache else None`; generation/utils.py
# greedy_search: `model_inputs = self.prepare_inputs_for_generation(input_ids, **model_kwargs)`, `outputs =
# self(**model_inputs, ...)`, and only then `model_kwargs = self._update_model_kwargs_for_generation(outputs, ...)`).
# Versions from 4.36 (DynamicCache) are left as they were: not read here.
LEGACY_TUPLE_CACHE_BEFORE = (4, 36)


def legacy_tuple_cache_bytes(inf, kv_per_token: float, ctx: int) -> float:
    """Bytes a decode step of HF generate holds above the KV cache under a transformers release that passes the
    cache as tuples (before 4.36, `LEGACY_TUPLE_CACHE_BEFORE`): the step's forward concatenates every layer's cache
    into a new tensor while `model_kwargs` (and the previous step's `outputs`) still reference the old tuple, which
    is freed only after the forward returns; at the last step the old tuple holds ctx - 1 tokens beside the new
    ctx. `kv_per_token`: the attention cache bytes per token of all sequences on this GPU. 0 for other engines and
    for an unknown or later transformers."""
    if inf.engine != "hf" or inf.output_len < 2:
        return 0.0
    from .host_issue import transformers_minor
    key = transformers_minor(inf.transformers_version)
    if key is None or key >= LEGACY_TUPLE_CACHE_BEFORE:
        return 0.0
    return kv_per_token * (ctx - 1)


def _rope_fp32_prefill_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Bytes per token alive during HF prefill (no_grad) while a model that rotates fp32 copies of q and k
    (traits.rope_fp32: `k_embed = (k.float() * cos) + (rotate_half(k.float()) * sin)`) rotates k: in 16 bits the
    residual stream, the norm output and q, k, v; in fp32 the rotated q and, for k, `k.float() * cos`, the second
    `k.float()`, the negated half and the concatenation rotate_half builds from it (3.5 k-sized). Traced: 2-layer
    default ModernBERT-decoder, prompt 512, where this is the prefill peak (the MLP's is lower)."""
    h, d = model.hidden_size, model.head_dim
    a, kv = model.num_heads / tp, max(1, model.num_kv_heads // tp)
    return 2 * (2 * h + (a + 2 * kv) * d) + 4 * a * d + 3.5 * 4 * kv * d


def _kda_fallback_prefill_bytes(model: ModelSpec, tp: int, prompt: int, kernels: bool) -> float:
    """Bytes one sequence's prefill holds inside a Kimi Delta Attention layer on transformers' torch fallback
    (`chunk_kimi_delta_attention`, modeling_kimi_linear.py, transformers 5.25; used where flash-linear-attention's
    chunk_kda kernel is not loaded: ssm_kernels false). The prompt is padded to whole chunks of C and the
    per-channel decay between every pair of positions in a chunk is materialised in fp32,
    `decay_mask` [heads, chunks, C, C, d_k], kept for the whole chunk loop; the intra-chunk scores multiply
    k_beta x key (same shape) by it, so three such tensors are alive at once: 3 x 4 bytes x padded tokens x C x
    heads x d_k (traced: 2-layer default Kimi-Linear and Bailing-hybrid, prompt 512). The fused kernel keeps
    per-chunk tiles on chip: none."""
    t = model.traits
    if kernels or not t.kda_channels or not t.kda_chunk:
        return 0.0
    padded = math.ceil(prompt / t.kda_chunk) * t.kda_chunk
    return 3 * 4.0 * padded * t.kda_chunk * t.kda_channels / tp


def _moe_prefill_bytes_per_token(model: ModelSpec) -> float:
    """Bytes per token alive at the end of an MoE layer during HF prefill (no_grad). transformers' default
    experts (integrations/moe.py grouped_mm_experts_forward, 5.25) work on the k routed copies of each token,
    sorted by expert: when the weighted output is put back in token order (`weighted_out[inv_perm]`) the
    gathered inputs, the down projection's output, the weighted output and its reordered copy are alive, each
    k x h, beside the residual stream and the norm output. 16-bit routing weights keep all four 16-bit (8 bytes
    per routed element); a router that hands fp32 weights makes the last two fp32, so this is the lower bound
    (traced: 2-layer default MiniCPM-5-MoE, fp32 routing weights, 12 bytes)."""
    if not model.num_experts or not model.experts_per_tok:
        return 0.0
    h = model.hidden_size
    return 4 * 2 * h + 8 * model.experts_per_tok * h


def _ssm_prefill_bytes_per_token(model: ModelSpec, tp: int, kernels: bool) -> float:
    """Bytes per token alive inside an SSM mixer during HF prefill (no_grad), with the residual (fp32) and
    the norm output. Kernels (mamba_ssm selective_scan_fn / mamba_chunk_scan_combined): the in_proj output,
    the conv output, x_proj's output and dt (Mamba-1) and the scan output; the state stays on chip.
    transformers' torch path: Mamba-1 holds exp(dt·A), dt·B and dt·B·x in fp32 for every (channel, state)
    at once (12·d·N; a mixer scanning d_inner in `scan_slices` sequential slices holds one slice's) next to ~18·d
    of d-wide tensors; Mamba-2 keeps every intermediate of mamba2_chunk_scan
    until it returns: L, C·Bᵀ and M per chunk and head in fp32 (12·H·Q), B, C and B·decay repeated to every
    head in fp32 (12·H·N), ~28·d of fp32 d-wide tensors and the chunk states (~10·d·N/Q) (traced)."""
    s = model.ssm
    if s is None or not model.num_ssm_layers:
        return 0.0
    h, d, N, R, G, H, Q = model.hidden_size, s.d_inner / tp, s.d_state, s.dt_rank, s.n_groups, s.num_heads / tp, \
        s.chunk_size
    proj = 2 * d + 2 * G * N + H
    if s.variant == "mamba1":
        if kernels:
            return 6 * h + 10 * d + 2 * (R + 2 * N)
        return 8 * h + 18 * d + 12 * d * N / s.scan_slices + 2 * (R + 2 * N) + 4 * N
    conv = d + 2 * G * N
    if kernels:
        return 6 * h + 2 * proj + 2 * conv + 2 * d
    return 6 * h + 2 * proj + 2 * conv + 28 * d + 12 * H * N + 12 * H * Q + 10 * d * N / Q


def _recurrent_prefill_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Bytes per token alive inside a RecurrentMixer layer during HF prefill (no_grad): the residual stream and
    the norm output (4 h) and the mixer's own peak, measured with the allocation tracker (trace/_tracker.py) over
    one module's forward on real CPU bf16 tensors (transformers 5.25) at two widths and two lengths:
    short_conv 14 w (the in_proj output, B·x, the padded conv output and C·conv's transposed copy);
    rg_lru 24 w + 2 h + 9 (the gates, decay and gamma multipliers and the scan's output next to the y branch; the
    int64 positions and reset mask); rwkv the larger of the time mix, 8 h + 6 w, and the channel mix, 10 h + 2 f."""
    r = model.recurrent
    if r is None or not model.num_recurrent_layers:
        return 0.0
    h, w = model.hidden_size, r.width / tp
    if r.variant == "short_conv":
        mixer = 14.0 * w
    elif r.variant == "rg_lru":
        mixer = 24.0 * w + 2.0 * h + 9
    else:
        mixer = max(8.0 * h + 6.0 * w, 10.0 * h + 2.0 * r.ffn_width / tp)
    return 4.0 * h + mixer


# ---- beam search ---------------------------------------------------------------------------------------
def beam_kv_tokens(inf, block: int) -> int:
    """KV tokens one request holds under beam search (beam_width k). HF generate repeats the prompt k times
    before the prefill (generation/utils.py _expand_inputs_for_generation, transformers 5.24), so every beam
    holds prompt + output. vLLM's LLM.beam_search runs one max_tokens=1 request per beam and step with
    prefix caching (vllm/entrypoints/llm.py @10fdb8f0): the prompt's full blocks are shared, each beam keeps
    the rest. TensorRT-LLM is sized like HF (every beam its own prompt copy: an upper bound)."""
    k, P, O = inf.beam_width, inf.prompt_len, inf.output_len
    if inf.engine == "vllm":
        shared = P // block * block
        return shared + k * (math.ceil((P - shared + O) / block) * block)
    return k * math.ceil((P + O) / block) * block


def beam_note(inf) -> str:
    if inf.engine == "vllm":
        return (f"beam search (beam_width {inf.beam_width}): vLLM shares the prompt's KV blocks between beams "
                "(prefix caching); each beam holds its own output tokens")
    return (f"beam search (num_beams {inf.beam_width}): every beam holds the whole prompt and output in its KV "
            "cache (generate expands the prompt before the prefill)")


def beam_reorder_bytes(model: ModelSpec, kv: float, beams: int, engine: str) -> float:
    """HF beam search reorders the cache after every step (Cache.reorder_cache: `keys.index_select(0, beam_idx)`
    per layer, cache_utils.py, transformers 5.24): one layer's K and V exist twice for a moment."""
    return kv / max(model.num_layers, 1) if beams > 1 and engine == "hf" else 0.0


def beam_logits_bytes(model: ModelSpec, seqs: int, beams: int, engine: str) -> float:
    """Decode-step logits. Greedy/sampling: fp32 logits per sequence. HF beam search (_beam_search,
    transformers 5.24) keeps an fp32 copy of the last logits, their log-softmax and the log-probs plus the
    running beam scores for every beam at once: 3 x 4 bytes x V per beam."""
    if beams > 1 and engine == "hf":
        return seqs * beams * model.vocab_size * 12.0
    return seqs * beams * model.vocab_size * 4.0


# ---- encoder-decoder serving (HF generate) -------------------------------------------------------------
T5_BUCKET_TEMP_BYTES = 49     # bytes per (query, key) pair alive while T5 computes its position buckets (traced)

def _encdec_infer_components(scn: Scenario, model: ModelSpec, weights: float, per_token: float, seqs: int,
                             notes: list[str]) -> tuple[dict[str, dict[str, float]], list[str], dict]:
    """HF generate for T5: the encoder runs once over the prompts, its output is repeated num_beams times, the
    first decoder step projects it into the cross-attention cache (prompt_len tokens per beam, computed once),
    each step appends one token to the self-attention cache (output_len). A T5 layer's cross K/V per input token
    has the size of its self-attention K/V per output token (both 2·heads·d_kv), so the whole cache is
    `per_token x (prompt_len + output_len)` per beam."""
    inf, tp = scn.infer, scn.parallel.tp
    assert inf is not None
    k, P, O = inf.beam_width, inf.prompt_len, inf.output_len
    h, a, d = model.hidden_size, model.num_heads / tp, model.head_dim
    i = model.intermediate_size / tp
    kv = per_token * (P + O) * seqs * k
    notes.append(f"encoder-decoder: cross-attention KV over the {P:,}-token prompt (computed once per request and "
                 f"beam) plus self-attention KV over {O:,} output tokens")
    # encoder (no KV yet: the caches fill at the first decoder step), the larger of two moments (traced):
    # * the first layer's relative-position buckets (T5Attention._relative_position_bucket: int64 position
    #   differences, their fp32 log-scaled copies, the int64 buckets; ~49 bytes per (query, key) pair at once,
    #   traced with 6 and 8 heads) while the residual, the norm output and q, k, v are alive;
    # * an MLP: residual and norm output (4h) with wi's output and the activation's (relu: 2 i-sized tensors;
    #   gelu_new: 4, its tanh-approximation intermediates) next to the shared bias and the bool mask (a layer's
    #   masked copy is gone after its attention)
    n_i = 4 if model.traits.activation == "gelu_new" else 2
    pp_ = P * P
    enc = max(seqs * P * (4 * h + 6 * a * d) + T5_BUCKET_TEMP_BYTES * pp_,
              seqs * P * (4 * h + 2 * n_i * i) + (2 * a + 1) * pp_)
    if encdec.is_bart_style(model) or encdec.is_ngram(model):
        # BART (modeling_bart.py BartEncoder.forward): the locals inputs_embeds and embed_pos (B, P, h) stay alive
        # through every layer; the peak is at out_proj (layer input, q, k, v, attention output, out_proj's output)
        # or at fc2 (residual, fc1's and the activation's outputs, fc2's output); no position bias (traced)
        # (gelu_new's tanh approximation holds four i-sized tensors, as in T5's MLP above)
        i_enc = encdec.bart_ffn_width(model, "encoder") / tp
        enc = seqs * P * 2 * (2 * h + max(2 * h + 4 * a * d, 2 * h + n_i * i_enc))
        if model.traits.encoder_eager_up_to or encdec.is_ngram(model):
            # an eager encoder attention (BigBird-Pegasus up to its block-sparse length,
            # BigBirdPegasusSelfAttention.forward): at its softmax the 16-bit scores and probabilities (heads x P x P
            # each) beside the layer input, q, k and v; the layer keeps the probabilities it returns through its MLP,
            # next to the encoder's 16-bit additive mask (P x P) (traced: 2-layer default, prompt 512)
            enc = max(seqs * P * 2 * (2 * h + 2 * h + n_i * i_enc) + seqs * (2 * a + 2) * P * P,
                      seqs * (P * 2 * (3 * h + 3 * a * d) + 2 * 2 * a * P * P))
    # first decoder step: the repeated encoder output and one layer's cross k and v before they go to the cache
    first = seqs * k * P * 2 * (h + 2 * a * d)
    phases = {
        "encoder": dict(weights=weights, activations=enc),
        "prefill": dict(weights=weights, kv_cache=kv, activations=first),
        "decode": dict(weights=weights, kv_cache=kv, activations=seqs * k * (4 * h + 3 * i) * 2,
                       logits=beam_logits_bytes(model, seqs, k, inf.engine),
                       temporary=beam_reorder_bytes(model, kv, k, inf.engine)),
    }
    return phases, notes, {}


def _eager_prefill_bytes_per_token(model: ModelSpec, tp: int, cache_len: int) -> float:
    """Bytes per prompt token at the softmax of an eager-only attention layer during HF prefill (no_grad), where
    every (head, query, cached key) score is materialised: `traits.eager_prefill_score_bytes` per score. Every
    eager path holds the 16-bit scores and the probabilities at once (4 bytes: transformers 5.25 XGLM, TrOCR:
    bmm, then softmax); the model reader says where its code holds more. BLOOM (models/bloom/modeling_bloom.py
    BloomAttention.forward, BloomModel.forward, transformers 5.25) holds the 16-bit `baddbmm` scores, their masked
    copy (`attn_weights + attention_mask`: transformers picks eager for a model with no SDPA path, and the eager
    causal mask is materialised), softmax's fp32 copy (dtype=torch.float32) and its fp32 output, while the
    previous block's 16-bit probabilities stay alive in the model loop's `outputs` (each block returns them):
    14 bytes per score from the second layer on. Beside them: the input embeddings, the block input, the norm
    output (16-bit) and the fused qkv output (traced: 2-layer default BLOOM, prompt 510, eager)."""
    a, d, kvh, h = model.num_heads / tp, model.head_dim, max(1, model.num_kv_heads // tp), model.hidden_size
    return model.traits.eager_prefill_score_bytes * a * cache_len + 2 * (3 * h + (a + 2 * kvh) * d)


ONE_KERNEL_ACTIVATIONS = ("gelu", "silu", "relu", "gelu_pytorch_tanh")   # one output tensor, no intermediates


def _prefill_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """16-bit tensors alive per token at the MLP during HF prefill (no_grad): four h-sized (embeddings /
    residual stream, norm output, MLP input and output) and the MLP's i-sized ones: a gated MLP
    `down(act(gate(x)) * up(x))` holds act(gate), up and their product (three); a plain MLP `fc2(act(fc1(x)))`
    with a one-kernel activation (GELU, SiLU, ReLU, torch's tanh GELU) holds fc1's output and the activation's
    (two: falcon's dense_h_to_4h + GELU, BERT's, OPT's ReLU, traced with transformers 5.25, as the encoder MLPs
    of `_encdec_infer_components`); squared ReLU (relu, then its square) holds three. Traced exceptions:
    GPT-2's `inputs_embeds + position_embeds` keeps the token embeddings as a fifth h-sized tensor, and
    transformers' Python gelu_new `0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3)))` holds x, 0.5*x, x**3 and
    0.044715*x**3 at once (four i-sized)."""
    h, i = model.hidden_size, max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_tok, 1))
    n_h = 5 if model.traits.position == "learned" else 4
    act = model.traits.activation
    n_i = 3 if model.gated_mlp else 4 if act == "gelu_new" else 2 if act in ONE_KERNEL_ACTIVATIONS else 3
    return (n_h * h + n_i * i / tp) * 2


# ---- public entry --------------------------------------------------------------------------------------
def _finish(phases: dict[str, dict[str, float]], scn: Scenario, capacity: int, notes, cpu=0.0, limits=None,
            world=1, reserve: dict[str, float] | None = None) -> MemoryEstimate:
    """`reserve`: per phase, bytes the caching allocator holds but cannot hand out then (not allocated; added to
    runtime_overhead, and to the phase's total when the peak phase is chosen)."""
    reserve = reserve or {}
    totals = {name: sum(c.values()) + reserve.get(name, 0.0) for name, c in phases.items()}
    peak_phase = max(totals, key=totals.get)
    comps = {k: int(round(phases[peak_phase].get(k, 0.0))) for k in MEMORY_COMPONENTS if k != "runtime_overhead"}
    allocated = sum(comps.values())
    if not scn.is_training:
        # weights and the KV cache are allocated once, as whole blocks (a serving engine's KV pool is a
        # single pre-allocation): the caching allocator's reserve grows only with the transient rest
        allocated -= comps["weights"] + comps["kv_cache"]
    # a free cached segment never causes an OOM: before failing, CUDACachingAllocator frees every wholly free
    # segment and retries (malloc -> release_cached_blocks, c10/cuda/CUDACachingAllocator.cpp v2.2.0), so the
    # stranded reserve fills at most the headroom left
    overhead = _overhead(scn, allocated)
    headroom = max(0.0, capacity - (sum(comps.values()) + overhead))
    stranded = reserve.get(peak_phase, 0.0)
    comps["runtime_overhead"] = overhead + int(min(stranded, headroom))
    if stranded > headroom > 0:     # allocations fit; only the elastic reserve is trimmed
        notes = [*notes, _capped_reserve_note(stranded, headroom)]
    peak = sum(comps.values())
    # a reserved segment stays reserved in the phases after it: every phase shares the peak's runtime overhead
    phase_peaks = {name: int(sum(c.values())) + comps["runtime_overhead"] for name, c in phases.items()}
    return MemoryEstimate(peak_bytes_per_gpu=peak, capacity_bytes_per_gpu=capacity, components=comps,
                          phase=peak_phase, phases=phase_peaks, cpu_bytes=int(cpu), limits=limits or {},
                          notes=tuple(notes))


def _capped_reserve_note(stranded: float, headroom: float) -> str:
    return (f"the peak equals the GPU's capacity because the caching allocator's stranded segments "
            f"({stranded / GiB:.1f} GiB) are capped at the {headroom / GiB:.1f} GiB the allocations leave free: "
            "that reserve is elastic (PyTorch frees wholly free cached segments and retries before it reports an "
            "OOM), so the run fits, and torch.cuda.max_memory_reserved() will read close to the capacity")


def estimate_memory(scn: Scenario, model: ModelSpec, capacity_bytes: int) -> MemoryEstimate:
    """Per-GPU peak for the scenario on a GPU with `capacity_bytes` of usable memory."""
    from .vision import image_load
    load = image_load(scn, model)
    if load is not None:
        return _memory_with_images(scn, model, capacity_bytes, load)
    if scn.is_training and getattr(scn.train, "objective", "sft") != "sft":   # post-training: estimate/posttrain.py
        from .posttrain import estimate_posttrain_memory
        return estimate_posttrain_memory(scn, model, capacity_bytes)
    return _estimate_memory(scn, model, capacity_bytes)


def _memory_with_images(scn: Scenario, model: ModelSpec, capacity_bytes: int, load) -> MemoryEstimate:
    """A vision-language scenario: the language model over text + image tokens, plus the vision tower's
    activations (training: saved until its backward; serving: its forward's working set inside the prefill)."""
    from . import vision as V
    dec = V.decoder_scenario(scn, load)
    tower = model.vision_tower
    note = (f"{load.images} image(s) per {'sequence' if scn.is_training else 'request'}: {load.tokens:,} image "
            f"tokens join the decoder sequence; the vision tower runs over {load.positions:,} positions")
    if scn.is_training:
        if dec.train.objective != "sft":
            raise UnsupportedError("data.images_per_sample with train.objective " + dec.train.objective,
                                   "post-training objectives with images are not modelled.",
                                   "estimate the SFT step, or remove the images.")
        saved = V.tower_saved_bytes(tower, load, dec.train.recompute) * dec.train.micro_batch
        pixels = V.pixel_input_bytes(tower, load) * dec.train.micro_batch
        # full recompute: during the tower's backward one of its layers is recomputed whole beside the checkpoints
        one = (V.layer_saved_bytes_per_position(tower) * load.positions * dec.train.micro_batch
               if load.trainable and V.tower_recompute(tower, dec.train.recompute) == "full" else 0.0)
        one += V.layer_backward_bytes(tower, load) * dec.train.micro_batch if load.trainable else 0.0
        # cross-attention decoder layers (Llama-3.2-Vision): freed in the decoder's backward, before the tower's
        cross = V.cross_saved_bytes(model, load, dec.train.seq_len, dec.train.recompute) * dec.train.micro_batch
        est = _estimate_memory(dec, model, capacity_bytes, vision_saved=saved + pixels + cross,
                               vision_end=saved + pixels + one)
        extra = (f"; it keeps {saved / GiB:.2f} GiB of activations for its backward" if saved else
                 "; it is frozen (LoRA adapters on the decoder only), so it saves nothing for backward")
    else:
        cross_kv = V.cross_kv_bytes(model, load, kv_bytes(scn.infer.kv_cache))
        if cross_kv and scn.infer.engine != "hf":
            raise UnsupportedError(f"images for model '{model.name}' with engine {scn.infer.engine}",
                                   "its images enter through cross-attention layers, whose per-request key/value "
                                   "cache is modelled for transformers' generate only (an engine's encoder-"
                                   "decoder cache manager is not).", "use infer.engine hf, or drop the images.")
        # the projector output (the cross-attention layers' k/v input) and the 4-D cross-attention mask stay
        # alive through the decoder's prefill (MllamaModel.forward)
        held = V.pixel_input_bytes(tower, load)
        if load.cross_tokens:
            held += 2.0 * load.cross_tokens * (model.hidden_size + scn.infer.prompt_len + load.tokens)
        est = _estimate_memory(dec, model, capacity_bytes, vision_prefill=V.tower_prefill_bytes(tower, load),
                               vision_inputs=held, vision_kv=cross_kv)
        extra = (f"; its cross-attention layers cache {cross_kv / 2**20:.1f} MiB of image keys/values per request"
                 if cross_kv else "")
    return dataclasses.replace(est, notes=est.notes + (note + extra + " (docs/vision-language.md).",))


def _estimate_memory(scn: Scenario, model: ModelSpec, capacity_bytes: int, vision_saved: float = 0.0,
                     vision_prefill: float = 0.0, vision_inputs: float = 0.0,
                     vision_end: float | None = None, vision_kv: float = 0.0) -> MemoryEstimate:
    if scn.is_training:
        best: MemoryEstimate | None = None
        for stage in stages(scn.parallel.pp):
            first = stage in ("first", "only")
            comps, notes = _train_components(scn, model, stage, vision_saved if first else 0.0,
                                             vision_end if first else None)
            host = comps.pop("_cpu")
            cpu, layers = host["cpu"], host["stranded"]
            stranded = stranded_logits_bytes(scn, model, stage)
            if stranded:
                notes.append(f"the freed 16-bit logits ({stranded / GiB:.1f} GiB) stay reserved by the caching "
                             "allocator through the loss backward (counted in runtime_overhead)")
            if layers:
                notes.append(f"cached segments the loss block cannot use ({layers / GiB:.1f} GiB: one layer's forward "
                             "working set; FSDP1's second all-gather unit) stay reserved (counted in runtime_overhead)")
            stranded += layers
            est = _finish(comps, scn, capacity_bytes, notes, cpu, reserve={"backward": stranded})
            if best is None or est.peak_bytes_per_gpu > best.peak_bytes_per_gpu:
                best = est
        assert best is not None
        return best
    phases, notes, extra = _infer_components(scn, model, capacity_bytes)
    if vision_prefill and "prefill" in phases:
        # the tower runs (and frees its working set) before the decoder's prefill of the same requests
        seqs = math.ceil(scn.infer.concurrency / max(1, min(scn.dp, scn.parallel.ep) if scn.parallel.ep > 1 else 1))
        ph = phases["prefill"]
        # the pixels stay alive (the request's inputs) through the decoder's prefill; the tower's working set
        # peaks before the decoder runs (a phase of its own): transformers' generate makes its DynamicCache in
        # the decoder's forward, so no KV exists yet; the other engines allocate theirs at start-up
        kv_before = 0.0 if scn.infer.engine == "hf" else ph.get("kv_cache", 0.0)
        phases["vision_encode"] = dict(weights=ph["weights"], kv_cache=kv_before,
                                       activations=(vision_prefill + vision_inputs) * seqs,
                                       temporary=ph.get("temporary", 0.0))
        ph["activations"] = ph.get("activations", 0.0) + vision_inputs * seqs
        for name in ("prefill", "decode"):
            if name in phases:
                phases[name]["kv_cache"] = phases[name].get("kv_cache", 0.0) + vision_kv * seqs
    cpu = extra.pop("cpu_bytes", 0)
    # a paged engine's reservation (its share of the GPU) is the capacity the workload must fit in
    cap = extra.pop("reserved_bytes", None)
    if cap is None:
        paged = scn.infer and scn.infer.engine in ("vllm", "sglang", "trtllm")
        cap = int(capacity_bytes * scn.infer.gpu_memory_utilization) if paged else capacity_bytes
    return _finish(phases, scn, cap, notes, cpu, limits=extra)

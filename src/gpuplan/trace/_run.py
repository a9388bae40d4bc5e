"""The traced runs: training iterations and inference (prefill + decode) on fake tensors."""
from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Callable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..estimate.results import MEMORY_COMPONENTS
from ._build import _module_to_in_place, _quiet, build_causal_lm, hf_config
from ._tracker import AllocTracker
from .result import TraceResult

CUDA_BLOCK = 512        # the caching allocator rounds every block up to 512 bytes

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

_WEIGHT_TAGS = {"weights", "buffers", "fsdp_unsharded", "weight_copy", "quantized"}


def _component(tag: str, phase: str) -> tuple[str, str]:
    if tag in _WEIGHT_TAGS:
        return "weights", tag
    if tag in ("gradients", "optimizer_states", "kv_cache", "logits"):
        return tag, tag
    if tag == "optimizer_step_counters":
        return "optimizer_states", tag
    if tag == "inputs":
        return "activations", "inputs"
    if tag:
        return "temporary", tag
    if phase in ("forward", "prefill", "decode", "encoder"):
        return "activations", phase
    return "temporary", phase


def optimizer_step_labelled(tracker, opt) -> None:
    """The optimizer step as its own phase, the states it creates labelled (step counters apart)."""
    tracker.set_phase("optimizer_step")
    opt.step()
    opt.zero_grad(set_to_none=True)
    for st in opt.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tracker.label(v, "optimizer_step_counters" if k == "step" else "optimizer_states")


def breakdown(tracker: AllocTracker) -> tuple[dict[str, int], dict[str, int]]:
    comps = dict.fromkeys(MEMORY_COMPONENTS, 0)
    details: Counter = Counter()
    for nbytes, tag, phase in tracker.peak_blocks():
        comp, what = _component(tag, phase)
        comps[comp] += nbytes
        details[f"{comp}:{what}"] += nbytes
    return comps, dict(details)


def make_tagger(vocab: int) -> Callable:
    to_copy = torch.ops.aten._to_copy.default

    def tagger(func, args, t):
        if t.dim() >= 2 and t.shape[-1] == vocab:
            return "logits"
        if func is to_copy and args and isinstance(args[0], nn.Parameter):
            return "weight_copy"
        return None
    return tagger


class Progress:
    """Calls `progress(message)` (or writes to stderr) once a trace has run for more than 1 s."""

    def __init__(self, progress):
        self.cb, self.t0, self.shown = progress, time.monotonic(), False

    def __call__(self, msg: str) -> None:
        if self.cb is None:
            return
        if time.monotonic() - self.t0 > 1.0 or self.shown:
            self.shown = True
            self.cb(msg)


# --------------------------------------------------------------------------------------------------
def run_trace(scenario, spec, *, iterations: int, decode_steps: int, progress=None,
              fake: bool = True, rank: int = 0, known: bool | None = None) -> TraceResult:
    """One rank's trace. `fake=False` runs the same code on real CPU tensors (tests only).

    `known`: run on fake tensors that carry the values the harness chose (its token ids) and those the code
    fixes itself (trace/_known.py). None: only when a plain fake run stops at a value read to pick a shape."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    t0 = time.monotonic()
    if not fake or known is not None:
        res = _run_once(scenario, spec, iterations, decode_steps, progress, fake, rank, bool(known))
    else:
        try:
            res = _run_once(scenario, spec, iterations, decode_steps, progress, fake, rank, False)
        except (DataDependentOutputException, DynamicOutputShapeException):
            res = _run_once(scenario, spec, iterations, decode_steps, progress, fake, rank, True)
    res.seconds = time.monotonic() - t0
    return res


def _run_once(scenario, spec, iterations, decode_steps, progress, fake, rank, known) -> TraceResult:
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    from ._known import KnownValuesMode
    say = Progress(progress)
    notes: list[str] = []
    world = _world(scenario)
    if not fake:
        mode = contextlib.nullcontext()
    else:
        mode = KnownValuesMode() if known else FakeTensorMode(allow_non_fake_inputs=True)
    if known:
        notes.append("the model reads tensor values to pick shapes: traced on fake tensors that carry the values "
                     "fixed before the run (the harness's seeded token ids, constants and masks the code builds "
                     "from them and from arange/zeros/ones/full); a value computed from the weights stays unknown, but for "
                     "a router's top-k indices, which take the balanced assignment (the per-expert pieces add up to "
                     "tokens x k whatever the routing).")
    dist_ctx = _dist_context(scenario, rank, notes) if world > 1 else contextlib.nullcontext(None)
    try:
        with dist_ctx as mesh, mode, _unpacked_inputs(), _fp32_grouped_experts(scenario, spec, notes), \
                _cuda_kernel_semantics(notes), _fake_deepcopy(fake), \
                _cuda_tensor_checks(fake and not scenario.is_training):
            if scenario.is_training:
                res = _train(scenario, spec, mesh, iterations, notes, say)
            else:
                res = _infer(scenario, spec, mesh, decode_steps, notes, say)
    except (DataDependentOutputException, DynamicOutputShapeException) as err:
        if not known:
            raise
        from ..errors import UnsupportedError
        from ._known import KNOWN_NUMEL
        source = ("the weights, or from a tensor over {:,} elements whose values the trace does not keep".format(
            KNOWN_NUMEL) if mode.dropped_large else "the weights")
        raise UnsupportedError(
            f"tracing '{spec.name}' ({scenario.task})",
            f"a value computed from {source} picks a shape at {_model_frame(err)} ({type(err).__name__} on "
            f"{err.func}); neither fake tensors nor the inputs the harness chose can answer it, and nothing is "
            "guessed.",
            "use `gpuplan estimate` for this model, or trace a shorter sequence.") from None
    res.model, res.task = spec.name, scenario.task
    res.world_size = world
    res.per_rank = [{"rank": rank, "peak_bytes": res.peak_bytes}]
    notes.append("Bytes follow the CUDA caching allocator's accounting (each block rounded up to 512 B) and "
                 "equal torch.cuda.max_memory_allocated(); the CUDA context, the allocator's reserve and "
                 "fragmentation, cuBLAS/attention workspaces and NCCL buffers are not included.")
    res.method_notes = notes
    return res


def _model_frame(err: BaseException) -> str:
    """The innermost frame of the model's own code (transformers/models/...) in `err`'s traceback."""
    import traceback
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/models/" in f.filename.replace("\\", "/")]
    if not frames:
        return "the model's forward"
    f = frames[-1]
    return f"{f.filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.lineno} `{(f.line or '').strip()}`"


@contextlib.contextmanager
def _fake_deepcopy(fake: bool):
    """copy.deepcopy of a fake tensor: Tensor.__deepcopy__ copies the storage through a real CPU storage,
    which a fake (meta-backed) tensor refuses and then crashes the process. Some models deep-copy cache layers
    in their forward (Dory's `per_loop` recurrent KV: `copy.deepcopy(c)` for every recurrent layer and extra
    loop, modeling_dory.py DoryModel.forward, transformers 5.25). A deep copy allocates a new tensor of the
    same size, so it is done as a detached clone: the same bytes, on the tracked fake allocator."""
    if not fake:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    def deepcopy(self, memo):
        if id(self) not in memo:
            out = self.detach().clone()
            if self.requires_grad and self.is_leaf:
                out.requires_grad_(True)
            memo[id(self)] = out
        return memo[id(self)]

    had = "__deepcopy__" in vars(FakeTensor)
    old = vars(FakeTensor).get("__deepcopy__")
    FakeTensor.__deepcopy__ = deepcopy
    try:
        yield
    finally:
        if had:
            FakeTensor.__deepcopy__ = old
        else:
            del FakeTensor.__deepcopy__


@contextlib.contextmanager
def _cuda_tensor_checks(on: bool):
    """Inference traces only: a fake tensor answers `tensor.is_cuda` as the GPU tensor it stands for. Some model
    code takes a CUDA-only path on it: Ergo's lm_head and router (ErgoLinearWithFP32Output, modeling_ergo.py,
    transformers 5.25) and Kolibri's router multiply in 16 bits into fp32 with `torch.mm(..., out_dtype=fp32)`
    when `hidden_states.is_cuda` and no gradient is recorded, and on CPU make an fp32 copy of the whole weight
    (`weight.float()`: 8 GiB for Ergo's 2.1B-parameter head). The device itself stays CPU (kernels are chosen by
    the device, not this attribute); fake tensors run torch.mm's out_dtype like any op."""
    if not on:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor
    FakeTensor.is_cuda = property(lambda self: True)
    try:
        yield
    finally:
        del FakeTensor.is_cuda


@contextlib.contextmanager
def _unpacked_inputs():
    """DESIGN §6 mask pitfall. With no attention mask, transformers checks position_ids for packed
    sequences by reading their values; a fake tensor has none, so it assumes packing and builds a
    full [B,1,S,S] mask, which sends SDPA down its masked path. Our inputs are one unpadded sequence
    per row, so answer that check the way a real run answers it (no packing), after doing the same
    tensor ops a real run does (their temporaries are counted alike)."""
    try:
        from transformers import masking_utils as mu
    except ImportError:
        yield
        return
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    def find_packed_sequence_indices(position_ids):
        out = orig(position_ids)
        if isinstance(out, FakeTensor):
            (out[:, -1] == 0).all()        # the real run's check, minus reading its value
            return None
        return out

    mu.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = orig


@contextlib.contextmanager
def _cuda_kernel_semantics(notes):
    """Make two CPU kernels save what their CUDA counterparts save (the trace stands for a GPU run):
    * CUDA autocast casts scaled_dot_product_attention's inputs to the 16-bit dtype (SDPA is on its
      lower-precision list); CPU autocast does not, so a family that applies RoPE in fp32 (Falcon)
      or an fp32 residual would send SDPA down its fp32 math path (scores kept). Cast like CUDA.
    * Attention dropout: flash/memory-efficient kernels draw it inside the kernel (an RNG seed is
      saved); the CPU fused kernel has no dropout and falls back to the math path. SDPA is called
      with dropout_p=0 (same saved tensors as the GPU kernel).
    * F.dropout: CUDA runs the fused native_dropout (a 1-byte bool mask saved); CPU's dropout keeps a
      mask in the input dtype. native_dropout is used."""
    F = torch.nn.functional
    orig_sdpa, orig_dropout = F.scaled_dot_product_attention, F.dropout

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *args, **kwargs):
        if torch.is_autocast_enabled("cpu"):
            dt = torch.get_autocast_dtype("cpu")
            query, key, value = (x.to(dt) if x.is_floating_point() else x for x in (query, key, value))
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(dt)
        if _cuda_takes_mem_efficient_where_cpu_takes_math(query, key, value, args, {**kwargs, "attn_mask": attn_mask}):
            if not any("memory-efficient" in n for n in notes):
                notes.append("SDPA with a value head dim different from the query/key head dim (MLA) or a "
                             "learned additive bias (T5's relative position bias): CUDA runs "
                             "the memory-efficient kernel (q, k, v, output, fp32 log-sum-exp saved; a mask becomes "
                             "a 16-bit bias padded to 16 columns), the CPU the math path (S x S scores kept); "
                             "traced with the CUDA kernel's own op (aten._scaled_dot_product_efficient_attention).")
            return _mem_efficient_sdpa(query, key, value, attn_mask, is_causal, kwargs.get("scale"))
        return orig_sdpa(query, key, value, attn_mask, 0.0, is_causal, *args, **kwargs)

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return orig_dropout(input, p, training, inplace)
        return torch.native_dropout(input, p, True)[0]

    F.scaled_dot_product_attention, F.dropout = sdpa, dropout
    try:
        yield
    finally:
        F.scaled_dot_product_attention, F.dropout = orig_sdpa, orig_dropout


_MEM_EFF_ALIGN = 16     # CUDA mem-efficient attention pads an unaligned bias' last dim to 16 (preprocess_mask)


def _cuda_takes_mem_efficient_where_cpu_takes_math(query, key, value, args, kwargs) -> bool:
    """True when torch's CUDA SDPA dispatch (sdp_utils.cpp, torch 2.13) picks the memory-efficient kernel
    while the CPU dispatch (sdp_utils_cpp.cpp) falls back to the math path, which keeps the S x S
    scores. The one case the traced models hit: a value head dim different from the query/key head dim
    (DeepSeek MLA: 192 vs 128). CPU flash and CUDA flash need q, k and v of one head dim; CUDA's
    memory-efficient kernel needs only q and k equal and both dims aligned (8 elements in 16-bit on
    sm80+). Equal head counts only (implicit MQA broadcast, Falcon, is refused by every fused kernel
    on CUDA too: check_batch_size_and_num_heads_dense). Fake tensors only: the real CPU has no such kernel."""
    from torch._subclasses.fake_tensor import FakeTensor
    if args or kwargs.get("enable_gqa") or not isinstance(query, FakeTensor):
        return False
    if not (query.dim() == key.dim() == value.dim() == 4):
        return False
    if query.dtype not in (torch.bfloat16, torch.float16) or not (query.dtype == key.dtype == value.dtype):
        return False
    dq, dk, dv = query.shape[-1], key.shape[-1], value.shape[-1]
    heads = query.shape[:2] == key.shape[:2] == value.shape[:2]
    if not (heads and dq == dk and dq % 8 == 0 and dv % 8 == 0):
        return False
    # a learned additive bias (T5's relative position bias: attn_mask requires grad): CUDA's flash kernel
    # takes no mask, the memory-efficient kernel takes the bias and returns its gradient
    # (_efficient_attention_backward bias_requires_grad); the CPU's fused kernel has no bias gradient
    mask = kwargs.get("attn_mask")
    learned_bias = mask is not None and mask.is_floating_point() and mask.requires_grad
    return dv != dq or learned_bias


def _mem_efficient_sdpa(query, key, value, attn_mask, is_causal, scale):
    """What CUDA's SDPA does on its memory-efficient path (attention.cpp): a boolean mask becomes an
    additive bias in the query dtype (convert_boolean_attn_mask), expanded to [B, H, S, S_kv] and, when
    S_kv is not a multiple of 16, padded (which materialises the expanded bias) and sliced back
    (preprocess_mask / pad_bias); then aten._scaled_dot_product_efficient_attention, whose autograd node
    saves q, k, v, the bias, the output and an fp32 log-sum-exp."""
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            neg_inf = torch.tensor(float("-inf"), dtype=query.dtype)
            attn_mask = torch.where(attn_mask.logical_not(), neg_inf, torch.tensor(0.0, dtype=query.dtype))
        target = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        bias = attn_mask.expand(target)
        s_kv = target[-1]
        if s_kv % _MEM_EFF_ALIGN:
            pad = _MEM_EFF_ALIGN - s_kv % _MEM_EFF_ALIGN
            bias = torch.nn.functional.pad(bias, (0, pad))[..., :s_kv]
    need_lse = torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value))
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, need_lse, 0.0, bool(is_causal and bias is None), scale=scale)
    return out[0]


@contextlib.contextmanager
def _fp32_grouped_experts(scenario, spec, notes):
    """MoE experts under fp32 master weights. transformers' grouped_mm experts are not autocast ops:
    they cast the (16-bit) input to the weight dtype, so with fp32 parameters the experts run in
    fp32 (transformers.integrations.moe._grouped_mm). torch's grouped_mm meta kernel only accepts
    bf16, so fake tensors cannot run that call; transformers' own fallback op
    (transformers::grouped_mm_fallback: same fp32 inputs, same saved input and weight) is used for
    fp32 weights instead, exactly as transformers does where grouped_mm is unavailable."""
    train = getattr(scenario, "train", None)
    if not (spec.is_moe and train is not None and train.master_weights and train.precision in ("bf16", "fp16")):
        yield
        return
    try:
        from transformers.integrations import moe
        orig = moe._can_use_grouped_mm
    except (ImportError, AttributeError):
        yield
        return

    def can_use(input, weight, offs):
        return weight.dtype in (torch.bfloat16,) and orig(input, weight, offs)

    moe._can_use_grouped_mm = can_use
    notes.append("MoE experts with fp32 master weights: transformers casts each expert matmul's input to the "
                 "fp32 weight dtype (grouped_mm is not an autocast op), so routed experts compute and save "
                 "fp32 tensors; traced with transformers' grouped_mm fallback op (torch's grouped_mm meta "
                 "kernel accepts bf16 only).")
    try:
        yield
    finally:
        moe._can_use_grouped_mm = orig


def _world(scenario) -> int:
    p = scenario.parallel
    return (p.dp or 1) * p.tp


# --------------------------------------------------------------------------------------------------
def _attn_impl(requested: str, notes: list[str]) -> str:
    if requested == "flash":
        notes.append("attention 'flash' traced as SDPA (its CPU fused kernel saves the same tensors as "
                     "flash-attention: output + logsumexp).")
        return "sdpa"
    return requested


def _dtype_setup(train, notes):
    """(parameter dtype, autocast dtype or None)."""
    prec = train.precision
    if prec == "fp8":
        notes.append("precision fp8 traced as bf16: FP8 matmuls (TransformerEngine/torchao) cannot run on "
                     "CPU; FP8 saves some activations in 8 bits, so this is an upper bound for them.")
        prec = "bf16"
    if prec == "fp32":
        notes.append("fp32 parameters, no autocast.")
        return torch.float32, None
    low = _DTYPES[prec]
    if train.method in ("lora", "qlora"):
        notes.append(f"frozen base in {prec}; LoRA adapters in fp32 (peft's default autocast_adapter_dtype)"
                     + (f" under {prec} autocast." if train.master_weights else "."))
        return low, (low if train.master_weights else None)
    if train.master_weights:
        notes.append(f"fp32 parameters + {prec} autocast (HF Trainer {prec}=True); autocast keeps a "
                     f"{prec} copy of each weight for the whole forward (details: weights:weight_copy).")
        return torch.float32, low
    notes.append(f"pure {prec} parameters and optimizer states (no master weights, no autocast).")
    return low, None


def _label_model(tracker: AllocTracker, model: nn.Module) -> None:
    for b in model.buffers():
        tracker.label(b, "buffers")
    for p in model.parameters():
        tracker.label(p, "weights")


def _register_existing(tracker: AllocTracker, model: nn.Module) -> None:
    for p in model.parameters():
        tracker.register(p, "weights")
    for b in model.buffers():
        tracker.register(b, "weights")


def _apply_lora(model, train, base_dtype, notes):
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        from ..errors import MissingExtraError
        raise MissingExtraError("gpuplan trace (LoRA)", "trace", "peft") from None
    targets = train.lora_targets if isinstance(train.lora_targets, list) else "all-linear"
    cfg = LoraConfig(r=train.lora_rank, lora_alpha=train.lora_alpha or 2 * train.lora_rank,
                     target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM")
    adapter_dtype = torch.float32 if train.master_weights else base_dtype
    with _quiet(), _module_to_in_place():
        model = get_peft_model(model, cfg, autocast_adapter_dtype=False)
    for p in model.parameters():
        if p.requires_grad and p.dtype != adapter_dtype:
            p.data = p.data.to(adapter_dtype)
    notes.append(f"LoRA via peft: rank {train.lora_rank}, targets {targets}, dropout 0 (a dropout > 0 saves "
                 "one more input copy per adapted linear).")
    return model


def _apply_qlora(model, train, compute_dtype, notes):
    from ._nf4 import NF4Linear
    n = 0
    for mod in list(model.modules()):
        base = getattr(mod, "base_layer", None)
        if isinstance(base, nn.Linear) and hasattr(mod, "lora_A"):
            mod.base_layer = NF4Linear(base, train.qlora_double_quant, compute_dtype)
            n += 1
    bits = "4.127" if train.qlora_double_quant else "4.5"
    notes.append(f"QLoRA NF4 MODELLED (bitsandbytes cannot run on CPU): {n} adapted linears store packed "
                 f"uint8 4-bit codes + block absmax ({bits} bits/weight, bitsandbytes Params4bit layout); each "
                 "matmul dequantizes into a 16-bit temporary in forward and again in backward. Non-quantized "
                 "parameters (embeddings, norms, lm_head) stay 16-bit (prepare_model_for_kbit_training's "
                 "fp32 upcast is not applied).")


def _train(scenario, spec, mesh, iterations, notes, say) -> TraceResult:
    train = scenario.train
    attn = _attn_impl(train.attention, notes)
    cfg = hf_config(spec, attn)
    vocab = cfg.get_text_config().vocab_size
    param_dtype, autocast_dtype = _dtype_setup(train, notes)
    tracker = AllocTracker(round_to=CUDA_BLOCK, tagger=make_tagger(vocab))
    B, S = train.micro_batch, train.seq_len
    say(f"building {spec.name} on fake tensors")
    with tracker:
        experts = None
        model = build_causal_lm(spec, cfg, param_dtype, attn, experts=experts, notes=notes)
        if train.method in ("lora", "qlora"):
            model = _apply_lora(model, train, param_dtype, notes)
            if train.method == "qlora":
                _apply_qlora(model, train, autocast_dtype or param_dtype, notes)
        model.train()
        if train.recompute != "none":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if train.recompute == "selective":
                notes.append("recompute 'selective' traced as full per-layer checkpointing: HF transformers "
                             "has no selective (attention-only) recompute.")
            else:
                notes.append("recompute 'full': HF gradient checkpointing, one checkpoint per decoder layer "
                             "(non-reentrant).")
        if mesh is not None:
            from ._dist import parallelize
            model = parallelize(model, scenario, mesh, param_dtype, autocast_dtype, notes)
            autocast_dtype = None if getattr(model, "_gpuplan_fsdp_mp", False) else autocast_dtype
        _label_model(tracker, model)
        from ._optim import make_optimizers
        opt = make_optimizers(train.optimizer, train.optimizer_impl,
                              model.named_parameters() if train.optimizer == "muon" else model.parameters(), notes)
        step = ("TRL's loss (below)" if getattr(train, "objective", "sft") != "sft"
                else "loss only, labels = input_ids, like HF Trainer")
        notes.append(f"{iterations} iterations of forward ({step}), backward, optimizer step, "
                     "zero_grad(set_to_none=True); peak of the last iteration.")
        notes.append("CUDA kernel semantics: SDPA inputs cast to the autocast dtype as CUDA autocast does, "
                     "attention dropout inside the attention kernel (no mask kept), other dropout as CUDA's "
                     "fused native_dropout (1-byte mask).")
        if attn == "sdpa":
            notes.append("no attention mask is passed, so SDPA takes the unmasked is_causal path a real "
                         "unpadded batch takes (transformers cannot see that a fake mask is all ones).")
        post = _posttrain_setup(scenario, spec, cfg, model, param_dtype, attn, tracker, notes)
        for it in range(iterations):
            say(f"iteration {it + 1}/{iterations}")
            if it == iterations - 1:
                tracker.reset_peak()
            tracker.set_phase("forward")
            if post is not None:
                loss = post(B, autocast_dtype)
            else:
                ids = _input_ids(tracker, vocab, (B, S))
                # encoder-decoder: labels are the target (decoder) tokens; decoder-only: the input itself
                labels = (_input_ids(tracker, vocab, (B, train.target_len or S)) if spec.is_encoder_decoder
                          else ids.clone())
                tracker.label(labels, "inputs")
                ctx = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
                inputs = _encoder_inputs(tracker, spec, ids, param_dtype)
                with ctx:
                    out = model(**inputs, labels=labels, use_cache=False)
                del inputs
                loss = out.loss
                del out, ids, labels
            tracker.set_phase("backward")
            loss.backward()
            del loss
            for p in model.parameters():
                if p.grad is not None:
                    tracker.label(p.grad, "gradients")
            if mesh is not None:
                from ._dist import label_fsdp_buffers
                label_fsdp_buffers(tracker, model)
            optimizer_step_labelled(tracker, opt)
    comps, details = breakdown(tracker)
    return TraceResult(peak_bytes=tracker.peak, components=comps, phase=tracker.peak_phase,
                       phases=dict(tracker.phase_peaks), details=details)


TRACED_OBJECTIVES = ("dpo", "ipo", "kto", "orpo", "simpo", "grpo")


def _posttrain_setup(scenario, spec, cfg, model, param_dtype, attn, tracker, notes):
    """For objectives dpo/ipo, kto (a reference), orpo/simpo (none) and grpo: build the frozen reference (a copy in the policy's parameter
    dtype: TRL loads it with the policy's model_init_kwargs, dpo_trainer.py L893-905) and return a
    function (micro_batch, autocast dtype) -> loss running TRL's step (trace/_posttrain.py).
    None for sft. Other objectives are refused."""
    from ..errors import UnsupportedError
    from . import _posttrain as pt
    train = scenario.train
    objective = getattr(train, "objective", "sft")
    if objective == "sft":
        return None
    if objective not in TRACED_OBJECTIVES or spec.is_encoder_decoder or _world(scenario) > 1:
        raise UnsupportedError(
            f"tracing objective '{objective}'" + (" on more than one GPU" if _world(scenario) > 1 else ""),
            "the trace runs TRL's DPO/IPO, KTO, ORPO and SimPO steps and GRPO training pass of a decoder-only "
            "model on one GPU.",
            f"trace objective {', '.join(TRACED_OBJECTIVES)} with parallel dp = tp = 1, or estimate this scenario "
            "instead.")
    if getattr(train, "pair_concat", "batch") == "sequence":
        raise UnsupportedError("tracing train.pair_concat = sequence", "the trace runs TRL's step, which puts the "
                               "chosen and rejected sequences in the batch; the joined row is open-instruct's "
                               "OLMo-core forward, not traced here.",
                               "trace with pair_concat: batch, or estimate this scenario instead.")
    vocab = cfg.get_text_config().vocab_size
    if objective == "grpo":
        rl = train.rl
        wants_ref = bool(rl.reference)
        kind = ("base" if train.method in ("lora", "qlora") else "copy") if wants_ref else "none"
    else:
        from ..estimate.posttrain import reference_kind
        kind = reference_kind(scenario)
    ref = None
    if kind == "copy":
        ref = build_causal_lm(spec, cfg, param_dtype, attn, notes=notes)
        ref.eval()
        ref.requires_grad_(False)
        for p in ref.parameters():
            tracker.label(p, "weights")
        for b in ref.buffers():
            tracker.label(b, "buffers")
        where = {"grpo": "grpo_trainer.py L971", "kto": "kto_trainer.py"}.get(objective, "dpo_trainer.py L893-905")
        notes.append(f"{objective}: a frozen reference copy in the policy's parameter dtype ({param_dtype}), as TRL "
                     f"loads it with the policy's model_init_kwargs ({pt.TRL} {where}).")
    elif kind == "base":
        notes.append(f"{objective}: the reference is the PEFT model with its adapters disabled (TRL use_adapter).")

    fp32_out = train.precision != "fp32"
    if fp32_out:
        notes.append(f"{objective}: the logits come back as fp32 copies, as accelerate's native AMP returns them "
                     "(TRL's default bf16=True; prepare_model wraps forward in convert_outputs_to_fp32), so TRL's "
                     "log-probs take selective_log_softmax's fp32 branch (per-row logsumexp).")

    def autocast(dt):
        return (lambda: torch.autocast("cpu", dtype=dt)) if dt else contextlib.nullcontext

    if objective == "grpo":
        rl = train.rl
        S = rl.prompt_len + rl.max_new_tokens
        notes.append(f"grpo training pass ({pt.TRL} grpo_trainer.py _compute_loss): {rl.prompt_len} prompt + "
                     f"{rl.max_new_tokens} completion tokens per sequence, logits_to_keep = completion + 1, "
                     "selective_log_softmax, entropy under no_grad, clipped ratio loss + KL to the reference; "
                     "the no-grad log-prob passes (old policy, reference) run first, phase logprob_forward.")

        def grpo_step(B, dt):
            ids = torch.randint(0, vocab, (B, S))
            tracker.label(ids, "inputs")
            return pt.grpo_loss(model, ref, ids, rl.max_new_tokens, autocast(dt), tracker,
                                reference=kind != "none", old_pass=bool(rl.old_logprob_pass), fp32_outputs=fp32_out)
        return grpo_step
    S = train.seq_len
    if objective == "kto":
        notes.append(f"kto step ({pt.TRL} kto_trainer.py _compute_loss): micro_batch unpaired sequences, the first "
                     "half desirable; a no-grad policy forward over as many mismatched KL sequences (phase "
                     "kl_forward), the policy forward, the reference over the KL batch and the batch (phase "
                     "reference_forward), then the logged metrics (phase loss_metrics: entropy, index_select "
                     "copies of the chosen and rejected logits); every token is a completion token.")

        def kto_step(B, dt):
            ids = torch.randint(0, vocab, (B, S))
            kl_ids = torch.randint(0, vocab, (B, S))
            tracker.label(ids, "inputs")
            tracker.label(kl_ids, "inputs")
            return pt.kto_loss(model, ref, ids, kl_ids, B // 2, autocast(dt), tracker, reference=kind,
                               fp32_outputs=fp32_out)
        return kto_step
    if objective in ("orpo", "simpo"):
        where = ("trl/experimental/orpo/orpo_trainer.py" if objective == "orpo"
                 else "trl/experimental/cpo/cpo_trainer.py, loss_type simpo, cpo_alpha 1.0")
        notes.append(f"{objective} step ({pt.TRL} {where}): chosen and rejected in one batch of 2 x micro_batch "
                     "sequences, an NLL on the chosen half (a contiguous copy of its shifted logits into "
                     "cross-entropy), length-averaged log-probs of all; no reference model.")

        def pref_step(B, dt):
            ids = torch.randint(0, vocab, (2 * B, S))
            tracker.label(ids, "inputs")
            return pt.orpo_loss(model, ids, autocast(dt), tracker, objective=objective, fp32_outputs=fp32_out)
        return pref_step
    notes.append(f"{objective} step ({pt.TRL} dpo_trainer.py _compute_loss): chosen and rejected in one batch of "
                 "2 x micro_batch sequences, model-dtype logits, selective_log_softmax per row, the reference "
                 "forward under no_grad (phase reference_forward), then TRL's logged metrics (phase loss_metrics: "
                 "entropy over a flattened copy of the logits, chosen/rejected logit means); every token is a "
                 "completion token.")

    def dpo_step(B, dt):
        ids = torch.randint(0, vocab, (2 * B, S))
        tracker.label(ids, "inputs")
        return pt.dpo_loss(model, ref, ids, autocast(dt), tracker, reference=kind, fp32_outputs=fp32_out)
    return dpo_step


# --------------------------------------------------------------------------------------------------
def _quantize_for_inference(model, fmt_name: str, compute_dtype, notes) -> None:
    from ..dtypes import weight_format
    from ._nf4 import PackedLinear, decoder_linears
    fmt = weight_format(fmt_name)
    if fmt.family == "float":
        return
    for parent, name, lin in decoder_linears(model):
        setattr(parent, name, PackedLinear(lin, fmt.bits, compute_dtype))
    notes.append(f"weights '{fmt.name}' MODELLED: decoder linears stored in {fmt.bits:.3f} bits/weight "
                 f"(scales included) as uint8 buffers; embeddings, norms and lm_head stay 16-bit; each matmul "
                 "dequantizes into a 16-bit temporary (reference path; fused kernels avoid it).")


def _infer(scenario, spec, mesh, decode_steps, notes, say) -> TraceResult:
    inf = scenario.infer
    cfg = hf_config(spec, "sdpa")
    vocab = cfg.get_text_config().vocab_size
    from ..dtypes import kv_bytes, weight_format
    wfmt = weight_format(inf.weights)
    compute = _DTYPES.get(wfmt.compute_dtype, torch.bfloat16)
    if wfmt.family == "float":
        compute = _DTYPES.get(wfmt.name, torch.bfloat16)
    kv_b = kv_bytes(inf.kv_cache)
    if kv_b != compute.itemsize:
        notes.append(f"KV cache '{inf.kv_cache}' traced in {compute} (HF caches store the compute dtype); "
                     f"scale kv_cache by {kv_b / compute.itemsize:g} for the real format.")
    tracker = AllocTracker(round_to=CUDA_BLOCK, tagger=make_tagger(vocab))
    B, P = inf.concurrency, inf.prompt_len
    if spec.is_encoder_decoder:
        return _infer_seq2seq(scenario, spec, cfg, compute, decode_steps, notes, say, tracker)
    if inf.beam_width > 1:
        # HF generate expands input_ids by num_beams before the prefill (_expand_inputs_for_generation)
        B *= inf.beam_width
        notes.append(f"beam search: {inf.beam_width} beams per request traced as a batch of {B} (HF generate "
                     "expands the prompt by num_beams before prefill); beam reordering and scoring not traced.")
    say(f"building {spec.name} on fake tensors")
    with tracker:
        model = build_causal_lm(spec, cfg, compute, "sdpa", notes=notes)
        _quantize_for_inference(model, inf.weights, compute, notes)
        model.eval()
        if mesh is not None:
            from ._dist import parallelize
            model = parallelize(model, scenario, mesh, compute, None, notes)
        _label_model(tracker, model)
        cache = _make_cache(cfg, model, B, P + decode_steps, notes)
        notes.append(f"prefill of {B} x {P} tokens with logits_to_keep=1 (as serving engines), then "
                     f"{decode_steps} decode steps; no attention mask (unpadded prompts).")
        tracker.reset_peak()
        with torch.no_grad():
            tracker.set_phase("prefill")
            ids = _input_ids(tracker, vocab, (B, P))
            try:
                out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            except Exception:   # noqa: BLE001 - retried below with the cache generate itself would make
                if type(cache).__name__ != "StaticCache":
                    raise
                out = None
            if out is None:
                # legacy models (BERT-style decoders building their own P x P mask) cannot take a preallocated
                # cache; HF generate gives every model a DynamicCache by default (generation/utils.py
                # _prepare_cache_for_generation, transformers 5.25), which grows with each step
                from transformers import DynamicCache
                cache = DynamicCache(config=cfg)
                notes.append("KV cache: the model cannot run with a StaticCache; traced with the DynamicCache "
                             "HF generate uses by default.")
                tracker.reset_peak()
                tracker.set_phase("prefill")
                out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = _returned_cache(out)
            if cache is None:
                notes.append("no KV cache: the model returns none (it takes no Cache), so every decode step runs "
                             "the whole sequence again, as HF generate does for it (prepare_inputs_for_generation "
                             "keeps every token while the cache holds none).")
            _label_cache(tracker, cache)
            seen = ids
            del out
            for step in range(decode_steps):
                tracker.set_phase("decode")
                tok = _input_ids(tracker, vocab, (B, 1), label=False)
                seen = torch.cat([seen, tok], dim=1)
                if cache is None or _full_sequence_each_step(model, seen, cache):
                    tok = seen
                out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = _returned_cache(out)
                _label_cache(tracker, cache)
                del out, tok
            del ids, seen
    comps, details = breakdown(tracker)
    kv = _cache_bytes(cache)
    return TraceResult(peak_bytes=tracker.peak, components=comps, phase=tracker.peak_phase,
                       phases=dict(tracker.phase_peaks), details=details, kv_cache_bytes=kv)


def _infer_seq2seq(scenario, spec, cfg, compute, decode_steps, notes, say, tracker) -> TraceResult:
    """HF generate's steps for an encoder-decoder (generation/utils.py, transformers 5.24): the encoder runs
    once over the batch of prompts (_prepare_encoder_decoder_kwargs_for_generation), its output is repeated
    num_beams times (_expand_inputs_for_generation), the first decoder step fills the cross-attention cache
    over the prompt, every step appends one token to the self-attention cache."""
    from transformers import EncoderDecoderCache, StaticCache
    from transformers.modeling_outputs import BaseModelOutput
    inf = scenario.infer
    B, P, k = inf.concurrency, inf.prompt_len, inf.beam_width
    vocab = cfg.get_text_config().vocab_size
    with tracker:
        model = build_causal_lm(spec, cfg, compute, "sdpa", notes=notes)
        model.eval()
        _label_model(tracker, model)
        steps = max(1, decode_steps)     # the first decoder step fills the cross-attention cache
        cache = EncoderDecoderCache(StaticCache(config=cfg, max_cache_len=steps),
                                    StaticCache(config=cfg, max_cache_len=P))
        notes.append(f"encoder over {B} x {P} prompt tokens, output repeated x{k} (beams), then "
                     f"{steps} decoder steps of {B * k} sequences; EncoderDecoderCache of two StaticCaches "
                     f"(self-attention: {steps} tokens, cross-attention: {P} tokens).")
        tracker.reset_peak()
        with torch.no_grad():
            tracker.set_phase("encoder")
            ids = _input_ids(tracker, vocab, (B, P))
            inputs = _encoder_inputs(tracker, spec, ids, compute)
            # the first output is the last hidden state, as a ModelOutput or a plain tuple (ProphetNet's encoder)
            enc = model.get_encoder()(**inputs)[0]
            del ids, inputs
            if k > 1:
                enc = enc.repeat_interleave(k, dim=0)
            for step in range(steps):
                tracker.set_phase("prefill" if step == 0 else "decode")
                tok = torch.zeros((B * k, 1), dtype=torch.long)
                # a ModelOutput, as HF generate passes the encoder's output (ProphetNet reads .last_hidden_state)
                out = model(encoder_outputs=BaseModelOutput(last_hidden_state=enc), decoder_input_ids=tok,
                            past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                for c in (cache.self_attention_cache, cache.cross_attention_cache):
                    _label_cache(tracker, c)
                del out, tok
    comps, details = breakdown(tracker)
    kv = _cache_bytes(cache.self_attention_cache) + _cache_bytes(cache.cross_attention_cache)
    return TraceResult(peak_bytes=tracker.peak, components=comps, phase=tracker.peak_phase,
                       phases=dict(tracker.phase_peaks), details=details, kv_cache_bytes=kv)


def _encoder_inputs(tracker, spec, ids, dtype) -> dict:
    """The encoder's input: the token ids, or for a speech encoder (traits.speech_frames: Whisper) log-mel features
    (batch, mel bins, frames) in the model's dtype, as WhisperFeatureExtractor's output cast to the model; the ids
    (one per encoder position) are then dropped."""
    speech = spec.traits.speech_frames
    if not speech:
        return {"input_ids": ids}
    import torch
    feats = torch.zeros((ids.shape[0], speech[0], speech[1]), dtype=dtype)
    tracker.register(feats, "inputs")
    tracker.label(feats, "inputs")
    return {"input_features": feats}


def _input_ids(tracker, vocab: int, shape: tuple[int, ...], label: bool = True):
    """The harness's token ids, counted (as inputs when `label`); under a KnownValuesMode they carry their values
    (trace/_known.py) and are created outside dispatch, so they are registered here."""
    from ._known import harness_tokens
    ids = harness_tokens(vocab, shape)
    tracker.register(ids, "inputs" if label else "")
    if label:
        tracker.label(ids, "inputs")
    return ids


def _full_sequence_each_step(model, seen, cache) -> bool:
    """Whether HF generate hands the model the whole sequence at every step although it keeps a cache: the
    model's own `prepare_inputs_for_generation` decides (GenerationMixin's keeps the last token; CPM-Ant's
    keeps every token, its forward slicing off the cached prefix, transformers 5.25 modeling_cpmant.py)."""
    try:
        kept = model.prepare_inputs_for_generation(seen, next_sequence_length=1, cache=cache, use_cache=True)
        ids = kept.get("input_ids")
    except Exception:   # noqa: BLE001 - a model whose preparation needs more (images): the last token
        return False
    return ids is not None and ids.shape[-1] == seen.shape[-1] > 1


def _returned_cache(out):
    """The cache a forward returned, or None for a model that takes none (OpenAI GPT: its output class has no
    cache field, and the `past_key_values` alias raises)."""
    try:
        return out.past_key_values
    except AttributeError:
        return None


def _make_cache(cfg, model, batch, max_len, notes):
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is not None and not supports():
        # MiniMax (linear attention), XLNet: HF generate hands them no cache (generation/utils.py
        # _prepare_cache_for_generation, "Quick escape route 3", transformers 5.25); they build their own
        notes.append("KV cache: the model builds a cache class of its own in its first forward (HF generate "
                     "passes it none: _supports_default_dynamic_cache is false).")
        return None
    try:
        from transformers import StaticCache
        cache = StaticCache(config=cfg, max_cache_len=max_len)
        notes.append(f"KV cache: transformers StaticCache preallocated for {max_len} tokens per sequence "
                     "(serving engines preallocate their KV pool the same way).")
        return cache
    except Exception:   # noqa: BLE001 - a layer type StaticCache has no class for: the growing cache
        from transformers import DynamicCache
        # DynamicCache(config=...) builds each layer's own cache class (DeepSeek-V4's compressed-attention
        # layers register theirs in cache_utils.DYNAMIC_LAYER_TYPE_MAPPING); HF generate's default
        notes.append("KV cache: DynamicCache built from the config's layer types (StaticCache cannot hold this "
                     "model's layers), growing by concatenation each step as under HF generate's default.")
        return DynamicCache(config=cfg)


def _cache_tensors(cache):
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in layers:
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if isinstance(t, torch.Tensor):
                    yield t
            # state-space layers (Mamba, Mamba-2, Jamba's Mamba layers): per-state dicts of tensors
            for name in ("conv_states", "recurrent_states"):
                states = getattr(layer, name, None)
                for t in (states.values() if isinstance(states, dict) else ()):
                    if isinstance(t, torch.Tensor):
                        yield t
        return
    for name in ("key_cache", "value_cache"):
        for t in getattr(cache, name, []) or []:
            if isinstance(t, torch.Tensor):
                yield t


def _label_cache(tracker, cache) -> None:
    for t in _cache_tensors(cache):
        tracker.label(t, "kv_cache")


def _cache_bytes(cache) -> int:
    seen, total = set(), 0
    for t in _cache_tensors(cache):
        local = getattr(t, "_local_tensor", t)
        key = id(local.untyped_storage())
        if key not in seen:
            seen.add(key)
            total += local.untyped_storage().nbytes()
    return total


def _dist_context(scenario, rank, notes):
    from ._dist import fake_world
    return fake_world(scenario, rank, notes)

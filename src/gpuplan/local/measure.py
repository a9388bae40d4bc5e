"""Run a scenario for a few real steps on the local GPU with random weights (HF transformers) and put the
measured peak memory and time beside gpuplan's prediction.

What runs: training/fine-tuning = forward + backward + optimizer step on random tokens (micro_batch x
seq_len), `steps` times after `warmup` (LoRA: the base frozen in the compute dtype, adapters fp32 under
autocast); objective dpo = TRL's DPOTrainer step (policy over [chosen; rejected], the reference under no_grad,
sigmoid loss, logged metrics; see `_dpo_step`), tokens counted as gpuplan counts a preference step's tokens (both
sequences of each pair); inference = a warm-up prefill and two decode steps (first calls load kernels), then one prefill
of concurrency x prompt_len and a decode loop of up to 64 tokens with the KV cache (HF `generate`-style,
not vLLM). `ops` adds one step under torch.profiler: GPU-busy time beside wall time, and the top operators. One GPU: layouts that change
per-GPU memory (TP, PP, CP, ZeRO/FSDP, offload) are refused rather than measured wrongly; plain data
parallelism has the per-GPU memory of one replica (plus DDP's gradient buckets, not measured here).

Measured memory is torch.cuda.max_memory_allocated / max_memory_reserved; the device's used memory
(mem_get_info) adds the CUDA context and library workspaces. The prediction's `runtime_overhead`
component is compared with that difference.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..errors import MissingExtraError, UnsupportedError
from .calibrate import require_cuda


@dataclass(frozen=True)
class MeasureResult:
    scenario: dict[str, Any]
    device_name: str
    torch_version: str
    measured: dict[str, Any]
    predicted: dict[str, Any] | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["relative_error"] = self.relative_errors()
        return d

    def relative_errors(self) -> dict[str, float]:
        """(predicted - measured) / measured for the quantities both sides have."""
        if not self.predicted:
            return {}
        pairs = {"peak_allocated": ("peak_allocated_bytes", "peak_bytes_without_overhead"),
                 "peak_device": ("peak_device_used_bytes", "peak_bytes_per_gpu"),
                 "step_time": ("step_time_s", "step_time_s"), "ttft": ("ttft_s", "ttft_s"),
                 "tpot": ("tpot_s", "tpot_s")}
        out = {}
        for k, (m, p) in pairs.items():
            mv, pv = self.measured.get(m), self.predicted.get(p)
            if mv and pv is not None:
                out[k] = (pv - mv) / mv
        return out

    def render(self) -> str:
        from .oom import fmt_bytes
        rows = [("peak allocated (tensors)", "peak_allocated_bytes", "peak_bytes_without_overhead", "b"),
                ("peak reserved (allocator)", "peak_reserved_bytes", None, "b"),
                ("device used (incl. context)", "peak_device_used_bytes", "peak_bytes_per_gpu", "b"),
                ("step time", "step_time_s", "step_time_s", "s"),
                ("tokens/s per GPU", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu", "n"),
                ("time to first token", "ttft_s", "ttft_s", "s"),
                ("time per output token", "tpot_s", "tpot_s", "s")]

        def f(v, kind):
            if v is None:
                return "-"
            return fmt_bytes(v) if kind == "b" else (f"{v * 1e3:,.1f} ms" if kind == "s" else f"{v:,.0f}")

        out = [f"{self.device_name}  (torch {self.torch_version})", "",
               f"  {'':<30}{'measured':>14}{'predicted':>14}{'error':>9}"]
        for label, mk, pk, kind in rows:
            mv = self.measured.get(mk)
            pv = (self.predicted or {}).get(pk) if pk else None
            if mv is None and pv is None:
                continue
            err = f"{(pv - mv) / mv:+.0%}" if mv and pv is not None else ""
            out.append(f"  {label:<30}{f(mv, kind):>14}{f(pv, kind):>14}{err:>9}")
        ops = self.measured.get("ops")
        if ops:
            out += ["", f"  one profiled step: wall {ops['wall_s'] * 1e3:,.1f} ms, GPU busy {ops['gpu_busy_s'] * 1e3:,.1f} ms, "
                    f"{ops['kernel_launches']:,} kernels", f"  {'kernel':<60}{'calls':>7}{'GPU ms':>10}"]
            out += [f"  {o['op'][:59]:<60}{o['calls']:>7}{o['device_s'] * 1e3:>10.2f}" for o in ops["top"]]
        if self.notes:
            out += [""] + [f"Note: {n}" for n in self.notes]
        return "\n".join(out)


MEASURED_OBJECTIVES = ("sft", "dpo")


def _check_supported(scn) -> list[str]:
    notes = []
    p = scn.parallel
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1:
        raise UnsupportedError("gpuplan measure", f"the scenario uses tp={p.tp}, pp={p.pp}, cp={p.cp}, ep={p.ep}; measure runs "
                               "one GPU and cannot reproduce model-parallel memory.",
                               "measure a tp=pp=cp=ep=1 variant, or run your engine and compare with `gpuplan estimate`.")
    if scn.is_training and (p.zero > 0 and (p.dp or 1) > 1 or p.offload != "none"):
        raise UnsupportedError("gpuplan measure", f"ZeRO/FSDP sharding (zero={p.zero}) or offload ({p.offload}) changes "
                               "per-GPU memory in ways one GPU cannot show.",
                               "measure with zero: 0 and offload: none, or trace the sharded run with `gpuplan trace`.")
    if (p.dp or 1) > 1:
        notes.append(f"data parallel dp={p.dp}: one replica measured; DDP adds gradient buckets (~ one gradient copy) not shown here.")
    if scn.is_training:
        t = scn.train
        if t.optimizer not in ("adamw", "adamw-8bit", "sgd"):
            raise UnsupportedError("gpuplan measure", f"optimizer '{t.optimizer}' is not wired into measure.",
                                   "use adamw, adamw-8bit or sgd for the measurement.")
        if t.recompute == "selective":
            notes.append("HF transformers has no selective recompute: measured with none (a selective prediction lies between).")
        if t.objective not in MEASURED_OBJECTIVES:
            raise UnsupportedError("gpuplan measure", f"objective '{t.objective}' is not wired into measure (it runs "
                                   "supervised steps and TRL's DPO step).",
                                   f"measure objective {' or '.join(MEASURED_OBJECTIVES)}, or trace this objective's "
                                   "memory with `gpuplan trace`.")
        if t.objective == "dpo" and t.pair_concat == "sequence":
            raise UnsupportedError("gpuplan measure", "train.pair_concat = sequence is open-instruct's OLMo-core DPO "
                                   "(chosen and rejected joined in one row); measure runs TRL's DPOTrainer step, which "
                                   "puts them in the batch.", "measure with pair_concat: batch.")
        if t.precision == "fp8":
            raise UnsupportedError("gpuplan measure", "FP8 training needs Transformer Engine / torchao recipes.",
                                   "measure the bf16 variant.")
    else:
        if scn.infer.weights not in ("bf16", "fp16", "fp32"):
            raise UnsupportedError("gpuplan measure", f"quantized weights ('{scn.infer.weights}') need their engine's kernels.",
                                   "measure the bf16 variant, or serve with your engine and compare its logs.")
        if scn.infer.engine != "hf":
            notes.append(f"inference measured with HF transformers' own decode loop, not {scn.infer.engine}: engines "
                         "preallocate KV pools (vLLM: gpu_memory_utilization of the card), so compare the weights + "
                         "KV part, not the device total.")
    return notes


class _Cuda:
    """What measure needs of the device: CUDA's synchronisation and allocator statistics."""
    name = "cuda"

    def __init__(self, torch):
        self.torch = torch

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def reset_peaks(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats()

    def release_cache(self) -> None:
        self.torch.cuda.empty_cache()

    def peaks(self) -> dict[str, int]:
        torch = self.torch
        free, total = torch.cuda.mem_get_info()
        return {"peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
                # context etc. = device used now - reserved now; the device peak = reserved peak + that
                "peak_device_used_bytes": int(torch.cuda.max_memory_reserved() + (total - free)
                                              - torch.cuda.memory_reserved()),
                "device_total_bytes": int(total)}


class _Cpu(_Cuda):
    """The same loops on the CPU (tests: the code path without a GPU); no allocator statistics."""
    name = "cpu"

    def sync(self) -> None:
        pass

    def reset_peaks(self) -> None:
        pass

    def release_cache(self) -> None:
        pass

    def peaks(self) -> dict[str, int]:
        return {}


# attn_implementation a measured model is built with, by train.attention: flash-attn is not assumed installed, so
# `flash` runs transformers' SDPA path (on Hopper with a recent cuDNN, torch's cuDNN kernel; estimate/
# attention_kernels.py). Rows of a device run record what ran (scripts/device_rows.py `measured_attention`).
ATTN_IMPLEMENTATION = {"flash": "sdpa", "sdpa": "sdpa", "eager": "eager"}


def _build_model(torch, scn, dtype, dev: _Cuda):
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise MissingExtraError("gpuplan measure", "trace", "transformers") from None
    from ..models import get_model
    spec = get_model(scn.model)
    cfg = dict(spec.config)
    mt = cfg.pop("model_type", spec.model_type)
    config = AutoConfig.for_model(mt, **cfg)
    kind = scn.train.attention if scn.is_training else "flash"
    with torch.device(dev.name):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=ATTN_IMPLEMENTATION[kind])
    # from_config builds a tied model's lm_head weight and frees it when it ties the embedding; the freed block would
    # stay cached and be read as reserve (a from_pretrained load never allocates it: docs/memory-reserve-replay.md)
    dev.release_cache()
    return model, spec, transformers.__version__


def _run_train(torch, dev: _Cuda, scn, steps: int, warmup: int, notes: list[str],
               ops: int = 0) -> dict[str, Any]:
    t = scn.train
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[t.precision]
    # HF Trainer-style mixed precision: fp32 trainable weights and states, autocast compute. A LoRA/QLoRA base is
    # frozen and loaded in the compute dtype (`from_pretrained(..., dtype=bfloat16)`), its adapters kept fp32 by
    # peft (LoraConfig/get_peft_model autocast_adapter_dtype=True), as gpuplan's memory model prices them.
    lora = t.method in ("lora", "qlora")
    param_dtype = torch.float32 if t.master_weights and not lora else dt
    use_autocast = t.master_weights and dt != torch.float32
    model, spec, _ = _build_model(torch, scn, param_dtype, dev)
    frozen_copy = _reference_copy(model) if _reference(scn) == "copy" else None   # before peft wraps the policy
    if t.method in ("lora", "qlora"):
        try:
            import peft
        except ImportError:
            raise MissingExtraError("gpuplan measure (LoRA)", "trace", "peft") from None
        if t.method == "qlora":
            raise UnsupportedError("gpuplan measure", "QLoRA needs bitsandbytes 4-bit loading of a checkpoint; random-weight "
                                   "4-bit quantisation is not wired in.", "measure the LoRA variant (same activations) "
                                   "and subtract the 16-bit vs 4-bit weight difference.")
        targets = "all-linear" if t.lora_targets == "all-linear" else list(t.lora_targets)
        model = peft.get_peft_model(model, peft.LoraConfig(r=t.lora_rank, lora_alpha=t.lora_alpha or 2 * t.lora_rank,
                                                           target_modules=targets))
    if t.recompute == "full":
        model.gradient_checkpointing_enable()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if t.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=t.optimizer_impl == "foreach", fused=t.optimizer_impl == "fused")
    elif t.optimizer == "adamw-8bit":
        try:
            import bitsandbytes as bnb
        except ImportError:
            raise MissingExtraError("gpuplan measure (8-bit AdamW)", "trace", "bitsandbytes") from None
        opt = bnb.optim.AdamW8bit(params, lr=1e-5)
    else:
        opt = torch.optim.SGD(params, lr=1e-5)
    rows = t.micro_batch * (2 if t.objective == "dpo" else 1)      # DPO: [chosen; rejected]
    ids = torch.randint(0, spec.vocab_size, (rows, t.seq_len), device=dev.name)

    def autocast():
        return torch.autocast(dev.name, dtype=dt, enabled=use_autocast)

    losses: list = []
    if t.objective == "dpo":
        compute_loss = _dpo_step(torch, scn, model, frozen_copy, ids, autocast, notes)
    else:
        def compute_loss():
            with autocast():
                return model(input_ids=ids, labels=ids).loss

    def step():
        loss = compute_loss()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    dev.reset_peaks()              # the first step allocates the optimizer states: its peak counts
    for _ in range(warmup):
        step()
    times = _timed(dev, step, steps)
    out = dev.peaks()
    st = statistics.median(times)
    # tokens per step as gpuplan counts them: the rows through the policy with gradients (a DPO pair is two)
    out.update(step_time_s=st, tokens_per_s_per_gpu=rows * t.seq_len / st, steps=steps, warmup=warmup,
               losses=[float(v) for v in losses])
    if ops:
        out["ops"] = _op_profile(torch, dev, step, ops)
    return out


def _reference(scn) -> str:
    """The DPO reference the scenario uses (copy | base | precomputed; 'none' for SFT), as the estimate reads it."""
    if scn.train.objective != "dpo":
        return "none"
    from ..estimate.posttrain import reference_kind
    return reference_kind(scn)


def _reference_copy(model):
    """TRL's frozen reference for full fine-tuning: a second model loaded from the same checkpoint with the policy's
    model_init_kwargs, so the same dtype (dpo_trainer.py L893-908), dropout off (L913-916), in eval mode and no
    gradients (accelerator.prepare_model(evaluation_mode=True), L936). Random weights here, so a copy of the policy's
    initial weights stands in for loading the checkpoint twice."""
    import copy
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


class _NoPhases:
    """The trace's phase tracker, unused by a real run."""
    def set_phase(self, name: str) -> None:
        pass


def _dpo_step(torch, scn, model, frozen_copy, ids, autocast, notes: list[str]) -> Callable[[], Any]:
    """TRL's DPOTrainer loss for one micro-step, TRL v1.9.0 (huggingface/trl, tag v1.9.0, commit 35def3ee)
    trl/trainer/dpo_trainer.py `_compute_loss` L1329-1655, run through the same code the fake-tensor trace uses
    (trace/_posttrain.dpo_loss): the policy forward over [chosen; rejected] in one batch (the collator pads all 2B
    sequences to the longest, L152-210; here every row is seq_len tokens, all completion), fp32 logits (accelerate's
    native AMP under TRL's bf16=True), selective_log_softmax, the reference forward under no_grad (a frozen copy;
    under LoRA the policy with adapters disabled, L1374-1382; none with precompute_ref_log_probs, whose log-probs
    are computed once before training, L959-963), the sigmoid loss (beta 0.1), and the logged metrics read back
    with .item() as TRL does. Returns a function giving the loss; the caller runs backward and the optimizer."""
    from ..trace import _posttrain as pt
    t = scn.train
    kind = _reference(scn)
    fp32_out = t.precision != "fp32"
    precomputed = None
    if kind == "precomputed":
        # _precompute_ref_logps: the initial model (adapters disabled under PEFT) over the data set, before training
        ref_model = None if t.method in ("lora", "qlora") else model
        precomputed = pt.dpo_reference_logps(model, ref_model, ids, autocast, fp32_out)[:2]
    ref = frozen_copy if kind == "copy" else None
    notes.append(f"dpo: TRL's DPOTrainer step ({pt.TRL} dpo_trainer.py _compute_loss), reference {kind}"
                 + (" (a frozen copy in the policy's dtype)" if kind == "copy" else
                    " (the policy with its adapters disabled)" if kind == "base" else
                    " (log-probs computed once before the timed steps)")
                 + f"; {ids.shape[0]} rows of {ids.shape[1]} tokens per micro-step (chosen and rejected), all "
                 "completion tokens, no padding; tokens/s counts both rows of each pair.")

    def compute_loss():
        return pt.dpo_loss(model, ref, ids, autocast, _NoPhases(), reference=kind, fp32_outputs=fp32_out,
                           precomputed=precomputed, sync_metrics=True)
    return compute_loss


def _timed(dev: _Cuda, fn: Callable[[], Any], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        dev.sync()
        times.append(time.perf_counter() - t0)
    return times


def _op_profile(torch, dev: _Cuda, fn: Callable[[], Any], top: int) -> dict[str, Any]:
    """One more call of `fn` under torch.profiler: wall time, the time the GPU was busy (the sum of its kernels'
    own times: one stream, so they do not overlap), and the `top` operators by device time. Wall well above busy
    means the host (Python, kernel launches) bounds the step."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.name == "cuda" else [])
    with profile(activities=acts) as prof:
        (wall,) = _timed(dev, fn, 1)
    # kernels (device-side events) only: an operator's own device time repeats its kernels' and would count twice,
    # and so would a profiler annotation listed among them
    kernels = [e for e in prof.key_averages()
               if "CUDA" in str(getattr(e, "device_type", "")) and not is_profiler_annotation(e.key)]

    def dev_us(e) -> float:
        return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) or 0.0)
    busy = sum(dev_us(e) for e in kernels) / 1e6
    rows = sorted(kernels, key=dev_us, reverse=True)[:top]
    return {"wall_s": wall, "gpu_busy_s": busy, "kernel_launches": int(sum(e.count for e in kernels)),
            "top": [{"op": e.key, "calls": int(e.count), "device_s": dev_us(e) / 1e6} for e in rows],
            "operators": _op_table(prof, top)}


def is_profiler_annotation(name: str) -> bool:
    """A range torch.profiler lists beside the kernels with a device time of its own that repeats theirs: a
    record_function range ('Optimizer.step#AdamW.step', which torch.optim opens around every step; 'ProfilerStep#N')
    or CUPTI's 'Command Buffer Full' marker."""
    return name.startswith(("Optimizer.", "ProfilerStep")) or "Command Buffer" in name


def _op_table(prof, top: int) -> str:
    """torch.profiler's own table of operators by device time (its column names vary by version)."""
    for key in ("self_device_time_total", "self_cuda_time_total", "self_cpu_time_total"):
        try:
            return prof.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=60)
        except (KeyError, AttributeError, ValueError, RuntimeError):
            continue
    return ""


def decode_steps(model, ids) -> tuple[Any, Any, list]:
    """(prefill, decode, cache): HF generate's two forwards, the prompt with its KV cache and one token on top of it,
    each greedy; `cache` holds the KV cache and the next token ids between calls (clear it to free them).
    scripts/trace_measure_reserve.py replays the same calls."""
    cache: list = []               # [(KV cache, next token ids)] of the batch being decoded

    def prefill():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache[:] = [(out.past_key_values, out.logits[:, -1:].argmax(-1))]

    def decode():
        past, nxt = cache[0]
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        cache[0] = (out.past_key_values, out.logits[:, -1:].argmax(-1))
    return prefill, decode, cache


def _run_infer(torch, dev: _Cuda, scn, notes: list[str], ops: int = 0) -> dict[str, Any]:
    i = scn.infer
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[i.weights]
    model, spec, _ = _build_model(torch, scn, dt, dev)
    model.eval()
    ids = torch.randint(0, spec.vocab_size, (i.concurrency, i.prompt_len), device=dev.name)
    n_out = min(i.output_len, 64)
    prefill, decode, cache = decode_steps(model, ids)

    with torch.inference_mode():
        prefill()                  # warm-up: the first calls load kernels and create library handles
        for _ in range(2):
            decode()
        cache.clear()              # the warm-up's KV cache is freed before the peaks are reset
        dev.reset_peaks()
        (ttft,) = _timed(dev, prefill, 1)
        times = _timed(dev, decode, n_out)
        res = dev.peaks()
        if ops:
            res["ops"] = _op_profile(torch, dev, decode, ops)
    tpot = statistics.median(times)
    res.update(ttft_s=ttft, tpot_s=tpot, output_tokens_per_s=i.concurrency / tpot, decode_steps=n_out)
    if n_out < i.output_len:
        notes.append(f"decoded {n_out} of {i.output_len} tokens: the KV cache at the end of a full run is larger.")
    return res


def predict(scn, estimate_fn: Callable[[Any], Any] | None = None) -> tuple[dict[str, Any] | None, str | None]:
    if estimate_fn is None:
        from ..pipeline import evaluate as estimate_fn
    e = estimate_fn(scn)
    m, p = e.memory, e.performance
    overhead = int(m.components.get("runtime_overhead", 0))
    return {"peak_bytes_per_gpu": int(m.peak_bytes_per_gpu), "peak_bytes_without_overhead": int(m.peak_bytes_per_gpu) - overhead,
            "runtime_overhead_bytes": overhead, "components": dict(m.components), "phase": m.phase,
            "step_time_s": p.step_time_s, "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
            "ttft_s": p.ttft_s, "tpot_s": p.tpot_s}, None


def measure(scn, *, steps: int = 3, warmup: int = 1, ops: int = 0,
            estimate_fn: Callable[[Any], Any] | None = None) -> MeasureResult:
    """Run the scenario on local GPU 0 and return measured vs predicted numbers; `ops` > 0 adds one profiled
    step (or decode step) with that many top operators by GPU time."""
    torch = require_cuda("gpuplan measure")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return measure_on(torch, _Cuda(torch), props.name, int(props.total_memory), scn, steps=steps, warmup=warmup,
                      ops=ops, estimate_fn=estimate_fn)


def measure_on(torch, dev: _Cuda, device_name: str, device_bytes: int | None, scn, *, steps: int = 3,
               warmup: int = 1, ops: int = 0, estimate_fn: Callable[[Any], Any] | None = None) -> MeasureResult:
    """measure() on a given device (`_Cuda`, or `_Cpu` for the tests: the same loops without a GPU)."""
    notes = _check_supported(scn)
    from .detect import match_catalog
    local_id, _ = match_catalog(device_name, device_bytes)
    pred_scn = scn
    if local_id and local_id != scn.hardware.gpu:
        pred_scn = scn.replace(hardware={"gpu": local_id})
        notes.append(f"scenario names {scn.hardware.gpu}; predicted for the local {local_id} instead.")
    elif not local_id:
        notes.append(f"'{device_name}' is not in the hardware catalog: predicted for the scenario's {scn.hardware.gpu}.")
    measured = (_run_train(torch, dev, scn, steps, warmup, notes, ops) if scn.is_training
                else _run_infer(torch, dev, scn, notes, ops))
    predicted, why = predict(pred_scn, estimate_fn)
    if why:
        notes.append(why)
    return MeasureResult(scenario=scn.model_dump(mode="json"), device_name=device_name, torch_version=torch.__version__,
                         measured=measured, predicted=predicted, notes=tuple(notes))

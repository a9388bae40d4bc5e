"""Explain one number of a plan: its formula, the inputs with where each comes from, and its error bar.

The number itself is always the one `pipeline.evaluate` returns (the same figure `gpuplan estimate` prints).
The formula is the mechanism behind it, written with this scenario's inputs; where the formula's arithmetic
can be replayed from those inputs it is, and the result is shown beside the pipeline's figure, with the gap
(terms the short formula leaves out, named by the estimator's notes) when there is one. The inputs are read
from the same specs and estimator helpers the pipeline uses (model config, GPU catalog row, price row,
calibration file), never typed in here.

Quantities: see QUANTITIES (e.g. memory.weights, memory.activations, speed.step_time, speed.tpot,
cost.usd_per_hour).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import InputError, close_matches
from .units import fmt_bytes, fmt_count, fmt_seconds

# where the constants come from (docs/model.md has every equation; these name the primary sources)
SRC_ZERO = "ZeRO: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models' §3"
SRC_TRACED = "fake-tensor traces of HF transformers (torch 2.13; gpuplan trace; docs/model.md §3)"
SRC_MEGATRON = "Megatron-LM megatron/training/theoretical_memory_usage.py"
SRC_LORA = "LoRA: Hu et al. 2021 (adapters of (in + out) x r per targeted linear)"
SRC_QLORA = "QLoRA: Dettmers et al. 2023 (NF4 4.5 bits, 4.127 with double quantization)"
SRC_KORTHIKANTI = "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models'"
SRC_KAPLAN = "Kaplan et al. 2020 §2.1 (forward FLOPs per token = 2N + attention)"
SRC_OPTIM = ("estimate/optim.py: per-matrix states (Muon momentum; GaLore projected moments + projector; SOAP "
             "preconditioners; Adafactor row/column factors), each cited there")
SRC_CALIBRATION = ("estimate/data/efficiency.json, fitted by scripts/calibrate_speed.py on published training and "
                   "serving runs (validation/)")


@dataclass
class Input:
    name: str
    value: str
    source: str


@dataclass
class Explanation:
    quantity: str
    title: str
    value: float | None
    shown: str                                   # the value as gpuplan prints it
    formula: list[str]
    inputs: list[Input]
    replayed: float | None = None                # the formula's arithmetic on the inputs, when it can be replayed
    gap_note: str = ""                           # what the pipeline's figure holds beyond the formula
    notes: list[str] = field(default_factory=list)
    error_bar: Any = None                        # estimate.uncertainty.Uncertainty
    scenario: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"quantity": self.quantity, "title": self.title, "value": self.value, "shown": self.shown,
                "formula": list(self.formula),
                "inputs": [{"name": i.name, "value": i.value, "source": i.source} for i in self.inputs],
                "replayed": self.replayed, "gap_note": self.gap_note or None, "notes": list(self.notes),
                "uncertainty": self.error_bar.to_json() if self.error_bar is not None else None,
                "scenario": self.scenario, "computed_by": "gpuplan.pipeline.evaluate"}


# ---- inputs shared by several quantities --------------------------------------------------------------

def _model_input(est) -> Input:
    m = est.model
    return Input("parameters (whole model)", f"{m.params_total:,} ({fmt_count(m.params_total)})",
                 f"counted from {m.name}'s config.json (models/; `gpuplan model {m.name}`)")


def _gpu_input(est) -> Input:
    g = est.gpu
    return Input("GPU memory per card (usable)", fmt_bytes(g.usable_memory_bytes),
                 f"{g.id}: {getattr(g, 'usable_memory_basis', '') or 'catalog'} (hardware/data/gpus.csv)")


def layout_text(s, gpu_id: str) -> str:
    """The GPUs and their layout in one phrase. An RL step split between a rollout engine and the trainer shows
    each group: its training layout is that of the training GPUs (the rest run the engine)."""
    p = s.parallel
    train = getattr(s, "train", None)
    rl = getattr(train, "rl", None) if train is not None else None
    shard = f" shard_group={p.shard_group} (x{p.replicas} replicas)" if p.replicas > 1 else ""
    if rl is not None and rl.placement == "split":
        rollout = rl.rollout_gpus
        trainers = s.hardware.count - rollout
        dp = max(1, trainers // (p.tp * p.pp * p.cp))
        return (f"{s.hardware.count}x {gpu_id}: {trainers} train (dp={dp} tp={p.tp} pp={p.pp} zero={p.zero}) + "
                f"{rollout} rollout ({rl.engine} tp={rl.rollout_tp} x{rollout // rl.rollout_tp})")
    return f"{s.hardware.count}x {gpu_id} · dp={s.dp} tp={p.tp} pp={p.pp} zero={p.zero}{shard}"


def train_settings(t) -> str:
    """A training block's settings in a few words. An RL step does not read train.seq_len: its sequences are the
    rollout's prompt + generated tokens (issue 20)."""
    seq = (f"{t.rl.prompts_per_step} prompts x {t.rl.group_size}, prompt {t.rl.prompt_len} + up to "
           f"{t.rl.max_new_tokens} new tokens" if t.rl is not None else f"seq {t.seq_len}")
    obj = f"{t.objective}, " if t.objective != "sft" else ""
    return f"{obj}{t.method}, {t.precision}, {t.optimizer}, {seq}, micro-batch {t.micro_batch}, recompute {t.recompute}"


def describe(est) -> str:
    """The plan in one line: model, task and its settings, GPUs, layout, framework."""
    s = est.scenario
    t = s.train
    what = (train_settings(t) if t else
            f"{s.infer.engine}, weights {s.infer.weights}, kv {s.infer.kv_cache}, {s.infer.concurrency} x "
            f"({s.infer.prompt_len} + {s.infer.output_len}) tokens")
    return (f"{est.model.name} · {s.task} ({what}) · {layout_text(s, est.gpu.id)}"
            + (f" · framework {s.framework}" if s.train else ""))


def _train_stage(est, stage: str | None = None):
    """The estimator's training setup of one pipeline stage (its own helper). With pp > 1 the pipeline
    reports the larger of the first and last stage; `_peak_stage` says which."""
    from .estimate.memory import _train_setup
    if stage is None:
        stage = "only" if est.scenario.parallel.pp == 1 else _peak_stage(est)
    return _train_setup(est.scenario, est.model, stage)


def _peak_stage(est) -> str:
    """'first' or 'last': the pipeline stage whose peak is the reported one (the estimator's own components)."""
    from .estimate.memory import _train_components
    peaks = {}
    for stage in ("first", "last"):
        phases, _ = _train_components(est.scenario, est.model, stage)
        peaks[stage] = max(sum(v for v in c.values()) for k, c in phases.items() if k != "_cpu")
    return max(peaks, key=lambda k: peaks[k])


def _state_source(scn) -> str:
    if scn.framework == "megatron":
        return SRC_MEGATRON
    if scn.framework == "deepspeed":
        return SRC_ZERO + " (K = 12)"
    return SRC_TRACED


def _shard_inputs(est, ts, divides: bool, what: str) -> list[Input]:
    p = est.scenario.parallel
    group = "shard_group x cp" if p.replicas > 1 else "dp x cp"
    return [Input(f"ZeRO stage, shard group n = {group}", f"stage {p.zero}, n = {ts.shard}"
                  + ("" if divides else f" ({what} not divided at this stage)"), SRC_ZERO)]


def _mem_value(est, key: str) -> float:
    return float(est.memory.components.get(key, 0))


def _mem_explanation(est, key: str, title: str, formula: list[str], inputs: list[Input], replayed: float | None,
                     gap: str = "") -> Explanation:
    mem = est.memory
    v = _mem_value(est, key)
    notes = [f"value at the peak phase ({mem.phase}); phases considered: "
             + ", ".join(f"{k} {fmt_bytes(b)}" for k, b in mem.phases.items())] if mem.phases else []
    notes += list(mem.notes)
    return Explanation(f"memory.{key}", title, v, fmt_bytes(v), formula, inputs, replayed, gap, notes,
                       mem.uncertainty, describe(est))


# ---- memory ----------------------------------------------------------------------------------------------

def _model_states(est, key: str) -> Explanation:
    """weights, gradients, optimizer_states of a training plan."""
    from .estimate.memory import _adapter_params_rank, _optimizer_state_bytes, state_bytes
    scn, ts = est.scenario, _train_stage(est)
    t, p = scn.train, scn.parallel
    n_rank = ts.rp.total + ts.untied_head
    inputs = [_model_input(est), Input("parameters on this GPU before ZeRO", f"{n_rank:,.0f}",
                                       "estimate/layout.py rank_params (tp divides matrices, pp the layers)")]
    divides = {"weights": p.zero >= 3, "gradients": p.zero >= 2, "optimizer_states": p.zero >= 1}[key]
    div = ts.shard if divides else 1
    if ts.peft:
        n_ad = _adapter_params_rank(ts)
        a_bytes = 4 if (t.master_weights or t.precision == "fp32") else ts.low
        inputs.append(Input(f"{t.method} adapter parameters on this GPU", f"{n_ad:,.0f} (rank {t.lora_rank}, "
                            f"targets {t.lora_targets})", SRC_LORA))
        inputs.append(Input("bytes per adapter element", f"{a_bytes}", "peft creates fp32 adapters under autocast "
                            "(traced); pure 16-bit trainers use the training dtype"))
        if key == "weights":
            from .dtypes import weight_format
            if t.method == "qlora":
                fmt = weight_format("nf4-dq" if t.qlora_double_quant else "nf4")
                quant = ts.rp.linear - ts.rp.lm_head
                inputs.append(Input("quantized linear parameters (lm_head stays 16-bit)", f"{quant:,.0f}",
                                    "bitsandbytes via transformers keeps lm_head in 16-bit"))
                inputs.append(Input("NF4 bits per parameter", f"{fmt.bits:g}", SRC_QLORA))
                base = quant * fmt.bits / 8 + (n_rank - quant) * ts.low
                formula = ["weights = quantized linears x bits/8 + other parameters x 2 bytes + adapters x "
                           "bytes per adapter element", "(÷ n with ZeRO-3)"]
            else:
                base = n_rank * ts.low
                formula = ["weights = frozen base x 2 bytes (16-bit) + adapters x bytes per adapter element",
                           "(÷ n with ZeRO-3)"]
            replay = (base + n_ad * a_bytes) / div
        else:
            per = a_bytes if key == "gradients" else _optimizer_state_bytes(t.optimizer, a_bytes)
            inputs.append(Input(f"{key.replace('_', ' ')} bytes per adapter parameter", f"{per:g}",
                                "AdamW: two states of the adapter dtype" if key != "gradients" else "one gradient "
                                "of the adapter dtype"))
            formula = [f"{key} = adapter parameters x {per:g} bytes" + (" ÷ n" if divides else ""),
                       "the frozen base has no gradients or optimizer states"]
            replay = n_ad * per / div
            if key == "optimizer_states":
                formula, replay = _shaped_optimizer(est, ts, inputs, formula, replay, div, divides)
    else:
        sb = state_bytes(scn)
        per = {"weights": sb.weight, "gradients": sb.grad, "optimizer_states": sb.optim}[key]
        label = {"weights": "bytes per parameter (weights)", "gradients": "bytes per parameter (gradients)",
                 "optimizer_states": "bytes per parameter (optimizer)"}[key]
        inputs.append(Input(label, f"{per:g}", _state_source(scn)))
        setup = (f"{scn.framework}, {t.precision}" + (" with fp32 master weights" if t.master_weights else "")
                 + f", {t.optimizer}")
        formula = [f"{key} = parameters on this GPU x {per:g} bytes" + (" ÷ n (ZeRO shard group)" if divides else ""),
                   f"bytes per parameter for {setup}: weights {sb.weight:g} + gradients {sb.grad:g} + optimizer "
                   f"{sb.optim:g} = {sb.weight + sb.grad + sb.optim:g}"]
        replay = n_rank * per / div
        if key == "optimizer_states":
            formula, replay = _shaped_optimizer(est, ts, inputs, formula, replay, div, divides)
    inputs += _shard_inputs(est, ts, divides, key)
    if p.offload != "none" and key in ("optimizer_states", "weights", "gradients"):
        inputs.append(Input("offload", p.offload, "ZeRO-Offload / FSDP CPUOffload: moved to host memory "
                            "(cpu_bytes)"))
    value = _mem_value(est, key)
    gap = ""
    if not math.isclose(value, replay, rel_tol=1e-6, abs_tol=1024):
        gap = _state_gap(est, key, value, replay)
    titles = {"weights": "Weights held on each GPU", "gradients": "Gradients held on each GPU",
              "optimizer_states": "Optimizer states held on each GPU"}
    return _mem_explanation(est, key, titles[key], formula, inputs, replay, gap)


def _shaped_optimizer(est, ts, inputs: list[Input], formula: list[str], replay: float, div: float,
                      divides: bool) -> tuple[list[str], float]:
    """Optimizers whose state depends on each matrix's shape (Muon, GaLore, SOAP, Adafactor): their states over
    this GPU's tensors, from the function the memory estimator uses, added to the per-parameter part."""
    from .estimate import optim as opt
    from .estimate.memory import _shaped_states, rank_tensors
    t = est.scenario.train
    if t.optimizer not in opt.SHAPED:
        return formula, replay
    shaped, _ = _shaped_states(ts, rank_tensors(est.scenario, ts.model, ts.stage))
    inputs.append(Input(f"{t.optimizer} states of this GPU's trainable tensors", fmt_bytes(shaped), SRC_OPTIM))
    formula = [formula[0] + f" + {t.optimizer}'s per-matrix states" + (" ÷ n" if divides else "")] + formula[1:]
    return formula, replay + shaped / div


def _weight_terms(est) -> list[tuple[str, float]]:
    """The weight-sized terms the estimator adds at the peak phase beyond the (sharded) weights themselves:
    autocast's 16-bit weight copies (start of backward) and FSDP's unsharded root module (embedding, final
    norm, lm_head; forward to backward), from the estimator's own helpers."""
    from .estimate.memory import _autocast, _shard_buffers
    ts, phase = _train_stage(est), est.memory.phase
    _, copies = _autocast(ts, [])
    _, root = _shard_buffers(ts)
    terms = []
    if phase == "backward" and copies:
        terms.append(("autocast's 16-bit copies of the matmul weights", copies))
    if phase in ("backward", "backward_end") and root:
        terms.append(("FSDP's unsharded root module (embedding, final norm, lm_head in 16-bit)", root))
    return terms


def _state_gap(est, key: str, value: float, replay: float) -> str:
    diff = value - replay
    phase = est.memory.phase
    if key == "weights" and not est.scenario.train.method in ("lora", "qlora"):
        terms = _weight_terms(est)
        if terms and math.isclose(sum(b for _, b in terms), diff, rel_tol=1e-6, abs_tol=1024):
            return (f"at {phase} the weights also hold " + " and ".join(f"{name} ({fmt_bytes(b)})" for name, b in terms)
                    + ".")
    why = {"weights": "at this phase the weights also hold autocast's 16-bit copies of the matmul weights, "
                      "FSDP's unsharded root module or pipeline-held shards (see the notes)",
           "gradients": "the peak phase holds only the gradients alive then: none yet at the start of backward "
                        "unless micro-batches accumulate; all of them after backward and at the optimizer step",
           "optimizer_states": "states are offloaded or paged, or not yet created at this phase"}[key]
    t, p = est.scenario.train, est.scenario.parallel
    if key == "optimizer_states" and (p.offload != "none" or t.paged_optimizer):
        why = (f"offload={p.offload} moves the optimizer states (and the fp32 master copy) to host memory: "
               f"{fmt_bytes(est.memory.cpu_bytes)} of host memory in all (memory.cpu_bytes)" if p.offload != "none"
               else "paged optimizer states live in CUDA managed memory, outside PyTorch's allocations")
    return f"the pipeline's figure differs by {'+' if diff >= 0 else '-'}{fmt_bytes(abs(diff))} at {phase}: {why}."


def _inference_weights(est) -> Explanation:
    from .dtypes import weight_format
    from .estimate.layout import rank_params
    scn = est.scenario
    inf, p = scn.infer, scn.parallel
    fmt = weight_format(inf.weights)
    rp = rank_params(est.model, tp=p.tp, pp=p.pp, ep=p.ep, stage="only" if p.pp == 1 else "first")
    inputs = [_model_input(est), Input("parameters on this GPU (tp/pp/ep split)", f"{rp.total:,.0f}",
                                       "estimate/layout.py rank_params")]
    inputs.append(Input(f"bits per parameter of {inf.weights}", f"{fmt.bits:g}"
                        + (" on quantized linears; embeddings and lm_head 16-bit" if fmt.scope == "linear" else ""),
                        "dtypes.py weight formats (reference/inference-notes.md: GPTQ/AWQ g128 4.156, GGUF file "
                        "averages)"))
    if fmt.scope == "linear":
        quant = rp.linear - rp.lm_head
        formula = ["weights = quantized linears x bits/8 + other parameters x 2 bytes"]
        replay = quant * fmt.bits / 8 + (rp.total - quant) * 2
    else:
        formula = ["weights = parameters on this GPU x bits/8"]
        replay = rp.total * fmt.bits / 8
    value = _mem_value(est, "weights")
    gap = "" if math.isclose(value, replay, rel_tol=1e-6, abs_tol=1024) else (
        f"the pipeline's figure is the largest pipeline stage (or the GPU layers of llama.cpp -ngl): "
        f"{fmt_bytes(value)} against {fmt_bytes(replay)} for the first stage.")
    return _mem_explanation(est, "weights", "Weights held on each GPU (serving)", formula, inputs, replay, gap)


def _weights(est) -> Explanation:
    return _model_states(est, "weights") if est.scenario.is_training else _inference_weights(est)


def _training_only(key: str) -> Callable[[Any], Explanation]:
    def explain_it(est) -> Explanation:
        if not est.scenario.is_training:
            return _mem_explanation(est, key, f"{key.replace('_', ' ').capitalize()} (serving holds none)",
                                    [f"serving keeps no {key.replace('_', ' ')}: 0 bytes"], [], 0.0)
        return _model_states(est, key)
    return explain_it


def _activations(est) -> Explanation:
    scn, m = est.scenario, est.model
    value = _mem_value(est, "activations")
    h, a, kv, d, i, L = m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.intermediate_size, m.num_layers
    if not scn.is_training:
        inf = scn.infer
        formula = ["serving activations: the engine's start-up profile run (vLLM/SGLang: a forward over the "
                   "step budget, (4h + 3i/tp) x 2 bytes per token, and the sampler over max_num_seqs; TRT-LLM: one "
                   "context step of its own max_num_tokens, 4h x 2 bytes per token plus the dense MLP or the fused "
                   "MoE's workspace over every attention-DP rank's tokens, no sampler batch) or the "
                   "prefill of the whole batch (HF generate)"]
        inputs = [Input("hidden h / MLP intermediate i", f"{h:,} / {i:,}", "the model's config.json"),
                  Input("engine", inf.engine, "docs/model.md §4 (vLLM V1 profile_run)")]
        return _mem_explanation(est, "activations", "Activation memory while serving", formula, inputs, None)
    t, p = scn.train, scn.parallel
    tokens = t.micro_batch * t.seq_len / p.cp
    ref = 16 * h + 4 * a * d + 4 * kv * d + 8 * i + 4 * a
    layers = math.ceil(L / p.pp)
    inputs = [Input("h, a, kv, d, i (hidden, heads, KV heads, head dim, MLP)",
                    f"h={h:,}, a={a}, kv={kv}, d={d}, i={i:,}", "the model's config.json"),
              Input("tokens per micro-batch (micro_batch x seq_len ÷ cp)", f"{tokens:,.0f}",
                    "the scenario"),
              Input("layers on this GPU (÷ pp)", f"{layers}", "the model's config.json, estimate/layout.py"),
              Input("recompute / attention / tp", f"{t.recompute} / {t.attention} / tp={p.tp}", "the scenario")]
    if t.recompute == "full":
        formula = ["full recompute keeps each layer's input: 2h bytes per token per layer (4h with an fp32 "
                   "residual) + one layer's working set while it is recomputed"]
        replay = 2 * h * tokens * layers
    else:
        formula = ["reference (HF Llama family, pure 16-bit, flash/SDPA, no recompute), bytes per token per layer:",
                   "  16h + 4·a·d + 4·kv·d + 8i + 4a   (norms' fp32 copies, q/k/v and gate/up inputs, q, k, v, "
                   "attention output, log-sum-exp, gate/act/up, down_proj input)",
                   f"  = {ref:,.0f} bytes x {tokens:,.0f} tokens x {layers} layers" + (f" ÷ tp={p.tp}" if p.tp > 1
                                                                                         else ""),
                   "gpuplan derives the saved tensors one by one for the model's family and framework "
                   "(estimate/activations.py), so its figure differs where the reference does not apply"]
        replay = ref * tokens * layers / p.tp
    src = SRC_TRACED + "; Megatron profile: " + SRC_KORTHIKANTI
    inputs.append(Input("bytes per saved element", "per tensor: fp32 norm copies, 16-bit activations", src))
    if t.master_weights and t.precision != "fp32":
        formula.append("with fp32 master weights the residual stream is fp32: norms keep 8h each and every consumer "
                       "casts its input (3 copies for q/k/v, 2 for gate/up)")
    gap = ""
    if value == 0:
        gap = (f"at the peak phase ({est.memory.phase}) no activations are alive: the peak comes after backward, "
               "when gradients, optimizer states and the step's temporaries fill the memory instead.")
    elif not math.isclose(value, replay, rel_tol=0.02):
        gap = (f"the pipeline's figure ({fmt_bytes(value)}) differs from the reference formula "
               f"({fmt_bytes(replay)}) by {100 * (value / replay - 1):+.0f} %: the model family's own tensors, the "
               "precision set-up, pipeline micro-batches in flight and recompute policy (docs/model.md §3).")
    return _mem_explanation(est, "activations", "Activations saved for backward", formula, inputs, replay, gap)


def _logits(est) -> Explanation:
    scn, m = est.scenario, est.model
    value = _mem_value(est, "logits")
    if scn.is_training:
        t = scn.train
        tokens = t.micro_batch * t.seq_len / scn.parallel.cp
        formula = ["loss block at the start of backward (HF): 12 bytes x vocabulary x tokens (fp32 log-softmax, its "
                   "gradient and the gradient into the 16-bit logits)", f"  = 12 x {m.vocab_size:,} x {tokens:,.0f}"]
        replay = 12.0 * m.vocab_size * tokens
        inputs = [Input("vocabulary V", f"{m.vocab_size:,}", "the model's config.json"),
                  Input("tokens per micro-batch", f"{tokens:,.0f}", "the scenario"),
                  Input("bytes per logit", "12", SRC_TRACED + " (Megatron's fused cross-entropy: 6 / tp; torchtitan's "
                        "loss parallel with TP: 16 / tp, docs/memory-torchtitan.md)")]
    else:
        seqs = scn.infer.concurrency
        formula = ["serving keeps fp32 logits of the last position only: 4 bytes x vocabulary x sequences",
                   f"  = 4 x {m.vocab_size:,} x {seqs}"]
        replay = 4.0 * m.vocab_size * seqs
        inputs = [Input("vocabulary V", f"{m.vocab_size:,}", "the model's config.json"),
                  Input("sequences decoding at once", f"{seqs}", "the scenario (infer.concurrency)")]
    gap = "" if math.isclose(value, replay, rel_tol=0.02) else (
        f"the peak phase ({est.memory.phase}) holds {fmt_bytes(value)} of logits (the loss block is only alive at "
        "the start of backward; chunked or fused losses keep less)." if scn.is_training else
        f"the peak phase ({est.memory.phase}) holds {fmt_bytes(value)} of logits: {scn.infer.engine} counts them "
        "inside its activations (vLLM/SGLang: the start-up profile's sampler; TRT-LLM: its profile's last "
        "positions; llama.cpp: its compute "
        "buffers; HF generate: prefill) - see memory.activations.")
    return _mem_explanation(est, "logits", "Logits and the loss block", formula, inputs, replay, gap)


def _kv_cache(est) -> Explanation:
    scn, m = est.scenario, est.model
    if scn.is_training:
        return _mem_explanation(est, "kv_cache", "KV cache (training keeps none)",
                                ["training keeps no KV cache: 0 bytes"], [], 0.0)
    from .dtypes import kv_bytes
    from .estimate.memory import _kv_per_token_rank
    inf, p = scn.infer, scn.parallel
    per_token = _kv_per_token_rank(m, inf.kv_cache, p.tp, p.pp)
    block = 16 if inf.engine in ("vllm", "sglang", "trtllm") else 1
    ctx = inf.prompt_len + inf.output_len
    tokens = math.ceil(ctx / block) * block
    attn_dp = min(scn.dp, p.ep) if p.ep > 1 else 1
    seqs = math.ceil(inf.concurrency / attn_dp)
    heads = max(1, m.num_kv_heads // p.tp)
    formula = ["KV cache = 2 (K and V) x layers x KV heads on this GPU x head dim x bytes per element x tokens per "
               "sequence x sequences" if not m.is_mla else
               "MLA latent cache = layers x (kv_lora_rank + rope dim) x bytes x tokens x sequences (replicated on "
               "every TP rank)",
               f"  = {per_token:,.0f} bytes per token on this GPU x {tokens:,} tokens x {seqs} sequences"]
    inputs = [Input("layers L, KV heads, head dim", f"L={m.num_layers}, kv={m.num_kv_heads} ({heads} on this GPU), "
                    f"d={m.head_dim}", "the model's config.json"),
              Input(f"bytes per element of {inf.kv_cache}", f"{kv_bytes(inf.kv_cache):g}", "dtypes.py"),
              Input("tokens per sequence (prompt + output" + (", rounded up to 16-token blocks)" if block > 1 else ")"),
                    f"{tokens:,}", "vLLM/SGLang/TRT-LLM allocate 16-token blocks" if block > 1 else "the scenario"),
              Input("sequences at once", f"{seqs}", "the scenario (infer.concurrency)")]
    replay = per_token * tokens * seqs
    value = _mem_value(est, "kv_cache")
    gap = "" if math.isclose(value, replay, rel_tol=1e-6, abs_tol=1024) else (
        "the pipeline's figure differs: sliding-window layers (HF StaticCache caps them at the window) or "
        "llama.cpp layers kept in host memory.")
    lim = est.memory.limits
    if lim.get("kv_pool_bytes") is not None:
        inputs.append(Input("KV pool the engine reserves", f"{fmt_bytes(lim['kv_pool_bytes'])} "
                            f"({lim.get('kv_tokens', 0):,} tokens, up to {lim.get('max_concurrency', 0):,} "
                            "such sequences)", "gpu_memory_utilization x capacity − weights − profile peak − CUDA "
                                               "graphs − overhead (docs/model.md §4)"))
    return _mem_explanation(est, "kv_cache", "KV cache this workload needs on each GPU", formula, inputs, replay, gap)


def _runtime_overhead(est) -> Explanation:
    from .estimate.memory import Overhead
    o = Overhead()
    formula = ["runtime overhead = CUDA context + cuBLAS/attention workspaces + NCCL buffers (when the GPU has "
               "peers) + the caching allocator's reserve (5 % of the allocated peak; serving: of its transient part)"]
    inputs = [Input("CUDA context", fmt_bytes(o.cuda_context), "300-600 MiB on Ampere/Hopper with lazy module "
                    "loading (CUDA 11.7+), docs/model.md §5"),
              Input("workspaces", fmt_bytes(o.workspaces), "cuBLAS(Lt) workspace and attention scratch"),
              Input("NCCL buffers", fmt_bytes(o.nccl_per_peer_group), "NCCL channel buffers per peer group"),
              Input("allocator reserve", f"{o.fragmentation:.0%} of allocated", "caching-allocator fragmentation, "
                    "docs/model.md §5")]
    if est.scenario.overhead_bytes is not None:
        inputs.append(Input("overhead_bytes (scenario)", fmt_bytes(est.scenario.overhead_bytes), "the scenario"))
    elif est.scenario.is_training and est.memory.phase == "backward":
        from .estimate.memory import stranded_logits_bytes, stranded_segments_bytes
        loss_stage = "only" if est.scenario.parallel.pp == 1 else "last"
        stranded = stranded_logits_bytes(est.scenario, est.model, loss_stage)
        if stranded:
            formula.append("+ the freed 16-bit logits block the caching allocator keeps reserved through the loss "
                           "backward (2 bytes x vocabulary per rank x tokens)")
            inputs.append(Input("stranded 16-bit logits", fmt_bytes(stranded), "the loss frees the 16-bit logits before "
                                "backward; fp32 requests twice their size cannot reuse the block "
                                "(docs/memory-torchtitan.md, scripts/trace_loss_block.py)"))
        segments = stranded_segments_bytes(est.scenario, est.model, loss_stage)
        if segments:
            formula.append("+ cached segments the loss block cannot use: one layer's forward working set under full "
                           "recompute, FSDP1's second all-gather unit (all of it at most the headroom)")
            inputs.append(Input("stranded segments", fmt_bytes(segments), "CUDACachingAllocator never merges "
                                "segments and reuses a block only on its own stream "
                                "(docs/finetune-memory-heldout.md, scripts/trace_step_reserve.py)"))
    return _mem_explanation(est, "runtime_overhead", "Memory outside PyTorch's allocations", formula, inputs, None)


def _temporary(est) -> Explanation:
    formula = ["temporaries alive at the peak phase: the foreach optimizer's parameter-sized buffer at the step "
               "(fused: none), ZeRO-3/FSDP all-gather buffers (two layers in 16-bit), DeepSpeed buckets, QLoRA's "
               "dequantized layer, serving's CUDA graphs"]
    inputs = [Input("peak phase", est.memory.phase, "estimate/memory.py (the largest phase is the peak)")]
    if est.scenario.is_training:
        from .estimate.memory import state_bytes
        sb = state_bytes(est.scenario)
        inputs.append(Input("optimizer-step temporary per parameter", f"{sb.optim_temp:g} bytes (optimizer_impl "
                            f"{est.scenario.train.optimizer_impl})", "PyTorch foreach AdamW (DESIGN §4, traced)"))
    return _mem_explanation(est, "temporary", "Temporary buffers", formula, inputs, None)


def _peak(est) -> Explanation:
    mem = est.memory
    comps = {k: v for k, v in mem.components.items() if v}
    formula = [f"peak = the largest phase ({', '.join(mem.phases) or mem.phase}); at {mem.phase}:",
               "  " + " + ".join(comps) + " = " + fmt_bytes(sum(comps.values()))]
    inputs = [Input(k, fmt_bytes(v), "the pipeline's breakdown at the peak phase; each one: `gpuplan explain ... "
                                     "memory.<component>`") for k, v in comps.items()]
    inputs.append(_gpu_input(est))
    ex = _mem_explanation(est, "peak", "Peak memory per GPU", formula, inputs, float(sum(comps.values())))
    ex.value, ex.shown = float(mem.peak_bytes_per_gpu), fmt_bytes(mem.peak_bytes_per_gpu)
    ex.formula.append(f"against {fmt_bytes(mem.capacity_bytes_per_gpu)} usable: "
                      f"{'fits' if mem.fits else 'does NOT fit'} (headroom {fmt_bytes(mem.headroom_bytes)})")
    return ex


# ---- speed -----------------------------------------------------------------------------------------------

def _speed_inputs(est) -> list[Input]:
    from .estimate.speed import load_efficiency
    g = est.gpu
    P = load_efficiency()
    fam = g.family if g.family in P["matmul"] else "default"
    dtype = est.scenario.train.precision if est.scenario.train else "bf16"
    eff = P["matmul"][fam].get(dtype if dtype in P["matmul"][fam] else "bf16")
    return [Input(f"{g.id} dense peak ({dtype})", f"{g.peak_flops_per_s.get(dtype, 0) / 1e12:,.1f} TFLOP/s",
                  f"{g.source_url} (retrieved {g.retrieved})"),
            Input(f"{g.id} memory bandwidth", f"{g.mem_bandwidth_bytes_per_s / 1e12:.2f} TB/s",
                  f"{g.source_url}"),
            Input(f"achieved share of peak on large matmuls ({fam}, {dtype})", f"{eff:.3f}", SRC_CALIBRATION),
            Input("clock factor (sustained vs boost clock)", f"{(est.performance.details or {}).get('clock_factor')}",
                  SRC_CALIBRATION)] + _elementwise_inputs(est)


def _elementwise_inputs(est) -> list[Input]:
    """How the stack runs its norms/RoPE/activations: their HBM bytes per token per layer and the bandwidth share
    those kernels were measured to reach."""
    d = est.performance.details or {}
    if "elementwise_kernels" not in d:
        return []
    return [Input(f"element-wise kernels ({d['elementwise_kernels']}): bytes per token per layer (fwd + bwd, "
                  f"2-byte activations) at a share of HBM bandwidth",
                  f"{d['elementwise_bytes_per_token_layer']:,.0f} B at {d['elementwise_bandwidth_share']}",
                  "estimate/elementwise.py (eager: traced aten ops; compiled/fused: fused-region I/O; bandwidth "
                  "share measured on an H200, estimate/data/elementwise_bandwidth.csv; docs/speed.md §2.3.1)")]


def _perf_explanation(est, quantity: str, title: str, value: float | None, shown: str, formula: list[str],
                      inputs: list[Input], replayed: float | None, gap: str = "") -> Explanation:
    return Explanation(quantity, title, value, shown, formula, inputs, replayed, gap,
                       list(est.performance.notes), est.performance.uncertainty, describe(est))


def _needs(est, training: bool, quantity: str) -> None:
    if est.scenario.is_training != training:
        other = "a training or fine-tuning" if training else "a serving (task: infer)"
        raise InputError(f"explain {quantity}", f"applies to {other} scenario; this one is task "
                         f"{est.scenario.task}.", "pick a quantity of this task (gpuplan explain --list).")


def _step_time(est) -> Explanation:
    _needs(est, True, "speed.step_time")
    perf = est.performance
    b = perf.breakdown
    parts = ("compute", "host_wait", "exposed_comm", "bubble", "optimizer", "offload")
    m = (perf.details or {}).get("microbatches")
    formula = ["step time = m x (compute + exposed communication per micro-batch) + pipeline bubble + data-parallel "
               "reduction + optimizer step + offload copies (all per optimizer step below); an eager HF micro-batch "
               "lasts at least its host issue time (host_wait: the excess, docs/speed.md §2.12)",
               "  compute: each matmul's FLOPs ÷ (peak x achieved share for its size) + attention + memory-bound "
               "element-wise passes",
               "  = " + " + ".join(f"{k} {fmt_seconds(b.get(k, 0.0))}" for k in parts)]
    inputs = [Input("micro-batches per step m", f"{m}", "global_batch ÷ (micro_batch x dp)"),
              Input("tokens per step", f"{(perf.details or {}).get('tokens_per_step', 0):,}", "the scenario")]
    inputs += _speed_inputs(est)
    inputs += [Input(f"breakdown: {k}", fmt_seconds(v), "pipeline.evaluate (estimate/speed.py)")
               for k, v in b.items() if k not in parts and v]
    replay = sum(b.get(k, 0.0) for k in parts)
    return _perf_explanation(est, "speed.step_time", "Training step time", perf.step_time_s,
                             fmt_seconds(perf.step_time_s), formula, inputs, replay)


def _mfu(est) -> Explanation:
    _needs(est, True, "speed.mfu")
    from .estimate.flops import attention_span, training_flops_per_token
    from .estimate.speed import peak_flops
    scn, perf = est.scenario, est.performance
    t = scn.train
    fl = training_flops_per_token(est.model, attention_span(t), "none", t.method, t.lora_rank)
    dtype = "fp32" if t.precision == "fp32" else ("fp8" if t.precision == "fp8" else "bf16")
    peak = peak_flops(est.gpu, dtype)
    formula = ["MFU = model FLOPs per token x tokens/s per GPU ÷ the GPU's dense peak",
               "model FLOPs per token = 3 x (2N + attention) for full training (6N + 3A); LoRA: 2·2N + 3A + 6·N_adapter"
               " (recomputation not counted: that is HFU)",
               f"  = {fl.model:.4g} x {_count(perf.tokens_per_s_per_gpu)} ÷ {peak:.4g}"]
    inputs = [_model_input(est),
              Input("model FLOPs per trained token", f"{fl.model:.4g}", SRC_KAPLAN + "; estimate/flops.py"),
              Input("tokens/s per GPU", _count(perf.tokens_per_s_per_gpu), "pipeline.evaluate: tokens per step ÷ "
                    "step time ÷ GPUs (`gpuplan explain ... speed.step_time`)"),
              Input(f"dense peak ({dtype}, as the speed engine uses it)", f"{peak / 1e12:,.1f} TFLOP/s",
                    f"{est.gpu.source_url} (GeForce: the fp32-accumulate rate)")]
    # no figure (an RL step whose rollout cannot run has no step time): nothing to replay
    replay = fl.model * perf.tokens_per_s_per_gpu / peak if perf.tokens_per_s_per_gpu is not None else None
    gap = "" if replay is None or math.isclose(replay, perf.mfu or 0, rel_tol=1e-3) else (
        "the speed engine counts the model FLOPs with the recompute shares and the peak of the attention dtype it "
        "runs (estimate/speed.py); the short formula above does not.")
    return _perf_explanation(est, "speed.mfu", "Model FLOPs utilisation", perf.mfu,
                             "-" if perf.mfu is None else f"{100 * perf.mfu:.1f} %",
                             formula, inputs, replay, gap)


def _tokens_per_s(est) -> Explanation:
    _needs(est, True, "speed.tokens_per_s")
    perf, scn = est.performance, est.scenario
    tok = (perf.details or {}).get("tokens_per_step", 0)
    formula = ["tokens/s per GPU = tokens per step ÷ step time ÷ GPUs",
               f"  = {tok:,} ÷ {fmt_seconds(perf.step_time_s)} ÷ {scn.hardware.count}"]
    inputs = [Input("tokens per step", f"{tok:,}", "micro_batch x micro-batches x dp x seq_len"),
              Input("step time", fmt_seconds(perf.step_time_s), "`gpuplan explain ... speed.step_time`")]
    replay = tok / perf.step_time_s / scn.hardware.count if perf.step_time_s else None
    return _perf_explanation(est, "speed.tokens_per_s", "Training tokens per second per GPU",
                             perf.tokens_per_s_per_gpu, _count(perf.tokens_per_s_per_gpu), formula, inputs, replay)


def _count(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _tpot(est) -> Explanation:
    _needs(est, False, "speed.tpot")
    from .estimate.speed import weight_bytes
    perf, scn = est.performance, est.scenario
    b = perf.breakdown
    wb = weight_bytes(est.model, scn.infer.weights)
    formula = ["decode step (one token for every running sequence) = max(bytes read ÷ (bandwidth x η), "
               "FLOPs ÷ (peak x η)) + tensor-parallel all-reduces + the engine's fixed per-step cost",
               "  = max(memory " + fmt_seconds(b.get("decode_memory")) + ", compute "
               + fmt_seconds(b.get("decode_compute")) + ") + tp_comm " + fmt_seconds(b.get("tp_comm", 0.0))
               + " + ep_comm " + fmt_seconds(b.get("ep_comm", 0.0)) + " + overhead " + fmt_seconds(b.get("overhead"))]
    inputs = [Input("weight bytes read per step (whole model)", fmt_bytes(wb["read"]),
                    "estimate/speed.py weight_bytes at the real format (embedding rows not read)"),
              Input("KV bytes read per step", "the running sequences' cache", "estimate/speed.py"),
              Input("sequences decoding at once", f"{(perf.details or {}).get('batch')}",
                    f"limited by {(perf.details or {}).get('limited_by')}"),
              Input("decode bound", f"{(perf.details or {}).get('decode_bound')}", "the larger of the two terms")]
    inputs += _speed_inputs(est)[1:]
    inputs.append(Input(f"{scn.infer.engine} fixed cost per step", fmt_seconds(b.get("overhead")), SRC_CALIBRATION))
    replay = max(b.get("decode_memory", 0.0), b.get("decode_compute", 0.0)) + b.get("tp_comm", 0.0) + \
        b.get("ep_comm", 0.0) + b.get("overhead", 0.0)
    gap = "" if math.isclose(replay, perf.tpot_s or 0, rel_tol=0.01) else _tpot_gap(perf, replay)
    return _perf_explanation(est, "speed.tpot", "Time per output token (decode)", perf.tpot_s,
                             fmt_seconds(perf.tpot_s), formula, inputs, replay, gap)


def _tpot_gap(perf: Any, replay: float) -> str:
    """What TPOT holds beyond the formula's decode step: the terms the formula leaves out of the pipeline's step,
    the tokens one step yields under speculative decoding, and the share of new requests' prefills."""
    tpot = perf.tpot_s or 0.0
    step = perf.breakdown.get("decode_step") or replay
    spec = (perf.details or {}).get("speculative") or {}
    k = spec.get("tokens_per_step") or 1.0
    text = f"TPOT ({fmt_seconds(tpot)}) is the mean time per output token of a request: the decode step ({fmt_seconds(step)}"
    if not math.isclose(step, replay, rel_tol=0.01):
        text += (f"; the formula above leaves out {fmt_seconds(step - replay)} of it: the sampler, element-wise "
                 "kernels and the blend of the weight and KV rooflines, among others")
    text += ")"
    if k != 1.0:
        text += (f" yields {k:.2f} tokens per sequence under speculative decoding ({spec.get('method')}, "
                 f"k={spec.get('num_tokens')}), {fmt_seconds(step / k)} per token,")
    return text + (f" and each step carries a share of new requests' prefills (batch ÷ output length x one prompt's "
                   f"prefill{', also divided by the tokens per step' if k != 1.0 else ''}), "
                   f"{fmt_seconds(tpot - step / k)} per token here.")


def _ttft(est) -> Explanation:
    _needs(est, False, "speed.ttft")
    perf = est.performance
    formula = ["TTFT = queueing behind the running batch + the prompt's prefill (compute-bound above a few hundred "
               "tokens: matmul FLOPs ÷ (peak x η) + attention)",
               f"  prefill of this batch: {fmt_seconds(perf.breakdown.get('prefill'))}"]
    inputs = [Input("prompt tokens", f"{est.scenario.infer.prompt_len:,}", "the scenario")] + _speed_inputs(est)
    fe = perf.breakdown.get("frontend")
    if fe:
        formula.append(f"  + the engine's front end per request (HTTP, tokenisation, hand-off, first chunk): "
                       f"{fmt_seconds(fe)}")
        inputs.append(Input(f"{est.scenario.infer.engine} front-end latency per request", fmt_seconds(fe),
                            "estimate/engine_host.py (cited light-load measurement)"))
    return _perf_explanation(est, "speed.ttft", "Time to first token", perf.ttft_s, fmt_seconds(perf.ttft_s),
                             formula, inputs, None)


# ---- cost ------------------------------------------------------------------------------------------------

def _cost_per_hour(est) -> Explanation:
    c = est.cost
    rent = (c.details or {}).get("rent")
    if not rent:
        formula = ["no rental offering in the catalog for this GPU and count: the hourly figure is the cost of "
                   "owning (capex amortised + power)"]
        own = (c.details or {}).get("own") or {}
        inputs = [Input(k, str(v), "estimate/cost.py (hardware catalog launch price)") for k, v in own.items()
                  if k in ("capex_usd_per_gpu", "capex_basis", "years", "residual_fraction", "power_basis")]
        return Explanation("cost.usd_per_hour", "Price per hour of the plan", c.usd_per_hour,
                           f"${c.usd_per_hour:,.2f}" if c.usd_per_hour is not None else "-", formula, inputs, None,
                           "", [c.basis], c.uncertainty, describe(est))
    formula = ["$/h = the cheapest matching offering's price per instance-hour x instances (whole instances billed)",
               f"  = ${rent['usd_per_instance_hour']:,.2f} x {rent['instances']}"]
    inputs = [Input("offering", f"{rent['provider']} {rent['instance_type']} ({rent['price_kind']}, region "
                    f"{rent['region']})", f"{rent['source_url']} (retrieved {rent['retrieved']})"),
              Input("GPUs per instance / instances / GPUs billed",
                    f"{rent['gpus_per_instance']} / {rent['instances']} / {rent['gpus_billed']}",
                    "hardware/data/prices.csv"),
              Input("price per instance-hour", f"${rent['usd_per_instance_hour']:,.2f}",
                    f"{rent['source_url']}")]
    replay = rent["usd_per_instance_hour"] * rent["instances"]
    notes = [c.basis] + [f"alternative: {a['provider']} {a['instance_type']} ${a['usd_per_hour']:,.2f}/h"
                         for a in (c.details or {}).get("rent_alternatives", [])[:3]]
    if (c.details or {}).get("breakeven_months"):
        notes.append(f"buying pays off after {c.details['breakeven_months']:.1f} months of continuous use "
                     "(`gpuplan estimate --json`: cost.details.own)")
    return Explanation("cost.usd_per_hour", "Price per hour of the plan", c.usd_per_hour, f"${c.usd_per_hour:,.2f}",
                       formula, inputs, replay, "", notes, None, describe(est))


def _cost_per_million(est) -> Explanation:
    c, perf, scn = est.cost, est.performance, est.scenario
    if scn.is_training:
        rate = (perf.tokens_per_s_per_gpu or 0) * scn.hardware.count
        what = "trained tokens/s (all GPUs)"
    else:
        rate = (perf.output_tokens_per_s or 0)
        what = "output tokens/s (the plan's whole hourly cost over its output tokens)"
    formula = ["$/M tokens = $/h ÷ (tokens/s x 3600) x 1e6",
               f"  = {c.usd_per_hour} ÷ ({rate:,.0f} x 3600) x 1e6" if c.usd_per_hour else "  no hourly price"]
    inputs = [Input("$/h", f"${c.usd_per_hour:,.2f}" if c.usd_per_hour else "-", "`gpuplan explain ... "
                    "cost.usd_per_hour`"),
              Input(what, f"{rate:,.0f}", "pipeline.evaluate (estimate/speed.py)")]
    replay = c.usd_per_hour / (rate * 3600) * 1e6 if (c.usd_per_hour and rate) else None
    shown = "-" if c.usd_per_million_tokens is None else f"${c.usd_per_million_tokens:,.4f}"
    return Explanation("cost.usd_per_million_tokens", "Price per million tokens", c.usd_per_million_tokens, shown,
                       formula, inputs, replay, "", [c.basis], c.uncertainty, describe(est))


# ---- the table of quantities ---------------------------------------------------------------------------------

QUANTITIES: dict[str, Callable[[Any], Explanation]] = {
    "memory.peak": _peak,
    "memory.weights": _weights,
    "memory.gradients": _training_only("gradients"),
    "memory.optimizer_states": _training_only("optimizer_states"),
    "memory.activations": _activations,
    "memory.logits": _logits,
    "memory.kv_cache": _kv_cache,
    "memory.temporary": _temporary,
    "memory.runtime_overhead": _runtime_overhead,
    "speed.step_time": _step_time,
    "speed.mfu": _mfu,
    "speed.tokens_per_s": _tokens_per_s,
    "speed.tpot": _tpot,
    "speed.ttft": _ttft,
    "cost.usd_per_hour": _cost_per_hour,
    "cost.usd_per_million_tokens": _cost_per_million,
}

ALIASES = {"memory.optimizer": "memory.optimizer_states", "memory.optimizer_state": "memory.optimizer_states",
           "memory.kv": "memory.kv_cache", "memory.peak_bytes_per_gpu": "memory.peak",
           "performance.step_time_s": "speed.step_time", "speed.step_time_s": "speed.step_time",
           "performance.mfu": "speed.mfu", "performance.tpot_s": "speed.tpot", "speed.tpot_s": "speed.tpot",
           "speed.decode": "speed.tpot", "performance.ttft_s": "speed.ttft", "speed.ttft_s": "speed.ttft",
           "performance.tokens_per_s_per_gpu": "speed.tokens_per_s", "cost.per_hour": "cost.usd_per_hour",
           "cost.usd_per_million": "cost.usd_per_million_tokens", "cost.per_million_tokens":
           "cost.usd_per_million_tokens"}


def quantity_name(text: str) -> str:
    key = text.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key in QUANTITIES:
        return key
    if "." not in key:                                 # 'activations' -> memory.activations
        found = [q for q in QUANTITIES if q.split(".", 1)[1] == key]
        if len(found) == 1:
            return found[0]
    raise InputError(f"quantity '{text}'", "is not a number explain knows.",
                     "pick one of: " + ", ".join(QUANTITIES) + ".", close_matches(key, list(QUANTITIES) + list(ALIASES)))


def explain(scenario: Any, quantity: str) -> Explanation:
    """Explain one number of `scenario` (evaluated through gpuplan.pipeline.evaluate)."""
    from .pipeline import evaluate
    name = quantity_name(quantity)
    est = evaluate(scenario)
    return QUANTITIES[name](est)


def explain_estimate(est: Any, quantity: str) -> Explanation:
    """Explain one number of an estimate the caller already has from pipeline.evaluate."""
    return QUANTITIES[quantity_name(quantity)](est)


__all__ = ["Explanation", "Input", "QUANTITIES", "ALIASES", "quantity_name", "explain", "explain_estimate"]

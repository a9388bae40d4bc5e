"""Rules that need the model: does this layout and this length exist for this architecture?

`check_scenario_against_model` raises InputError naming the field, the model's own number and the
fix; it returns notes for what it allows but the user should know (replicated KV heads, a context
stretched past the model's own). It reads ModelSpec fields only (no HF config keys).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from .errors import InputError, UnsupportedError


def _divisors(n: int, limit: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, limit) + 1) if n % d == 0)


def _tp_rules(scn: Any, model: Any) -> list[str]:
    tp, heads, kv = scn.parallel.tp, model.num_heads, model.num_kv_heads
    if heads % tp:
        raise InputError(f"parallel.tp = {tp}", f"does not divide {model.name}'s {heads} attention heads (each GPU "
                         "must hold whole heads).", f"use a tp that divides {heads}: {_divisors(heads, tp * 2)}.")
    if model.is_mla or kv == 0 or kv % tp == 0:
        return []
    if tp % kv or scn.is_training:
        if scn.is_training:
            why = (f"does not divide {model.name}'s {kv} KV heads; training frameworks (Megatron, torchtitan) "
                   "split whole KV heads across tensor-parallel ranks.")
        else:
            why = (f"neither divides {model.name}'s {kv} KV heads nor is a multiple of them, so KV heads cannot "
                   "be split evenly or replicated.")
        raise InputError(f"parallel.tp = {tp}", why, f"use a tp that divides {kv} ({_divisors(kv, kv)}) "
                         + ("" if scn.is_training else f"or a multiple of {kv} that divides {heads}") + ".")
    return [f"tp={tp} is more than the model's {kv} KV heads: serving engines (vLLM, SGLang) replicate each KV "
            f"head on {tp // kv} GPUs, so every GPU holds one KV head and its cache."]


def _layout_rules(scn: Any, model: Any) -> None:
    p = scn.parallel
    if p.pp > model.num_layers:
        raise InputError(f"parallel.pp = {p.pp}", f"is more pipeline stages than {model.name}'s {model.num_layers} "
                         "layers (each stage needs at least one layer).", f"use pp <= {model.num_layers}.")
    if p.pp * p.vpp > model.num_layers:
        raise InputError(f"parallel.pp x vpp = {p.pp * p.vpp}", f"is more pipeline chunks than {model.name}'s "
                         f"{model.num_layers} layers.", "lower vpp (or pp).")
    if p.ep > 1 and not model.num_experts:
        raise InputError(f"parallel.ep = {p.ep}", f"needs a mixture-of-experts model; {model.name} is dense "
                         "(no experts to place).", "set ep: 1 (use tp, pp or dp to spread a dense model).")
    if p.ep > 1 and model.num_experts % p.ep:
        raise InputError(f"parallel.ep = {p.ep}", f"does not divide {model.name}'s {model.num_experts} experts.",
                         f"use an ep that divides {model.num_experts}: {_divisors(model.num_experts, p.ep * 2)}.")
    if p.etp is not None and not model.num_experts:
        raise InputError(f"parallel.etp = {p.etp}", f"splits routed experts; {model.name} is dense (no experts).",
                         "remove etp.")
    if (model.num_experts and scn.is_training and scn.framework == "megatron" and p.tp > 1 and not p.sp):
        # megatron/core/transformer/moe/moe_layer.py @core_v0.19.0 raises in training: the dispatcher takes the
        # sequence-parallel tokens (the speed estimate times that)
        raise InputError(f"parallel.sp = false with tp = {p.tp}", f"Megatron's MoE layer refuses tensor parallel "
                         f"without sequence parallel in training ({model.name} has {model.num_experts} experts).",
                         "set parallel.sp: true (the default), or tp: 1.")
    if p.cp > 1 and not scn.is_training:
        raise InputError(f"parallel.cp = {p.cp}", "context parallel splits a training sequence; serving has none.",
                         "set cp: 1 (use tp or pp).")
    if p.cp > 1 and scn.train.seq_len % (2 * p.cp):
        raise InputError(f"parallel.cp = {p.cp}", f"cannot split train.seq_len = {scn.train.seq_len:,} into "
                         f"2 x cp = {2 * p.cp} equal chunks (load-balanced causal context parallel).",
                         f"use a seq_len that is a multiple of {2 * p.cp}, or another cp.")


def _length(scn: Any, model: Any = None) -> tuple[str, int]:
    """(field, tokens) of the longest sequence the scenario runs."""
    if scn.is_training:
        if (scn.train.target_len or 0) > scn.train.seq_len:
            return "train.target_len", scn.train.target_len
        what = "train.seq_len" + ("" if "seq_len" in scn.train.model_fields_set else " (default)")
        if scn.train.pair_concat == "sequence":     # the pair joined into one row: positions run to 2 x seq_len
            return f"2 x {what} (train.pair_concat: sequence)", 2 * scn.train.seq_len
        return what, scn.train.seq_len
    inf = scn.infer
    total = inf.prompt_len + inf.output_len
    if getattr(model, "is_encoder_decoder", False):
        # the prompt goes to the encoder, the output to the decoder: two sequences, each its own length
        return ("infer.prompt_len", inf.prompt_len) if inf.prompt_len >= inf.output_len else \
            ("infer.output_len", inf.output_len)
    if inf.max_model_len and inf.max_model_len > total:
        return "infer.max_model_len", inf.max_model_len
    return "infer.prompt_len + output_len" + _defaulted(inf.model_fields_set), total


def _defaulted(given: Any) -> str:
    """' (defaults 1,024 + 256)'-style tag when prompt_len or output_len was not given: a refused length the user
    never wrote says so (as train.seq_len (default) does)."""
    from .scenario import Infer
    unset = [f for f in ("prompt_len", "output_len") if f not in given]
    if not unset:
        return ""
    base = Infer()
    return " (" + " and ".join(f"{f} {getattr(base, f):,}" for f in unset) + " by default)"


def context_rules(model: Any, what: str, tokens: int, *, training: bool, allowed: bool,
                  pretraining: bool = False) -> list[str]:
    """Refuse a sequence past the model's context unless `allowed` (allow_longer_context); then a note
    saying which RoPE scaling that assumes. Pre-training from scratch (task train) with rotary or ALiBi
    positions sets the context itself: a note, never an error."""
    limit = model.max_position
    if not limit or tokens <= limit:
        return []
    flag = f"{'train' if training else 'infer'}.allow_longer_context"
    if model.position_encoding == "learned":
        raise InputError(f"{what} = {tokens:,}", f"is longer than {model.name}'s {limit:,} learned position "
                         "embeddings; a learned position table cannot be stretched (no RoPE to scale).",
                         f"use at most {limit:,} tokens, or a model with a longer context.")
    factor = math.ceil(tokens / limit)
    if model.position_encoding == "relative":
        # T5's relative position buckets cover any distance (all beyond relative_attention_max_distance share
        # one bucket): longer inputs run, and fine-tunes at 1-2k tokens are common
        return [f"{tokens:,} tokens is past the {limit:,} tokens {model.name} was pre-trained on; its relative "
                "position buckets run at any length, quality past the trained length is not guaranteed."]
    if pretraining:
        return [f"pre-training at {tokens:,} tokens, past the {limit:,} of {model.name}'s config: the run defines "
                f"its own context; set max_position_embeddings to {tokens:,} (and the RoPE base as you intend) in "
                "the config you launch with."]
    if not allowed:
        raise InputError(f"{what} = {tokens:,}", f"is longer than {model.name}'s context of {limit:,} tokens "
                         "(max_position_embeddings).", f"use at most {limit:,} tokens, or set {flag}: true if you "
                         f"extend the context yourself (e.g. YaRN RoPE scaling, factor {factor}).")
    if model.position_encoding in ("alibi", "none"):
        how = "ALiBi runs" if model.position_encoding == "alibi" else "without position encodings (SSM/hybrid) it runs"
        return [f"{tokens:,} tokens is past {model.name}'s {limit:,}-token training context; {how} longer "
                "without scaling, but quality past the trained length is not guaranteed."]
    own = f" on top of its own {model.rope_scaling}" if model.rope_scaling else ""
    return [f"{tokens:,} tokens is past {model.name}'s {limit:,}-token context ({flag}): this assumes RoPE "
            f"scaling such as YaRN with factor {factor} over {limit:,} positions{own}; memory and speed are "
            "estimated at the longer length, quality is not."]


def _context_rules(scn: Any, model: Any) -> list[str]:
    what, tokens = _length(scn, model)
    section = scn.train if scn.is_training else scn.infer
    return context_rules(model, what, tokens, training=scn.is_training, allowed=section.allow_longer_context,
                         pretraining=scn.task == "train")


def check_partial_against_model(data: Mapping[str, Any], model: Any) -> tuple[str, ...]:
    """The model rules that hold for every plan of a (validated) partial scenario: its fixed lengths.
    Layout values (tp, pp, ep, cp) are the search's to reject, with a reason per candidate."""
    from .scenario import Infer, Train
    if data.get("task", "train") in ("train", "finetune"):
        given = data.get("train") or {}
        tr = {**Train().model_dump(), **given}
        what = "train.seq_len" + ("" if "seq_len" in given else " (default)")
        tokens = tr["seq_len"]
        if tr.get("pair_concat") == "sequence":     # the pair joined into one row (as `_length`)
            what, tokens = f"2 x {what} (train.pair_concat: sequence)", 2 * tokens
        return tuple(context_rules(model, what, tokens, training=True, allowed=tr["allow_longer_context"],
                                   pretraining=data.get("task", "train") == "train"))
    inf = {**Infer().model_dump(), **(data.get("infer") or {})}
    total = inf["prompt_len"] + inf["output_len"]
    what, tokens = ("infer.max_model_len", inf["max_model_len"]) if (inf["max_model_len"] or 0) > total else \
        ("infer.prompt_len + output_len" + _defaulted(set(data.get("infer") or {})), total)
    return tuple(context_rules(model, what, tokens, training=False, allowed=inf["allow_longer_context"]))


def _recurrent_rules(scn: Any, model: Any) -> None:
    """Recurrent mixers other than Mamba (models/spec.py RecurrentMixer): their recurrence or causal convolution
    carries state along the sequence, which context parallelism would have to pass between ranks (not modelled)."""
    if getattr(model, "recurrent", None) is None or not model.num_recurrent_layers:
        return
    if scn.parallel.cp > 1:
        raise InputError(f"parallel.cp = {scn.parallel.cp}", f"{model.name} has {model.num_recurrent_layers} "
                         f"recurrent ({model.recurrent.variant}) layers whose state runs along the whole sequence; "
                         "context parallelism for them is not modelled.",
                         "set cp: 1 (use tp, pp or recompute for long sequences).")


def _ssm_rules(scn: Any, model: Any) -> list[str]:
    """State-space layers: tensor parallelism splits the mixer by heads (Mamba-2) or channels (Mamba-1), as
    vLLM's and Megatron's mixers do; context parallelism has no counterpart for the sequential scan here."""
    ssm = getattr(model, "ssm", None)
    if ssm is None or not model.num_ssm_layers:
        return []
    p = scn.parallel
    if scn.is_training and scn.framework in ("torchtitan", "torchtune", "litgpt"):
        raise InputError(f"framework = {scn.framework}", f"has no Mamba layers, so it cannot train {model.name} "
                         f"({model.num_ssm_layers} state-space layers).",
                         "use framework hf (transformers + mamba_ssm kernels), deepspeed or megatron (Megatron-core's "
                         "hybrid Mamba models).")
    if p.cp > 1:
        raise InputError(f"parallel.cp = {p.cp}", f"{model.name} has {model.num_ssm_layers} state-space (Mamba) "
                         "layers whose scan carries its state along the whole sequence; context parallelism for them "
                         "is not modelled.", "set cp: 1 (use tp, pp or recompute for long sequences).")
    units, what = (ssm.num_heads, "SSM heads") if ssm.variant == "mamba2" else (ssm.d_inner, "SSM channels (d_inner)")
    if units % p.tp:
        raise InputError(f"parallel.tp = {p.tp}", f"does not divide {model.name}'s {units} {what}; the mixer is split "
                         "across tensor-parallel ranks by whole heads or channels.",
                         f"use a tp that divides {units}: {_divisors(units, p.tp * 2)}.")
    notes = []
    if scn.is_training and scn.train.method in ("lora", "qlora"):
        notes.append("LoRA on SSM layers: adapters on in_proj/x_proj/dt_proj/out_proj are counted; the mixer's "
                     "saved activations are those of full fine-tuning (adapter inputs not modelled)")
    return notes


# serving engines and beam search: which engines run an encoder-decoder model, which run beam search
# (docs/encoder-decoder.md gives the sources)
ENCDEC_ENGINES = ("hf",)
BEAM_ENGINES = ("hf", "vllm", "trtllm")


def _encdec_rules(scn: Any, model: Any) -> None:
    """Encoder-decoder (T5) scenarios: what gpuplan models for them, and target_len only where it means
    something."""
    t, inf, p = scn.train, scn.infer, scn.parallel
    if inf is not None and inf.beam_width > 1 and inf.engine not in BEAM_ENGINES:
        raise InputError(f"infer.beam_width = {inf.beam_width}", f"engine '{inf.engine}' has no beam search "
                         "(SGLang and llama.cpp's server decode one sequence per request).",
                         "use engine hf (generate num_beams), vllm (LLM.beam_search) or trtllm, or beam_width: 1.")
    if not model.is_encoder_decoder:
        if t is not None and t.target_len is not None:
            raise InputError(f"train.target_len = {t.target_len}", f"applies to encoder-decoder models; {model.name} "
                             "is decoder-only (its input and target are one sequence of train.seq_len).",
                             "remove train.target_len (put the whole sequence length in seq_len).")
        return
    what = f"{model.name} (encoder-decoder)"
    if not model.traits.encdec_layer:
        # models/generic.py: encoder-decoders whose layers are not T5's or BART's (Whisper, ProphetNet ...)
        why = model.inferred.get("memory", "its layers are not checked against T5's or BART's")
        raise UnsupportedError(f"model {model.name}", f"is an encoder-decoder ({model.model_type}) whose training "
                               f"and serving memory gpuplan does not derive: {why}. Its parameters are counted "
                               "exactly (`gpuplan model`).", "use a T5 / Flan-T5 / mT5 or BART-style model (bart, "
                               "mbart, pegasus, marian, blenderbot, plbart, mvp) for memory and speed, or "
                               "`gpuplan trace` for a measured number.")
    bart = model.traits.encdec_layer in ("bart", "ngram")
    speech = model.traits.speech_frames
    if speech:
        # Whisper's encoder requires exactly its frame count (WhisperEncoder.forward raises otherwise): the encoder
        # length is the model's (30 s of audio), the input tokens of the scenario must name it
        positions = speech[1]
        for _, stride in speech[2]:
            positions //= stride
        what_len, n = ("train.seq_len", t.seq_len) if t is not None else ("infer.prompt_len", inf.prompt_len)
        if n != positions:
            raise InputError(f"{what_len} = {n:,}", f"{what}: a speech encoder over log-mel frames always runs "
                             f"{speech[1]:,} frames ({speech[0]} mel bins), {positions:,} positions after its "
                             "strided Conv1d front end, whatever the audio's length (shorter audio is padded).",
                             f"set {what_len}: {positions} (the target text goes in "
                             f"{'train.target_len' if t is not None else 'infer.output_len'}).")
    up_to = model.traits.encoder_eager_up_to
    src_len = t.seq_len if t is not None else (inf.prompt_len if inf is not None else 0)
    if up_to and src_len > up_to:
        what_len = "train.seq_len" if t is not None else "infer.prompt_len"
        raise UnsupportedError(f"{what_len} = {src_len:,}", f"{what}: above {up_to:,} input tokens its encoder runs "
                               "block-sparse attention (random, window and global blocks), whose memory gpuplan "
                               "does not derive; up to that length it runs full attention, which is derived.",
                               f"use at most {up_to:,} input tokens, or `gpuplan trace` for a measured number.")
    if p.pp > 1 or p.cp > 1 or p.ep > 1:
        raise InputError(f"parallel pp={p.pp}, cp={p.cp}, ep={p.ep}", f"{what}: gpuplan models an encoder-decoder "
                         "with data and tensor parallelism only (no pipeline split of the two stacks, no context "
                         "parallel).", "set pp: 1, cp: 1, ep: 1 (use dp with zero 1-3, or tp).")
    if t is not None:
        if scn.framework != "hf":
            raise InputError(f"framework = {scn.framework}", f"{what}: the memory terms are derived from HF "
                             "transformers' T5 code only.", "use framework: hf (HF Trainer / accelerate).")
        unmodelled = [f"{k}={v}" for k, v in (("attention", t.attention), ("loss", t.loss), ("compile", t.compile),
                                               ("activation_offload", t.activation_offload),
                                               ("recompute", t.recompute))
                      if v not in ("flash", "sdpa", "full", "none", False)]
        if unmodelled:
            raise InputError(f"train {', '.join(unmodelled)}", f"{what}: gpuplan derives T5's activations for "
                             "SDPA attention (CUDA's memory-efficient kernel, which takes the position bias), the "
                             "full cross-entropy, no torch.compile, no activation offload, and recompute none or full "
                             "(HF gradient checkpointing per T5Block; transformers has no selective recompute).",
                             "use attention: sdpa (or flash, run as SDPA: flash kernels take no bias), loss: full, "
                             "compile: false, activation_offload: false, recompute: none or full.")
        if bart and t.recompute != "none":
            raise InputError(f"train.recompute = {t.recompute}", f"{what}: the BART-style activation terms are derived "
                             "and traced without gradient checkpointing; checkpointing a BART layer is not traced yet.",
                             "use recompute: none (or a smaller micro_batch to fit).")
        if t.method != "full":
            raise InputError(f"train.method = {t.method}", f"{what}: the activation terms are derived and traced for "
                             "full fine-tuning; LoRA/QLoRA adapters on T5 (peft) are not modelled yet.",
                             "use method: full (with recompute: full or a smaller micro_batch to fit).")
        if t.objective != "sft":
            raise InputError(f"train.objective = {t.objective}", f"{what}: post-training objectives are modelled "
                             "for decoder-only models.", "use objective: sft (seq2seq fine-tuning).")
    if inf is not None and inf.engine not in ENCDEC_ENGINES:
        raise InputError(f"infer.engine = {inf.engine}", f"{what}: gpuplan models encoder-decoder serving with HF "
                         "generate only (vLLM V1 and SGLang serve no T5; TensorRT-LLM's enc-dec runtime and "
                         "llama.cpp's T5 path are not modelled).", "use engine: hf.")


def _document_rules(scn: Any, model: Any) -> list[str]:
    """train.document_len (documents packed into a row, each attending only to itself) where the stack has it."""
    t = scn.train if scn.is_training else None
    if t is None or t.document_len is None:
        return []
    field = f"train.document_len = {t.document_len}"
    if model.is_encoder_decoder:
        raise InputError(field, f"packs documents into one decoder row; {model.name} is an encoder-decoder (its input "
                         "and target are separate sequences).", "remove train.document_len.")
    if scn.framework == "megatron" and t.attention != "flash":
        # megatron/core/transformer/dot_product_attention.py (Megatron-LM@d98e8a64): `assert packed_seq_params is
        # None, "Packed sequence is not supported by DotProductAttention..."`: packed rows need TE's THD attention
        raise InputError(field, f"with attention {t.attention}: Megatron runs packed sequences only through "
                         "Transformer Engine's fused attention (THD format); its own DotProductAttention refuses "
                         "packed_seq_params.", "use attention: flash (Transformer Engine), or remove document_len.")
    if t.attention != "flash":
        return [f"train.document_len with attention {t.attention}: the documents are masked apart (a block-diagonal "
                f"mask, as transformers builds it from the position_ids), but every score of the {t.row_len:,}-token row is still "
                "computed, so attention is priced over the whole row" + (" and its scores are kept whole"
                                                                         if t.attention == "eager" else
                                                                         "; the [s, s] mask itself is not counted")
                + "; attention: flash (flash-attention varlen) computes each document alone"]
    return []


def _pair_rules(scn: Any, model: Any) -> None:
    """train.pair_concat: sequence joins a pair into one decoder row: no such row in an encoder-decoder."""
    t = scn.train if scn.is_training else None
    if t is not None and t.pair_concat == "sequence" and model.is_encoder_decoder:
        raise InputError("train.pair_concat = sequence", f"joins the chosen and rejected sequences into one decoder "
                         f"row; {model.name} is an encoder-decoder (each target is decoded against its own encoder "
                         "input).", "remove train.pair_concat (the pair then goes in the batch).")


# weight-format families (dtypes.WeightFormat.family) a serving engine cannot load at all, with why and the fix:
#  - llama.cpp runs GGUF files, whose tensor types are ggml's (ggml-org/llama.cpp@004eaba ggml/include/ggml.h
#    enum ggml_type: F32/F16/BF16, Q4_0..Q8_0, K- and IQ-quants, MXFP4): no FP8, no AWQ/GPTQ/bitsandbytes/INT8
#    checkpoint; its 8- and 4-bit equivalents are Q8_0 and the Q4_K mixes (launch/llamacpp.py writes GGUF only)
#  - TensorRT-LLM loads FP8, FP4 and AWQ/GPTQ checkpoints (NVIDIA/TensorRT-LLM@09d4c79
#    docs/source/features/quantization.md: FP4, FP8 per-tensor/block/rowwise, W4A16/W4A8 GPTQ and AWQ): no GGUF
#    file and no bitsandbytes NF4
#  - transformers (engine hf) loads a GGUF file by dequantizing it ("When loading a model, we first dequantize it
#    to fp32", huggingface/transformers v4.49.0 docs/source/en/gguf.md), so its weights are not held as GGUF blocks
ENGINE_REFUSED_WEIGHTS: dict[str, dict[str, tuple[str, str]]] = {
    "llama.cpp": {fam: ("llama.cpp loads GGUF files, whose tensor types (ggml_type) hold no " + what,
                        "use a gguf-* format (gguf-q8_0 for 8 bits, gguf-q4_k_m for 4), or engine vllm or sglang")
                  for fam, what in (("fp8", "FP8"), ("int", "LLM.int8/W8A8 INT8"), ("gptq", "GPTQ"),
                                    ("awq", "AWQ"), ("nf4", "bitsandbytes NF4"))},
    "trtllm": {"gguf": ("TensorRT-LLM loads FP8, FP4, AWQ and GPTQ checkpoints, not GGUF files",
                        "use engine llama.cpp (or vllm/sglang, which load GGUF), or weights fp8 / awq-int4"),
               "nf4": ("TensorRT-LLM has no bitsandbytes NF4 kernels (it loads FP8, FP4, AWQ and GPTQ checkpoints)",
                       "use weights awq-int4 or gptq-int4, or engine vllm or sglang")},
    "hf": {"gguf": ("transformers dequantizes a GGUF file when it loads it (to fp32, then the model dtype), so "
                    "the weights are not held as GGUF blocks",
                    "use weights bf16 (what transformers holds), or engine llama.cpp for the GGUF file")},
}


# KV-cache formats: q8_0 / q4_0 are GGML block types, which only llama.cpp's cache holds; llama.cpp's cache types
# are F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1 (ggml-org/llama.cpp@145b628 common/arg.cpp
# kv_cache_types; anything else: "Unsupported cache type"), no FP8; vLLM's --kv-cache-dtype takes auto, bfloat16,
# fp8, fp8_e4m3, fp8_e5m2, ... (vllm-project/vllm@001cabc vllm/config/cache.py CacheDType), no GGML block type
GGML_KV = ("q8_0", "q4_0")
FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")


def _engine_weight_rules(scn: Any) -> None:
    """A weight or KV-cache format the serving engine cannot hold is refused (it used to be estimated as if it
    could, while `gpuplan launch` refused the same plan)."""
    from .dtypes import weight_format
    inf = getattr(scn, "infer", None)
    if inf is None or scn.is_training:
        return
    fmt = weight_format(inf.weights)
    refused = ENGINE_REFUSED_WEIGHTS.get(inf.engine, {}).get(fmt.family)
    if refused:
        why, fix = refused
        raise InputError(f"infer.weights = {inf.weights} with engine {inf.engine}", why + ".", fix + ".")
    kv = str(inf.kv_cache).strip().lower()
    if inf.engine == "llama.cpp" and kv in FP8_KV:
        raise InputError(f"infer.kv_cache = {inf.kv_cache} with engine llama.cpp", "llama.cpp's KV cache types are "
                         "f32, f16, bf16 and the GGML block types (q8_0, q4_0, ...); it has no FP8 cache.",
                         "use kv_cache q8_0 for an 8-bit cache, or engine vllm, sglang or trtllm for FP8.")
    if inf.engine != "llama.cpp" and kv in GGML_KV:
        raise InputError(f"infer.kv_cache = {inf.kv_cache} with engine {inf.engine}", f"{kv} is a GGML block type, "
                         f"which only llama.cpp's cache holds; {inf.engine} has no such KV cache.",
                         "use kv_cache fp8 for an 8-bit cache (vllm, sglang, trtllm), or engine llama.cpp.")


def disaggregation_rules(scn: Any, model: Any) -> None:
    """infer.load.disaggregation that cannot run: refused when the scenario is resolved, so `estimate`, the web API
    and the search refuse what `serve` refuses (they used to answer it with the colocated figures). One instance is
    one copy of the model: tp x pp GPUs, times the attention data-parallel ranks when experts are spread over
    data-parallel ranks (estimate/speed.py _Serving.group_gpus)."""
    inf = getattr(scn, "infer", None)
    load = getattr(inf, "load", None) if inf is not None and not scn.is_training else None
    dg = getattr(load, "disaggregation", None)
    if dg is None:
        return
    n, m = dg.prefill_instances, dg.decode_instances
    if load.arrival == "closed":
        raise InputError("infer.load.disaggregation", "needs open-loop or offline arrivals, not a closed loop.",
                         "use arrival poisson, gamma, offline or trace.")
    par = scn.parallel
    ep = par.ep if (model.is_moe and par.ep > 1) else 1
    adp = min(scn.dp, ep) if ep > 1 else 1
    if adp > 1:
        raise InputError("infer.load.disaggregation", "is not modelled with attention data parallelism (ep over "
                         "data-parallel ranks).", "drop one of them.")
    group = par.tp * par.pp
    gpus = (n + m) * group
    if scn.hardware.count < gpus:
        raise InputError("infer.load.disaggregation", f"{n} prefill + {m} decode instances of {group} "
                         f"GPU(s) need {gpus} GPUs; hardware.count is {scn.hardware.count}.",
                         f"set hardware.count to at least {gpus} or use fewer instances.")


def _mtp_rules(scn: Any, model: Any) -> list[str]:
    """infer.speculative method mtp drafts with the checkpoint's own multi-token-prediction layer (DeepSeek-V3
    technical report §2.2; vLLM loads it from the target checkpoint): refused when the config says it has none,
    a warning when the config does not say (the drafter is then priced as if it had one)."""
    from .models.spec import mtp_layers
    inf = getattr(scn, "infer", None)
    spec = getattr(inf, "speculative", None) if inf is not None and not scn.is_training else None
    if spec is None or spec.method != "mtp":
        return []
    n = mtp_layers(getattr(model, "config", None))
    if n == 0:
        raise InputError("infer.speculative.method = mtp", f"drafts with the checkpoint's multi-token-prediction "
                         f"layer, and {model.name}'s config says it has none.",
                         "use method eagle (an EAGLE head trained for this model), draft (a smaller model of the "
                         "same tokenizer) or ngram.")
    if n is None:
        return [f"speculative method mtp: {model.name}'s config names no multi-token-prediction layer (DeepSeek-V3 "
                "and R1, GLM-4.5, MiMo and Qwen3-Next checkpoints carry one); the drafter is priced as one such layer "
                "— with none, use method eagle or draft"]
    return []


def _engine_context_rule(scn: Any, model: Any) -> None:
    """A request longer than the engine's own context limit (infer.max_model_len) is refused by the engine, not
    served: vLLM's OpenAI server rejects input + max_tokens over max_model_len ("This model's maximum context length
    is ..."), and its scheduler drops a longer prompt; SGLang (--context-length) and TensorRT-LLM (max_seq_len)
    likewise. An encoder-decoder's prompt and output are two sequences (the model's own rules apply)."""
    inf = getattr(scn, "infer", None)
    if inf is None or not inf.max_model_len or getattr(model, "is_encoder_decoder", False):
        return
    total = inf.prompt_len + inf.output_len
    if total > inf.max_model_len:
        raise InputError(f"infer.prompt_len + output_len = {total:,}{_defaulted(inf.model_fields_set)}",
                         f"is longer than infer.max_model_len {inf.max_model_len:,}, the engine's context limit: "
                         "the engine refuses such a request instead of serving it.",
                         f"raise infer.max_model_len to at least {total:,}, or shorten prompt_len/output_len.")


def check_scenario_against_model(scn: Any, model: Any) -> tuple[str, ...]:
    """Raise InputError if the scenario's layout or length does not exist for this model; return notes."""
    _pair_rules(scn, model)
    _engine_context_rule(scn, model)
    _engine_weight_rules(scn)
    disaggregation_rules(scn, model)
    _encdec_rules(scn, model)
    notes = _tp_rules(scn, model)
    _layout_rules(scn, model)
    notes += _ssm_rules(scn, model)
    _recurrent_rules(scn, model)
    notes += _context_rules(scn, model)
    notes += _document_rules(scn, model)
    notes += _mtp_rules(scn, model)
    inf = getattr(scn, "infer", None)
    if inf is not None and inf.num_scheduler_steps > 1 and inf.load is None:
        notes.append(f"infer.num_scheduler_steps {inf.num_scheduler_steps} (vLLM V0 multi-step) is simulated under "
                     "load only (infer.load or --rate); the concurrency table prices one schedule per step")
    return tuple(notes)

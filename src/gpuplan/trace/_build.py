"""Build the scenario's HF model from its config on fake tensors (no weights, no real memory)."""
from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

from ..errors import InputError, UnsupportedError

# Keys that change how a checkpoint is *loaded*, never the shapes of the model we trace.
_DROP_KEYS = ("quantization_config", "rope_scaling", "auto_map", "_name_or_path", "architectures",
              "transformers_version", "torch_dtype", "dtype")


def hf_config(spec, attn_impl: str):
    """A transformers config object for `spec.config` (ModelSpec keeps the raw config.json dict)."""
    from transformers import AutoConfig

    raw = dict(spec.config or {})
    model_type = raw.pop("model_type", None) or spec.model_type
    for k in _DROP_KEYS:
        raw.pop(k, None)
    try:
        with _quiet():
            cfg = AutoConfig.for_model(model_type, **raw)
    except (ValueError, KeyError) as err:
        raise UnsupportedError(
            f"tracing model '{spec.name}'",
            f"transformers {_tf_version()} cannot build model_type '{model_type}' ({_first_line(err)}).",
            "upgrade transformers (pip install -U transformers) or trace a model of a supported family "
            "(llama, qwen2, qwen3, mistral, gemma, phi3, qwen3_moe, mixtral, deepseek_v2, ...).") from None
    cfg.use_cache = False
    if getattr(cfg, "is_encoder_decoder", False) and getattr(cfg, "decoder_start_token_id", None) is None:
        cfg.decoder_start_token_id = getattr(cfg, "pad_token_id", None) or 0   # T5: the pad token starts decoding
    if getattr(cfg, "tie_word_embeddings", None) is None:
        cfg.tie_word_embeddings = bool(spec.tie_embeddings)
    return cfg


def build_causal_lm(spec, cfg, dtype, attn_impl: str, experts: str | None = None, notes: list | None = None):
    """AutoModelForCausalLM.from_config(cfg) with parameters of `dtype`; call under FakeTensorMode."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from ..models.meta import TEXT_ONLY_CAUSAL_LM
    if getattr(spec, "is_encoder_decoder", False):
        return _build_seq2seq(spec, cfg, dtype, attn_impl, notes)
    # the whole model the count is of (Llama-3.2-Vision: tower and projector too, idle on text-only input)
    auto_cls = AutoModelForImageTextToText if cfg.model_type in TEXT_ONLY_CAUSAL_LM else AutoModelForCausalLM
    attn_impl = _eager_if_only_path(auto_cls, cfg, attn_impl, notes)
    try:
        with _quiet(), _sdpa_for_flash_only_models(cfg, attn_impl, notes), _module_to_in_place():
            kw = {"experts_implementation": experts} if experts else {}
            model = _from_config(auto_cls, cfg, notes, dtype=dtype, attn_implementation=attn_impl, **kw)
            _set_default_language(model, cfg, notes)
            if getattr(model, "_gpuplan_flash_standin", False):
                for mod in model.modules():
                    mod._gpuplan_flash_standin = True
    except ValueError as err:
        model = _build_speech_seq2seq(cfg, dtype, attn_impl) if spec.traits.speech_frames else None
        if model is not None:
            return model
        raise UnsupportedError(
            f"tracing model '{spec.name}'",
            f"transformers {_tf_version()} cannot build a causal LM for model_type '{cfg.model_type}' "
            f"({_first_line(err)}).",
            "trace a decoder-only model of a family transformers supports.") from None
    return model


def _set_default_language(model, cfg, notes: list | None) -> None:
    """X-MOD routes every layer's output through one adapter per language and refuses to run before it is told
    which ("Input language unknown. Please call `XmodPreTrainedModel.set_default_language()`", transformers 5.25
    modeling_xmod.py); a user does that once after loading. The first of the config's `languages` is chosen:
    every adapter has the same shape."""
    langs = getattr(cfg, "languages", None)
    if hasattr(model, "set_default_language") and getattr(cfg, "default_language", None) is None and langs:
        model.set_default_language(langs[0])
        if notes is not None:
            notes.append(f"default language set to '{langs[0]}' (set_default_language, as a user must).")


def _from_config(auto_cls, cfg, notes: list | None, **kw):
    """`auto_cls.from_config(cfg, **kw)`. Some weight initialisers read values back (a vision tower's SigLIP
    `_init_weights` in a Gemma 3 / PaliGemma-style composite model), which fake tensors cannot answer; then the
    model is built again without initialising its weights (PreTrainedModel.initialize_weights skipped, weights
    still tied as `init_weights` ties them, transformers 5.25 modeling_utils.py): the values are never used,
    the tensors and their sizes are the same."""
    from torch._subclasses.fake_tensor import DataDependentOutputException
    try:
        return auto_cls.from_config(cfg, **kw)
    except DataDependentOutputException:
        pass
    from transformers.modeling_utils import PreTrainedModel
    original = PreTrainedModel.initialize_weights
    PreTrainedModel.initialize_weights = lambda self: None
    try:
        model = auto_cls.from_config(cfg, **kw)
    finally:
        PreTrainedModel.initialize_weights = original
    if notes is not None:
        notes.append("weights built without initialisation (an initialiser reads tensor values, which fake "
                     "tensors do not hold); sizes unchanged.")
    return model


def _build_seq2seq(spec, cfg, dtype, attn_impl: str, notes: list | None):
    """AutoModelForSeq2SeqLM.from_config (T5, mT5). transformers 5.x's T5Config/MT5Config force
    tie_word_embeddings = True, while T5 v1.1 / Flan-T5 / mT5 checkpoints store their own lm_head.weight
    (their config says tie_word_embeddings: false): the lm_head gets its own parameter here, as in the
    checkpoint a user loads."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    attn_impl = _eager_if_only_path(AutoModelForSeq2SeqLM, cfg, attn_impl, notes)
    try:
        with _quiet(), _module_to_in_place():
            model = AutoModelForSeq2SeqLM.from_config(cfg, dtype=dtype, attn_implementation=attn_impl)
    except ValueError as err:
        model = _build_speech_seq2seq(cfg, dtype, attn_impl) if spec.traits.speech_frames else None
        if model is not None:
            return model
        raise UnsupportedError(
            f"tracing model '{spec.name}'",
            f"transformers {_tf_version()} cannot build a seq2seq LM for model_type '{cfg.model_type}' "
            f"({_first_line(err)}).", "trace a T5/mT5 configuration.") from None
    head = model.get_output_embeddings()
    if not spec.tie_embeddings and head.weight is model.get_input_embeddings().weight:
        head.weight = torch.nn.Parameter(torch.empty_like(head.weight))
        if notes is not None:
            notes.append("lm_head untied from the shared embedding as in the checkpoint (transformers 5.x's "
                         "T5Config forces tie_word_embeddings; v1.1/Flan/mT5 checkpoints store lm_head.weight).")
    return model


def _build_speech_seq2seq(cfg, dtype, attn_impl: str):
    """AutoModelForSpeechSeq2Seq.from_config (Whisper: a speech encoder in front of the text decoder), or None."""
    from transformers import AutoModelForSpeechSeq2Seq
    try:
        with _quiet(), _module_to_in_place():
            return AutoModelForSpeechSeq2Seq.from_config(cfg, dtype=dtype, attn_implementation=attn_impl)
    except ValueError:
        return None


def _model_class(auto_cls, cfg):
    try:
        return auto_cls._model_mapping[type(cfg)]
    except (KeyError, AttributeError):
        return None


def _eager_if_only_path(auto_cls, cfg, attn_impl: str | None, notes) -> str | None:
    """None (transformers' own choice) for a model class with neither an SDPA nor a flash-attention path
    (`_supports_sdpa` and `_supports_flash_attn` false: BLOOM's baddbmm + ALiBi, MPT, GIT, OpenAI GPT, CPM-Ant):
    loaded without an attn_implementation, as a user loads it, transformers picks eager for it and SDPA for a
    sub-model that has that path (GOT-OCR2's Qwen2 text model; PreTrainedModel._check_and_adjust_attn_implementation,
    transformers 5.25 modeling_utils.py). Some key their attention class or their mask on that choice (GIT's
    GIT_SELF_ATTENTION_CLASSES holds 'eager' only; MPT's mask is built only for eager)."""
    cls = _model_class(auto_cls, cfg)
    if attn_impl == "eager" or cls is None or getattr(cls, "_supports_sdpa", True) \
            or getattr(cls, "_supports_flash_attn", True):
        return attn_impl
    if notes is not None:
        notes.append(f"{cfg.model_type}: transformers has only an eager attention path (no SDPA, no "
                     "flash-attention); built without an attn_implementation, so transformers runs eager where "
                     "it must (scores materialised) and SDPA in any sub-model that has it.")
    return None


@contextlib.contextmanager
def _module_to_in_place():
    """Some models cast a sub-module while they build it (DeepSeek-V4's `DeepseekV4RMSNorm(...).to(dtype=
    torch.float32)`, HY-V4's hyper-connections, Inkling's short convolutions; transformers 5.25), and peft
    moves each new adapter with Module.to(). On fake parameters `Module._apply` must swap tensors, which fails
    once the allocation tracker holds a weak reference to them ("Couldn't swap ...weight"). There is one
    (fake) cpu device, so a move is a no-op; a dtype cast is done as `.data = .data.to(dtype)` on floating
    parameters and buffers, as Module.to casts them: the same new tensor, the old one freed."""
    import torch
    from torch import nn
    orig = nn.Module.to

    def to(self, *args, **kwargs):
        _device, dtype, _nb, _fmt = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            for mod in self.modules():
                for p in mod._parameters.values():
                    if p is not None and p.is_floating_point() and p.dtype != dtype:
                        p.data = p.data.to(dtype)
                for k, b in mod._buffers.items():
                    if b is not None and b.is_floating_point() and b.dtype != dtype:
                        mod._buffers[k] = b.to(dtype)
        return self

    nn.Module.to = to
    try:
        yield
    finally:
        nn.Module.to = orig


@contextlib.contextmanager
def _sdpa_for_flash_only_models(cfg, attn_impl: str, notes):
    """Gemma 2 (attention logit soft-capping) and gpt-oss (attention sinks) have flash-attention and
    eager paths but no SDPA path in transformers, and flash-attention cannot run on CPU. The flash
    kernels apply the soft-cap / sink inside the kernel and save what SDPA's fused kernel saves
    (q, k, v, output, fp32 log-sum-exp), so the trace stands in SDPA for them (memory only: the
    soft-cap and sinks are dropped from the math; sinks are a per-head parameter)."""
    from transformers import AutoModelForCausalLM
    cls = _model_class(AutoModelForCausalLM, cfg) if attn_impl == "sdpa" else None
    if cls is None or getattr(cls, "_supports_sdpa", True):
        yield
        return
    _install_sdpa_standin()
    cls._gpuplan_flash_standin = True
    patched = [c for c in cls.__mro__ if "_supports_sdpa" in vars(c)]
    saved = {c: vars(c)["_supports_sdpa"] for c in patched}
    for c in patched:
        c._supports_sdpa = True
    restore_classes = _flash_classes_as_sdpa(cls)
    if notes is not None:
        notes.append(f"{cfg.model_type}: transformers has no SDPA path (soft-capping/sinks live in its "
                     "flash-attention and eager paths); traced with SDPA standing in for the flash kernel, "
                     "which saves the same tensors (output + log-sum-exp).")
    try:
        yield
    finally:
        for c, v in saved.items():
            c._supports_sdpa = v
        restore_classes()
        del cls._gpuplan_flash_standin


def _flash_classes_as_sdpa(cls):
    """A model that keeps attention classes of its own, keyed by attn_implementation, with eager and
    flash-attention entries only (GPT-Neo's GPT_NEO_ATTENTION_CLASSES, modeling_gpt_neo.py, transformers 5.25):
    its 'sdpa' entry is made the flash class, whose call to the module's `_flash_attention_forward` (inputs
    batch x seq x heads x dim) runs SDPA instead (the same saved tensors as the flash kernel: output and
    log-sum-exp). Returns the function that undoes it."""
    import sys
    import torch.nn.functional as F
    mod = sys.modules.get(cls.__module__)
    tables = [v for k, v in vars(mod).items() if k.endswith("ATTENTION_CLASSES") and isinstance(v, dict)
              and "flash_attention_2" in v and "sdpa" not in v] if mod is not None else []
    if not tables:
        return lambda: None

    def flash_standin(query, key, value, attention_mask, query_length, *args, dropout=0.0, softmax_scale=None,
                      is_causal=True, **kwargs):
        causal = is_causal and query.shape[1] > 1 and query.shape[1] == key.shape[1]
        out = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                             dropout_p=dropout, is_causal=causal, scale=softmax_scale)
        return out.transpose(1, 2)

    # the module imports _flash_attention_forward only where flash-attn is installed (modeling_gpt_neo.py:
    # `if is_flash_attn_available()`), so on CPU the name is otherwise undefined: the stand-in stays for the
    # forward passes (the class is picked at build time only)
    if "_flash_attention_forward" not in vars(mod):
        mod._flash_attention_forward = flash_standin
    for t in tables:
        t["sdpa"] = t["flash_attention_2"]

    def restore():
        for t in tables:
            t.pop("sdpa", None)
    return restore


def _install_sdpa_standin() -> None:
    """Wrap transformers' SDPA attention once: for modules marked `_gpuplan_flash_standin` drop the
    `softcap` (Gemma 2) and `s_aux` (gpt-oss sinks) arguments that only flash/eager kernels take.
    Unmarked modules go straight through."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    inner = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if getattr(inner, "_gpuplan_wrapper", False):
        return

    def sdpa_standin(module, *args, **kwargs):
        if getattr(module, "_gpuplan_flash_standin", False):
            kwargs.pop("softcap", None)
            kwargs.pop("s_aux", None)
        return inner(module, *args, **kwargs)

    sdpa_standin._gpuplan_wrapper = True
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa_standin


def _tf_version() -> str:
    import transformers
    return transformers.__version__


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


@contextlib.contextmanager
def _quiet():
    """transformers logs and warns a lot while building models from bare configs."""
    tf_logger = logging.getLogger("transformers")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        tf_logger.setLevel(level)


def check_model_input(spec: Any) -> None:
    if not getattr(spec, "config", None):
        raise InputError(f"model '{getattr(spec, 'name', spec)}'",
                         "has no HF config to build from (trace needs the config.json keys).",
                         "pass a registry name, an HF repo id, or a path to config.json.")

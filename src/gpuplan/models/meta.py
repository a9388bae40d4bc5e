"""Exact parameter count by instantiating the HF model on the meta device (optional extra: trace).

No weights are downloaded and no memory is allocated. Keys that do not change parameter shapes
but trip some transformers versions (quantization_config, rope_scaling) are dropped first.
Persistent buffers that checkpoints store (DeepSeek-V3's e_score_correction_bias) are reported
separately, because HF registers them as buffers while DeepSeek's reference code has parameters.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import GpuplanError, MissingExtraError, UnsupportedError

_DROP = ("quantization_config", "rope_scaling", "auto_map")


# model types whose causal-LM class is the text model alone (MllamaForCausalLM): the checkpoint a user loads,
# vision tower and projector included, is the image-text-to-text class (MllamaForConditionalGeneration).
# The count and the fake-tensor trace (trace/_build.py) both build that one.
TEXT_ONLY_CAUSAL_LM = ("mllama",)


def build_meta_model(config: Mapping[str, Any], dtype: str | None = None):
    """The transformers model of `config` on the meta device. `dtype` ("bfloat16"): built under that default
    dtype, as `from_config(dtype=...)` builds it (modeling_utils local_torch_dtype): a module the model's own code
    creates in another dtype keeps it (Hunyuan-V4's fp32 lm_head)."""
    if dtype is not None:
        import torch
        old = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            return build_meta_model(config)
        finally:
            torch.set_default_dtype(old)
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtraError("counting on the meta device", "trace", "torch and transformers") from None
    fields = {k: v for k, v in config.items() if k not in _DROP}
    model_type = fields.pop("model_type", None)
    # Kimi-K2 names model_type "kimi_k2" with architectures ["DeepseekV3ForCausalLM"] and auto_map
    # configuration_deepseek.DeepseekV3Config (its config.json): transformers knows it as deepseek_v3
    model_type = {"kimi_k2": "deepseek_v3"}.get(model_type, model_type)
    try:
        cfg = transformers.AutoConfig.for_model(model_type, **fields)
        with torch.device("meta"):
            if model_type == "gemma3":
                return transformers.Gemma3ForConditionalGeneration(cfg)
            if model_type in TEXT_ONLY_CAUSAL_LM:
                return transformers.AutoModelForImageTextToText.from_config(cfg)
            if getattr(cfg, "is_encoder_decoder", False):
                try:
                    return transformers.AutoModelForSeq2SeqLM.from_config(cfg)
                except ValueError:      # Whisper & co.: a speech encoder in front of the text decoder
                    return transformers.AutoModelForSpeechSeq2Seq.from_config(cfg)
            try:
                return transformers.AutoModelForCausalLM.from_config(cfg)
            except ValueError as err:
                # vision-language models (Qwen2-VL, Qwen2.5-VL, LLaVA ...): their image-text-to-text class
                if "Unrecognized configuration class" not in str(err):
                    raise
                return transformers.AutoModelForImageTextToText.from_config(cfg)
    except GpuplanError:
        raise
    except Exception as err:
        raise UnsupportedError(f"model_type '{model_type}'", f"transformers {transformers.__version__} cannot build it "
                               f"({type(err).__name__}: {str(err)[:200]}).",
                               "upgrade transformers, or count with gpuplan's own formula (drop --meta).") from None


def meta_param_count(config: Mapping[str, Any]) -> dict[str, int]:
    model = build_meta_model(config)
    params = sum(p.numel() for p in model.parameters())
    stored = sum(b.numel() for name, b in model.named_buffers() if name.endswith("e_score_correction_bias"))
    # T5 v1.1 / Flan-T5 / mT5 checkpoints store their own lm_head.weight (config: tie_word_embeddings false),
    # but transformers 5.x's T5Config/MT5Config force the tie (configuration_t5.py __post_init__): the
    # checkpoint's extra matrix is counted as a stored tensor
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if (getattr(model.config, "is_encoder_decoder", False) and config.get("tie_word_embeddings") is False
            and head is not None and head.weight is model.get_input_embeddings().weight):
        stored += head.weight.numel()
    return {"parameters": params, "stored_buffers": stored, "parameters_plus_stored_buffers": params + stored}

"""Traced runs of a vision-language model: a training step and a prefill with images.

The forward of a VLM reads values that fake tensors do not have: Qwen2-VL turns `image_grid_thw` into
attention sequence boundaries (`cu_seqlens`, `lengths.tolist()`), 2-D rotary positions (`grid_thw[i].item()`)
and the M-RoPE index of every text/image token; LLaVA checks that the image-token count matches the feature
count. So these runs use real CPU tensors (the tracker counts real and fake storages alike, DESIGN §6), on a
configuration small enough for the CPU (reduced layers and vocabulary); the byte counts per layer and per
position are those of the full-size shapes.

Inputs are built as the model's processor builds them: for dynamic resolution (Qwen2-VL family) flattened
patches (positions x C·t·p², fp32 like the image processor's output) with `image_grid_thw` and
`mm_token_type_ids`; for a fixed-size tower (LLaVA) a [images, C, S, S] fp32 pixel tensor. Image tokens sit
inside the text, labels equal the inputs (HF Trainer), no attention mask (unpadded).
"""
from __future__ import annotations

import contextlib

import torch

from ._build import _quiet, hf_config
from ._run import (CUDA_BLOCK, _DTYPES, _cuda_kernel_semantics, _dtype_setup, _label_model, breakdown,
                   make_tagger, optimizer_step_labelled)
from ._tracker import AllocTracker
from .result import TraceResult


def _inputs(spec, cfg, scenario, batch: int, text_len: int, dtype_pixels=torch.float32):
    """(kwargs for model(...), decoder sequence length) for `batch` samples with the scenario's images."""
    from ..estimate.vision import image_load
    load = image_load(scenario, spec)
    tower = spec.vision_tower
    vocab = cfg.get_text_config().vocab_size
    img_id = getattr(cfg, "image_token_id", None)
    if img_id is None:
        img_id = getattr(cfg, "image_token_index")
    S = text_len + load.tokens
    ids = torch.randint(0, min(vocab, img_id) - 8 if img_id > 8 else vocab, (batch, S))
    per_img = load.tokens // load.images
    for n in range(load.images):       # each image's tokens in a run of their own, a text token between runs
        start = 1 + n * (per_img + 1)
        ids[:, start:start + per_img] = img_id
    kw = {"input_ids": ids}
    if tower.image == "dynamic":
        per = load.positions // load.images
        side = int(round(per ** 0.5))
        while per % side:
            side -= 1
        grid = torch.tensor([[1, side, per // side]] * (load.images * batch))
        pix = torch.randn(load.positions * batch, tower.channels * tower.temporal_patch * tower.patch ** 2,
                          dtype=dtype_pixels)
        kw.update(pixel_values=pix, image_grid_thw=grid, mm_token_type_ids=(ids == img_id).long())
    elif tower.image == "cross":
        # MllamaProcessor: pixels [batch, images, tiles, C, S, S] (every image padded to max_num_tiles), the
        # aspect-ratio id of each image (the last supported ratio: all tiles used), which tiles are real, and
        # which images each text token may attend to (all: one image-token run at the start)
        n, tiles = load.images, tower.max_tiles
        kw.update(pixel_values=torch.randn(batch, n, tiles, tower.channels, tower.image_size, tower.image_size,
                                           dtype=dtype_pixels),
                  aspect_ratio_ids=torch.full((batch, n), len(cfg.vision_config.supported_aspect_ratios)),
                  aspect_ratio_mask=torch.ones(batch, n, tiles, dtype=torch.long),
                  cross_attention_mask=torch.ones(batch, S, n, tiles, dtype=torch.long))
    else:
        kw.update(pixel_values=torch.randn(load.images * batch, tower.channels, tower.image_size, tower.image_size,
                                           dtype=dtype_pixels))
    return kw, S


def _build(spec, cfg, dtype):
    from transformers import AutoModelForImageTextToText
    with _quiet():
        return AutoModelForImageTextToText.from_config(cfg, dtype=dtype, attn_implementation="sdpa")


def train_step(scenario, spec, iterations: int = 2) -> TraceResult:
    """`iterations` training steps (forward with labels, backward, AdamW step, zero_grad) with images."""
    notes: list[str] = []
    train = scenario.train
    if train.method != "full":
        from ..errors import UnsupportedError
        raise UnsupportedError("VLM trace with method " + train.method, "LoRA adapters are not applied in the "
                               "vision-language trace.", "trace method full; the estimate covers LoRA (frozen tower).")
    cfg = hf_config(spec, "sdpa")
    param_dtype, autocast_dtype = _dtype_setup(train, notes)
    tracker = AllocTracker(round_to=CUDA_BLOCK, tagger=make_tagger(cfg.get_text_config().vocab_size))
    with _cuda_kernel_semantics(notes), tracker:
        model = _build(spec, cfg, param_dtype)
        model.train()
        if train.recompute != "none":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        _label_model(tracker, model)
        from ._optim import make_optimizers
        opt = make_optimizers(train.optimizer, train.optimizer_impl, model.parameters(), notes)
        for it in range(iterations):
            if it == iterations - 1:
                tracker.reset_peak()
            tracker.set_phase("forward")
            kw, _S = _inputs(spec, cfg, scenario, train.micro_batch, train.seq_len)
            for v in kw.values():
                tracker.label(v, "inputs")
            labels = kw["input_ids"].clone()
            if spec.vision_tower.image == "cross":
                # mllama's <|image|> id (image_token_index = vocab_size) has no lm_head row: fine-tuning
                # collators set its labels to -100 (the loss ignores it)
                labels[labels == cfg.image_token_index] = -100
            tracker.label(labels, "inputs")
            ctx = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
            with ctx:
                out = model(**kw, labels=labels, use_cache=False)
            loss = out.loss
            del out
            tracker.set_phase("backward")
            loss.backward()
            # HF Trainer's training_step holds the batch (`inputs`: pixels included) until the backward returns
            del loss, kw, labels
            for p in model.parameters():
                if p.grad is not None:
                    tracker.label(p.grad, "gradients")
            optimizer_step_labelled(tracker, opt)
    comps, details = breakdown(tracker)
    return TraceResult(peak_bytes=tracker.peak, components=comps, phase=tracker.peak_phase,
                       phases=dict(tracker.phase_peaks), details=details, method_notes=notes,
                       model=spec.name, task=scenario.task)


def prefill(scenario, spec) -> TraceResult:
    """One HF prefill (no_grad, logits of the last position, a DynamicCache) of `concurrency` requests."""
    inf = scenario.infer
    cfg = hf_config(spec, "sdpa")
    cfg.get_text_config().use_cache = True
    notes: list[str] = []
    compute = _DTYPES.get("bf16")
    tracker = AllocTracker(round_to=CUDA_BLOCK, tagger=make_tagger(cfg.get_text_config().vocab_size))
    with _cuda_kernel_semantics(notes), tracker:
        model = _build(spec, cfg, compute)
        model.eval()
        _label_model(tracker, model)
        tracker.reset_peak()
        with torch.no_grad():
            tracker.set_phase("prefill")
            kw, S = _inputs(spec, cfg, scenario, inf.concurrency, inf.prompt_len, dtype_pixels=torch.float32)
            for v in kw.values():
                tracker.label(v, "inputs")
            out = model(**kw, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            kv = 0
            for layer in getattr(cache, "layers", []):
                for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                    if isinstance(t, torch.Tensor):
                        tracker.label(t, "kv_cache")
                        kv += t.untyped_storage().nbytes()
    comps, details = breakdown(tracker)
    return TraceResult(peak_bytes=tracker.peak, components=comps, phase=tracker.peak_phase,
                       phases=dict(tracker.phase_peaks), details=details, kv_cache_bytes=kv,
                       method_notes=notes, model=spec.name, task=scenario.task)

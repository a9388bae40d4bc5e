"""Images in a vision-language model: decoder tokens, and the vision tower's FLOPs and activation memory.

A scenario's `data` block says how many images each training sequence (or serving request) carries and
how large they are; models/vision.VisionTower says what the processor and tower make of one image. Three
things follow (docs/vision-language.md):

1. The image tokens join the decoder sequence: the language model runs over text + image tokens, so its KV
   cache, activations, logits (HF computes logits at every position, image positions included, and masks
   their labels) and FLOPs grow as for a longer text (`decoder_scenario`). Cross-attention models
   (Llama-3.2-Vision) put one `<|image|>` token per image into the sequence; the image features are the keys
   and values of the decoder's cross-attention layers instead (`cross_kv_bytes`, `cross_saved_bytes`,
   `cross_gemms`).
2. The tower runs over its own positions (patches, per image or tile): its FLOPs (`tower_gemms`,
   `tower_flops_forward`) are timed with the same GEMM roofline as the decoder's.
3. Its activations: in training, every tower layer's saved tensors until the backward reaches the tower,
   which is last (`tower_saved_bytes`); in a prefill, one layer's working set (`tower_prefill_bytes`).

Whether the tower trains: with method full its weights have gradients and optimizer states (memory.py
counts them already), so its activations are saved; with LoRA/QLoRA the adapters sit on the decoder's
linears only (memory.lora_params counts decoder layers), the tower is frozen and its input (pixels) needs
no gradient, so autograd saves nothing in it and its backward does not run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageLoad:
    """What the images of one sample (training sequence or serving request) cost in counts."""
    images: int
    tokens: int             # decoder tokens of all its images
    positions: int          # tower positions (patches, all tiles, CLS included)
    sequences: int          # separate attention sequences in the tower (images x tiles)
    projector_rows: int     # rows the projector's linears run over
    trainable: bool         # the tower's weights train (its backward runs, its activations are saved)
    cross_tokens: int = 0   # keys/values of the decoder's cross-attention layers (Llama-3.2-Vision), else 0


def image_load(scn: Any, model: Any) -> ImageLoad | None:
    """The images of one sample, or None when the scenario has none."""
    d = getattr(scn, "data", None)
    if d is None or d.images_per_sample == 0:
        return None
    tower = getattr(model, "vision_tower", None)
    if tower is None:
        from ..errors import InputError
        raise InputError("data.images_per_sample", f"is {d.images_per_sample}, but model '{model.name}' has no "
                         "vision tower that gpuplan models.", "remove data.images_per_sample, or use a vision-language "
                         "model (Qwen2-VL, Qwen2.5-VL, LLaVA-1.5, LLaVA-NeXT, Gemma 3).")
    if d.image_tokens is not None:
        one = tower.from_tokens(d.image_tokens)
    else:
        one = tower.per_image(d.image_height, d.image_width, min_pixels=d.min_pixels, max_pixels=d.max_pixels)
    n = d.images_per_sample
    trainable = scn.is_training and scn.train.method == "full"
    return ImageLoad(images=n, tokens=n * one["tokens"], positions=n * one["positions"],
                     sequences=n * one["sequences"], projector_rows=n * one["projector_rows"], trainable=trainable,
                     cross_tokens=n * one["cross_tokens"])


def decoder_scenario(scn: Any, load: ImageLoad) -> Any:
    """The scenario the language model sees: each sequence (request prompt) longer by the image tokens."""
    if scn.is_training:
        return scn.replace(train={"seq_len": scn.train.seq_len + load.tokens}, data=None)
    return scn.replace(infer={"prompt_len": scn.infer.prompt_len + load.tokens}, data=None)


# ---- FLOPs ---------------------------------------------------------------------------------------------

def _attention_keys(tower: Any, load: ImageLoad, layer: int) -> float:
    """Keys each position attends to in `layer`: its whole image (tile), or its window."""
    per_seq = load.positions / max(load.sequences, 1)
    if tower.window and layer not in tower.full_attention_layers:
        return min(float(tower.window), per_seq)
    return per_seq


def tower_gemms(tower: Any, load: ImageLoad) -> list[tuple[float, float, float, float]]:
    """The tower's matrix products for one sample's images as (m, k, n, count) (forward):
    patch embedding (a Conv with stride = kernel: a GEMM over C·t·p² inputs), per layer q/k/v/o and the MLP,
    the attention scores and weighted sum per head (m = positions, k = head dim, n = keys), the projector."""
    P, hv, i = float(load.positions), tower.hidden, tower.intermediate
    out = [(P, tower.channels * tower.temporal_patch * tower.patch ** 2, hv, 1.0)]
    n_mlp_in = 2 if tower.gated_mlp else 1
    L = tower.total_layers
    out += [(P, hv, hv, 4.0 * L), (P, hv, i, n_mlp_in * L), (P, i, hv, 1.0 * L)]
    d = hv // tower.heads
    for layer in range(L):
        keys = _attention_keys(tower, load, layer)
        # QK^T and AV per head: 2 GEMMs of P x d x keys
        out.append((P, d, keys, 2.0 * tower.heads))
    out += [(float(load.projector_rows), k, n, 1.0) for k, n in tower.projector]
    return out


def tower_flops_forward(tower: Any, load: ImageLoad) -> float:
    return sum(2.0 * m * k * n * c for m, k, n, c in tower_gemms(tower, load))


# ---- memory --------------------------------------------------------------------------------------------

def _mlp_saved(tower: Any) -> float:
    """Bytes per position per layer the MLP saves (16-bit): fc1 input is counted with the norm output.
    quick_gelu (x * sigmoid(1.702 x), transformers activations.QuickGELUActivation): fc1 out, sigmoid out,
    product (fc2 input) = 3 i-sized; gelu / gelu_pytorch_tanh (one aten op): fc1 out, its output = 2;
    gated silu (Qwen2.5-VL: down(silu(gate(x)) * up(x))): gate, up, silu out, product = 4."""
    if tower.gated_mlp:
        n = 4
    elif tower.activation == "quick_gelu":
        n = 3
    else:
        n = 2
    return 2.0 * n * tower.intermediate


def _norm_saved(tower: Any) -> float:
    """One norm over a position: nn.LayerNorm (native_layer_norm) saves its 16-bit input and fp32 mean and
    rstd (2h + 8); Qwen2RMSNorm saves the fp32 copy of its input, the normalised 16-bit tensor before the
    weight and the fp32 rsqrt (4h + 2h + 4)."""
    h = tower.hidden
    return 6.0 * h + 4.0 if tower.norm == "rms" else 2.0 * h + 8.0


def layer_saved_bytes_per_position(tower: Any) -> float:
    """Saved bytes per tower position per layer, 16-bit training, no recompute (transformers 5.24 modeling
    code; the saved-tensor listing of one Qwen2-VL vision block is in docs/vision-language.md):
      two norms (_norm_saved) and their 16-bit outputs, the inputs of qkv and of the MLP (2 x 2h);
      q, k, v (one qkv output of 6h whose v view keeps it alive, or three 2h outputs): 6h;
      with 2-D RoPE the rotated 16-bit q and k are new tensors the attention saves (2 x 2h); their fp32
      products with cos/sin are not saved (cos and sin need no gradient, so mul keeps only them, once per
      tower: `tower_saved_bytes`);
      fused attention (CUDA flash / memory-efficient, the CPU flash kernel alike): its output 2h and the fp32
      log-sum-exp per head (4a); the contiguous copy that enters the output projection: 2h;
      the MLP (_mlp_saved)."""
    h = float(tower.hidden)
    b = 2 * _norm_saved(tower) + 2 * 2 * h + 6 * h + 2 * h + 4.0 * tower.heads + 2 * h + _mlp_saved(tower)
    if tower.rope:
        b += 4 * h
    return b


def layer_backward_bytes(tower: Any, load: ImageLoad) -> float:
    """Gradient buffers alive inside one tower layer's backward over one sample's positions: the gradient of
    the MLP's hidden and of its activation (2 x 2i; gated: 3 x 2i) beside the gradients of the layer's input
    and of the residual branch (2 x 2h) (measured: 3,250 bytes per position for h=160, i=640)."""
    h, i = float(tower.hidden), float(tower.intermediate)
    return float(load.positions) * ((6 if tower.gated_mlp else 4) * i + 4 * h)


def tower_recompute(tower: Any, recompute: str) -> str:
    """The recompute the tower's layers get: gradient checkpointing reaches only GradientCheckpointingLayers
    (transformers modeling_layers.py), which Llama-3.2-Vision's vision layers are not."""
    return recompute if tower.checkpointed else "none"


def tower_saved_bytes(tower: Any, load: ImageLoad, recompute: str) -> float:
    """Bytes the tower keeps for its backward over one sample's images (0 when it does not train).
    Full recompute: the vision blocks are GradientCheckpointingLayers too (gradient_checkpointing_enable
    covers them), so each keeps only its 16-bit input. Plus the patch embedding's input (the 16-bit pixel
    copy, C·t·p² per position) and the projector's saved inputs."""
    if not load.trainable:
        return 0.0
    P = float(load.positions)
    L = tower.total_layers
    recompute = tower_recompute(tower, recompute)
    per_layer = 2.0 * tower.hidden if recompute == "full" else layer_saved_bytes_per_position(tower)
    pixels = 2.0 * tower.channels * tower.temporal_patch * tower.patch ** 2
    if tower.image == "cross":
        return P * L * per_layer + _tiled_tower_saved(tower, load, recompute) + 2.0 * tower.projector[0][0] * float(
            load.projector_rows)
    if tower.rope:
        # the fp32 cos and sin tables (head_dim each per position), computed once and saved by every layer
        pixels += 2 * 4.0 * (tower.hidden // tower.heads)
    proj = 0.0
    # projector: each Linear saves its input; the merger's norm (Qwen) its input and statistics; the act
    # between the Linears its input (counted once: it is the first Linear's output)
    rows = float(load.projector_rows)
    for k, _n in tower.projector:
        proj += 2.0 * k * rows
    if len(tower.projector) > 1:
        proj += 2.0 * tower.projector[0][1] * rows
    return P * (L * per_layer + pixels) + proj


def _tile_patches(tower: Any, load: ImageLoad) -> float:
    """Patches of all tiles of one sample's images (Llama-3.2-Vision: tiles x (S/p)², CLS and padding not)."""
    side = tower.image_size // tower.patch
    return float(load.images * tower.max_tiles * side * side)


def _tiled_tower_saved(tower: Any, load: ImageLoad, recompute: str) -> float:
    """What Llama-3.2-Vision's tower saves besides its layers (MllamaVisionModel.forward, transformers 5.25
    models/mllama/modeling_mllama.py), per sample:
      the 16-bit pixel copy the patch convolution saves (C·p² per patch);
      the gathered tile position embedding, saved by its product with the tanh gate
      (MllamaPrecomputedPositionEmbedding: 2h per unpadded position);
      layernorm_pre over the unpadded and layernorm_post over the padded positions (2h + 8 each);
      the additive attention mask of each image, P_img x P_img in the 16-bit dtype, which every layer's
      attention keeps (_prepare_aspect_ratio_attention_mask);
      the gated global layers: `gate.tanh() * x` after attention and after the MLP saves both outputs (2 x 2h).
    Under full recompute the layers keep only their inputs; the rest is outside the checkpointed layers."""
    h = float(tower.hidden)
    unpadded = float(load.cross_tokens)
    per_image = float(load.positions) / max(load.images, 1)
    out = 2.0 * tower.channels * tower.patch ** 2 * _tile_patches(tower, load)
    out += unpadded * (2 * h + (2 * h + 8)) + float(load.positions) * (2 * h + 8)
    out += load.images * 2.0 * per_image * per_image
    if recompute != "full":
        out += float(load.positions) * tower.extra_layers * 4 * h
    return out


def pixel_input_bytes(tower: Any, load: ImageLoad) -> float:
    """The image processor's output the step (request) holds as input: fp32 pixels, C·t·p² per patch
    (Qwen2-VL's flattened patches; CLIP's [images, C, S, S] is the same count: S² = patches·p²; Llama-3.2-
    Vision's [images, tiles, C, S, S])."""
    if tower.image == "cross":
        return 4.0 * tower.channels * tower.patch ** 2 * _tile_patches(tower, load)
    cls = load.sequences if tower.class_token else 0
    return 4.0 * (load.positions - cls) * tower.channels * tower.temporal_patch * tower.patch ** 2


def tower_time_forward(tower: Any, load: ImageLoad, gemm: Any) -> float:
    """Seconds of the tower's forward over one sample's images; `gemm(m, k, n, count)` prices one GEMM shape
    (the decoder's roofline, estimate/speed.gemm_time)."""
    return sum(gemm(m, k, n, c) for m, k, n, c in tower_gemms(tower, load))


def tower_prefill_bytes(tower: Any, load: ImageLoad) -> float:
    """Peak of the tower's forward without gradients over one request's images (pixels not included: they are
    `pixel_input_bytes`), per position, at whichever is larger (measured op by op on a traced Qwen2-VL tower,
    docs/vision-language.md):
      attention: the residual stream and the norm output (2 x 2h), the qkv output (6h); with 2-D RoPE
        apply_rotary_pos_emb_vision's fp32 temporaries: q.float(), k.float(), q*cos, rotate_half(q) and its
        product with sin alive together (5 x 4h), and the fp32 cos/sin tables with their recomposition copies
        (4 x 4d);
      MLP: the residual and the norm output (2 x 2h) and the MLP's live intermediates: quick_gelu fc1 output,
        sigmoid and product (3 x 2i); gelu (one op) 2 x 2i; gated silu gate, silu, up, product (4 x 2i);
      and, where the model holds it (`pixels_cast_held`), the 16-bit copy of the pixels (C·t·p²)."""
    h, i, d = float(tower.hidden), float(tower.intermediate), float(tower.hidden // tower.heads)
    attn = 4 * h + 6 * h + ((20 * h + 16 * d) if tower.rope else 2 * h)
    n_i = 4 if tower.gated_mlp else (3 if tower.activation == "quick_gelu" else 2)
    mlp = 4 * h + 2 * n_i * i + (8 * d if tower.rope else 0.0)
    held = 2.0 * tower.channels * tower.temporal_patch * tower.patch ** 2 if tower.pixels_cast_held else 0.0
    if tower.image == "cross":
        return _tiled_tower_prefill(tower, load, max(attn, mlp))
    return float(load.positions) * (max(attn, mlp) + held)


def _tiled_tower_prefill(tower: Any, load: ImageLoad, layer_bytes: float) -> float:
    """Llama-3.2-Vision's tower forward without gradients (MllamaVisionModel.forward): MllamaVisionEncoder
    returns every layer's output (`encoder_states`), and the local encoder's result stays referenced until the
    tower returns, so the local and global layers' outputs accumulate (2h per position each). At the end, while
    they are still referenced, the padding is sliced off the final state (a copy, 2h·X), the
    `intermediate_layers_indices` outputs are stacked (2h·n per position) and copied without their padding
    (2h·n·X; the stack is then freed), and both are concatenated (2h·(1 + n)·X). The additive attention mask
    (P_img² x 2 bytes per image) lives through the whole forward; it is made as `m @ m.T * finfo.min`
    (_prepare_aspect_ratio_attention_mask), so while it is built the product and the scaled copy exist
    together beside the padded embeddings (2h per position).
    The peak is the largest of that moment, the last layer's working set and the end."""
    P, X, h, n = float(load.positions), float(load.cross_tokens), float(tower.hidden), tower.intermediate_outputs
    L = tower.total_layers
    per_image = P / max(load.images, 1)
    mask = load.images * 2.0 * per_image * per_image
    last_layer = P * (2 * h * (L - 1) + layer_bytes)
    end = P * 2 * h * L + max(2 * h * X * (1 + n) + 2 * h * n * P, 2 * h * X * (2 + 2 * n))
    return max(2 * mask + 2 * h * P, mask + max(last_layer, end))


# ---- cross-attention decoders (Llama-3.2-Vision) -------------------------------------------------------
# MllamaTextCrossAttention (transformers 5.25 models/mllama/modeling_mllama.py): q_proj over the text,
# q_norm; k_proj and v_proj over the image features (the projector's output, `cross_attention_states`),
# k_norm; attention with the processor's cross-attention mask; o_proj. MllamaCrossAttentionDecoderLayer adds
# `gate.tanh() *` after the attention and after the MLP and multiplies the MLP output by the
# full-text-row mask. Its keys and values are cached per request (cache.update of the image's K and V).

def cross_kv_bytes(model: Any, load: ImageLoad, bytes_per_element: float = 2.0) -> float:
    """Per sample (request): the normed keys and the values of its image features in every cross-attention
    layer, KV heads wide. Fixed by the images, not growing with the output."""
    tower = model.vision_tower
    return (len(tower.cross_layers) * float(load.cross_tokens) * model.num_kv_heads
            * (model.head_dim + model.v_head_dim) * bytes_per_element)


def cross_saved_bytes(model: Any, load: ImageLoad, text_tokens: int, recompute: str) -> float:
    """Bytes the cross-attention layers save for backward per sample, beyond what the decoder's per-layer
    formula counts for them as self-attention layers (saved-tensor listing of a MllamaCrossAttentionDecoderLayer,
    tests/test_vision.py), 16-bit:
      shared by all of them: the projector output (k/v input, 2H per image feature) and the 4-D additive
      cross-attention mask (text x image features, 2 bytes each);
      per layer and image feature: k_norm's fp32 input (4 kv d) and rsqrt (4 kv), its 16-bit normalised
      input to the weight (2 kv d), and K and V as the attention saves them: transformers' SDPA path repeats
      them to all heads when a mask is passed (integrations/sdpa_attention.use_gqa_in_sdpa), 2 a d + 2 a vd;
      per layer and text token, against a self-attention layer: q_norm (fp32 q 4 a d, its 16-bit normalised
      copy 2 a d, rsqrt 4 a), the two gate products (2 x 2H), the full-row mask (2), and no text K and V
      (- 2 kv (d + vd)); and the two tanh(gate) scalars.
    Only when the tower trains (its output then needs gradients); under full recompute the layers keep only
    their inputs, which are the shared tensors."""
    tower = model.vision_tower
    if not tower.cross_layers or not load.trainable:
        return 0.0
    n = len(tower.cross_layers)
    X, T = float(load.cross_tokens), float(text_tokens)
    a, kv, d, vd, H = model.num_heads, model.num_kv_heads, model.head_dim, model.v_head_dim, model.hidden_size
    shared = 2.0 * H * X + 2.0 * T * X
    if recompute == "full":
        return shared
    image = X * (4 * kv * d + 4 * kv + 2 * kv * d + 2 * a * d + 2 * a * vd)
    text = T * (4 * a * d + 2 * a * d + 4 * a + 4 * H + 2 - 2 * kv * (d + vd))
    gates = 2 * 2.0          # the two 16-bit tanh(gate) scalars the products save
    return shared + n * (image + text + gates)


def cross_gemms(model: Any, load: ImageLoad, text_tokens: int) -> list[tuple[float, float, float, float]]:
    """The cross-attention layers' products that run over the image features, per sample (forward): k_proj
    and v_proj (X x H x kv·d), and each text token's scores against and weighted sum of the X keys per head.
    q_proj and o_proj run over the text tokens and are priced with the decoder."""
    tower = model.vision_tower
    if not tower.cross_layers:
        return []
    n = float(len(tower.cross_layers))
    X, H = float(load.cross_tokens), model.hidden_size
    kvd = model.num_kv_heads * model.head_dim
    return [(X, H, kvd, 2.0 * n), (float(text_tokens), model.head_dim, X, 2.0 * n * model.num_heads)]

"""Vision towers of vision-language models: their shape and how many tokens an image becomes.

This module reads the `vision_config` (and the few top-level keys that say how image features enter the
language model) of a HF config.json; estimate/vision.py turns a `VisionTower` into FLOPs and activation
bytes without knowing any family name. Defaults are those of the transformers 5.24.0 config classes
(Qwen2VLVisionConfig, Qwen2_5_VLVisionConfig, CLIPVisionConfig, SiglipVisionConfig, MllamaVisionConfig,
LlavaConfig, LlavaNextConfig), so a key missing from a config.json takes the value transformers gives it.

How an image becomes tokens (`VisionTower.image`), from the processors and models of transformers 5.24.0:
* "fixed" — CLIP in LLaVA-1.5 (`LlavaForConditionalGeneration`): the image processor resizes and crops to
  `image_size` (336), the tower sees (336/14)² = 576 patches plus the class token, and the default
  `vision_feature_select_strategy` drops the class token: 576 tokens per image
  (models/llava/modeling_llava.py get_image_features). Gemma 3's SigLIP: (896/14)² = 4096 patches, average-
  pooled to `mm_tokens_per_image` (256) (models/gemma3/modeling_gemma3.py Gemma3MultiModalProjector).
* "dynamic" — Qwen2-VL / Qwen2.5-VL: `smart_resize` (models/qwen2_vl/image_processing_qwen2_vl.py) rounds
  height and width to multiples of patch·merge = 28 inside [min_pixels, max_pixels] (defaults 56·56 and
  28·28·1280); the tower runs over (H/14)·(W/14) patches (an image is repeated to `temporal_patch_size`
  frames, one temporal patch), and the PatchMerger folds 2×2 patches into one token: H/28 · W/28 tokens.
* "anyres" — LLaVA-NeXT: `select_best_resolution` picks a grid pinpoint, the image is cut into
  (pinpoint/336)² tiles plus one downscaled base image, each through the tower (577 positions);
  the tokens are the base image's 576 plus the unpadded grid features and one newline per grid row
  (models/llava_next/processing_llava_next.py _get_number_of_features, image_processing_utils.py).
* "cross" — Llama-3.2-Vision (mllama): the processor pads every image to `max_num_tiles` (4) tiles of
  image_size (560); each tile gives (560/14)² + 1 = 1601 positions, padded to a multiple of 8 (1608) inside
  the tower, whose local and global transformers attend over all tiles of the image at once (4 x 1608 = 6432
  positions, MllamaVisionModel.forward: F.pad, then `view(batch * media, -1, dim)`). The padding is sliced
  off again: 4 x 1601 = 6404 features per image, each the concatenation of the final hidden state and the
  `intermediate_layers_indices` layers' outputs (vision_output_dim = 1280 x 6), projected to the text width.
  They are not decoder tokens but the keys and values of the decoder's `cross_attention_layers`
  (MllamaTextCrossAttention); the decoder sees one `<|image|>` token per image.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InputError

IMAGE_MODES = ("fixed", "dynamic", "anyres", "cross")


@dataclass(frozen=True, kw_only=True)
class VisionTower:
    """A ViT's shape and its image-to-token rule (see the module docstring)."""
    layers: int
    hidden: int
    heads: int
    intermediate: int
    gated_mlp: bool                   # SwiGLU MLP (Qwen2.5-VL) or fc1 -> act -> fc2 (CLIP, Qwen2-VL, mllama)
    activation: str                   # the MLP activation's HF name (quick_gelu, silu, gelu)
    norm: str = "layernorm"           # layernorm (nn.LayerNorm) | rms (Qwen2RMSNorm: Qwen2.5-VL)
    patch: int
    channels: int = 3
    temporal_patch: int = 1           # Qwen2-VL's Conv3d covers 2 frames; an image is repeated to fill them
    merge: int = 1                    # spatial merge: decoder tokens = patches / merge²
    image: str = "fixed"              # fixed | dynamic | anyres | cross
    image_size: int = 0               # fixed/anyres/cross: the side the processor resizes to
    class_token: bool = False         # a CLS position in the tower's sequence
    keep_class_token: bool = False    # the CLS feature reaches the decoder (vision_feature_select_strategy full)
    pooled_tokens: int = 0            # fixed: tokens after pooling (Gemma 3's mm_tokens_per_image); 0 = patches
    rope: bool = False                # 2-D rotary position embedding inside attention (Qwen2-VL family)
    fused_qkv: bool = False           # one qkv Linear (Qwen2-VL family) or q/k/v Linears (CLIP, SigLIP, mllama)
    window: int = 0                   # window attention: patches per window (Qwen2.5-VL); 0 = none
    full_attention_layers: tuple[int, ...] = ()    # with a window: the layers that attend to the whole image
    extra_layers: int = 0             # mllama's global transformer (gated layers after the local ones)
    # mllama: each tile's positions are padded to a multiple of this inside the tower (8), and attention runs
    # over all tiles of one image together; the outputs of these local layers are kept for the projector
    position_multiple: int = 1
    tiles_attend_together: bool = False
    intermediate_outputs: int = 0
    # the tower's layers are GradientCheckpointingLayers, which gradient_checkpointing_enable() checkpoints
    # (Qwen2-VL, CLIP, SigLIP); mllama's MllamaVisionEncoderLayer is a plain nn.Module: it saves everything
    checkpointed: bool = True
    # mllama: the decoder layers that cross-attend to the image features (text_config.cross_attention_layers)
    cross_layers: tuple[int, ...] = ()
    # the model casts the whole pixel tensor to the tower's dtype before the tower runs and holds it through the
    # tower's forward (Qwen2VLModel.get_image_features: pixel_values.type(self.visual.dtype))
    pixels_cast_held: bool = False
    min_pixels: int = 0               # dynamic
    max_pixels: int = 0
    grid_pinpoints: tuple[tuple[int, int], ...] = ()   # anyres
    max_tiles: int = 1                # cross
    # the projector from tower features to decoder tokens: (in, out) per Linear, over the decoder image tokens
    projector: tuple[tuple[int, int], ...] = ()
    projector_in_tokens: str = "tokens"   # rows of the projector: "tokens" (after merge) or "patches"

    @property
    def total_layers(self) -> int:
        return self.layers + self.extra_layers

    # ---- image -> (tower positions, decoder tokens) -----------------------------------------------------
    def dynamic_grid(self, height: int, width: int, min_pixels: int | None = None,
                     max_pixels: int | None = None) -> tuple[int, int]:
        """Qwen2-VL smart_resize: (height, width) in pixels after resizing, multiples of patch·merge."""
        factor = self.patch * self.merge
        lo = min_pixels or self.min_pixels
        hi = max_pixels or self.max_pixels
        h_bar = max(factor, round(height / factor) * factor)
        w_bar = max(factor, round(width / factor) * factor)
        if h_bar * w_bar > hi:
            beta = math.sqrt(height * width / hi)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < lo:
            beta = math.sqrt(lo / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return h_bar, w_bar

    def _anyres(self, height: int, width: int) -> tuple[int, int]:
        """(tiles through the tower incl. the base image, decoder tokens) of LLaVA-NeXT."""
        best, best_eff, best_waste = None, 0, float("inf")
        for ph, pw in self.grid_pinpoints:
            scale = min(pw / width, ph / height)
            eff = min(int(width * scale) * int(height * scale), width * height)
            waste = ph * pw - eff
            if eff > best_eff or (eff == best_eff and waste < best_waste):
                best, best_eff, best_waste = (ph, pw), eff, waste
        assert best is not None
        sh, sw = best[0] // self.image_size, best[1] // self.image_size
        side = self.image_size // self.patch
        cur_h, cur_w = side * sh, side * sw
        if width / height > cur_w / cur_h:
            new_h = int(round(height * (cur_w / width), 7))
            cur_h -= ((cur_h - new_h) // 2) * 2
        else:
            new_w = int(round(width * (cur_h / height), 7))
            cur_w -= ((cur_w - new_w) // 2) * 2
        tokens = cur_h * cur_w + cur_h + side * side + (1 if self.keep_class_token else 0)
        return 1 + sh * sw, tokens

    def per_image(self, height: int | None, width: int | None, *, min_pixels: int | None = None,
                  max_pixels: int | None = None) -> dict[str, int]:
        """Counts for one image: `positions` (the tower's sequence, all tiles), `sequences` (separate attention
        sequences: tiles), `tokens` (decoder tokens), `cross_tokens` (cross-attention keys/values; 0 unless
        mode cross), `projector_rows` (rows the projector runs over)."""
        cls = 1 if self.class_token else 0
        if self.image == "dynamic":
            if height is None or width is None:
                raise InputError("data.image_height / data.image_width",
                                 "are needed: this model's image processor keeps each image's own resolution "
                                 "(tokens = H/28 x W/28 after rounding to multiples of 28).",
                                 "set data.image_height and data.image_width in pixels (e.g. 448 and 448), or "
                                 "data.image_tokens.")
            h, w = self.dynamic_grid(height, width, min_pixels, max_pixels)
            patches = (h // self.patch) * (w // self.patch)
            tokens = patches // (self.merge * self.merge)
            return dict(positions=patches, sequences=1, tokens=tokens, cross_tokens=0, projector_rows=tokens)
        side = self.image_size // self.patch
        seq = side * side + cls
        if self.image == "fixed":
            tokens = self.pooled_tokens or (side * side + (cls if self.keep_class_token else 0))
            rows = tokens if self.projector_in_tokens == "tokens" else seq
            return dict(positions=seq, sequences=1, tokens=tokens, cross_tokens=0, projector_rows=rows)
        if self.image == "anyres":
            h = height or self.image_size
            w = width or self.image_size
            tiles, tokens = self._anyres(h, w)
            return dict(positions=tiles * seq, sequences=tiles, tokens=tokens, cross_tokens=0,
                        projector_rows=tiles * (seq - (0 if self.keep_class_token else cls)))
        # cross: the processor pads every image to max_num_tiles tiles (MllamaImageProcessor pads the tile
        # dimension; the tower runs over all of them, padded positions included); inside the tower each tile
        # is padded to a multiple of `position_multiple` positions, and the tiles of one image attend together
        tiles = self.max_tiles
        m = max(self.position_multiple, 1)
        padded = -(-seq // m) * m
        return dict(positions=tiles * padded, sequences=1 if self.tiles_attend_together else tiles, tokens=1,
                    cross_tokens=tiles * seq, projector_rows=tiles * seq)

    def from_tokens(self, tokens: int) -> dict[str, int]:
        """Counts when the user gives the decoder tokens per image directly (dynamic resolution only)."""
        if self.image != "dynamic":
            raise InputError("data.image_tokens", f"is fixed by this model's image processor ({self.image} "
                             "resolution), not free.", "remove data.image_tokens (or set the image size).")
        patches = tokens * self.merge * self.merge
        return dict(positions=patches, sequences=1, tokens=tokens, cross_tokens=0, projector_rows=tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"layers": self.layers, "extra_layers": self.extra_layers, "hidden": self.hidden,
                "heads": self.heads, "intermediate": self.intermediate, "gated_mlp": self.gated_mlp,
                "patch": self.patch, "merge": self.merge, "image": self.image, "image_size": self.image_size,
                "window": self.window, "projector": [list(p) for p in self.projector]}


# ---- reading a config.json -------------------------------------------------------------------------

def _get(c: Mapping[str, Any], key: str, default: Any, *alts: str) -> Any:
    for k in (key, *alts):
        if c.get(k) is not None:
            return c[k]
    return default


def vision_tower(config: Mapping[str, Any], text_hidden: int = 0) -> VisionTower | None:
    """The vision tower of a vision-language config.json, or None (text-only, or a family not modelled).
    `text_hidden`: the language model's width as the spec read it (a LLaVA text_config may leave hidden_size to
    LlamaConfig's default)."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return None
    mt = config.get("model_type")
    text = config.get("text_config") or config
    h_text = int(_get(text, "hidden_size", text_hidden)) or text_hidden
    if mt == "qwen2_vl":
        # Qwen2VLVisionConfig: embed_dim is the tower width, hidden_size the language model's
        e = int(_get(vc, "embed_dim", 1280))
        m = int(_get(vc, "spatial_merge_size", 2))
        return VisionTower(layers=int(_get(vc, "depth", 32)), hidden=e, heads=int(_get(vc, "num_heads", 16)),
                           intermediate=int(e * float(_get(vc, "mlp_ratio", 4))), gated_mlp=False,
                           activation=str(_get(vc, "hidden_act", "quick_gelu")), patch=int(_get(vc, "patch_size", 14)),
                           channels=int(_get(vc, "in_channels", 3, "in_chans")),
                           temporal_patch=int(_get(vc, "temporal_patch_size", 2)), merge=m, image="dynamic",
                           rope=True, fused_qkv=True, pixels_cast_held=True, min_pixels=56 * 56,
                           max_pixels=28 * 28 * 1280,
                           projector=((e * m * m, e * m * m), (e * m * m, int(_get(vc, "hidden_size", h_text)))))
    if mt == "qwen2_5_vl":
        e = int(_get(vc, "hidden_size", 3584))
        m = int(_get(vc, "spatial_merge_size", 2))
        p = int(_get(vc, "patch_size", 14, "spatial_patch_size"))
        win = int(_get(vc, "window_size", 112))
        # window_size is in pixels: (window / patch)² patches attend together (Qwen2_5_VisionTransformer
        # get_window_index: vit_merger_window_size = window_size // merge // patch merged units per side)
        side = win // m // p * m
        return VisionTower(layers=int(_get(vc, "depth", 32)), hidden=e, heads=int(_get(vc, "num_heads", 16)),
                           intermediate=int(_get(vc, "intermediate_size", 3420)), gated_mlp=True,
                           activation=str(_get(vc, "hidden_act", "silu")), patch=p, norm="rms",
                           channels=int(_get(vc, "in_channels", 3, "in_chans")),
                           temporal_patch=int(_get(vc, "temporal_patch_size", 2)), merge=m, image="dynamic",
                           rope=True, fused_qkv=True, pixels_cast_held=True, window=side * side,
                           full_attention_layers=tuple(_get(vc, "fullatt_block_indexes", [7, 15, 23, 31])),
                           min_pixels=56 * 56, max_pixels=28 * 28 * 1280,
                           projector=((e * m * m, e * m * m), (e * m * m, int(_get(vc, "out_hidden_size", 3584)))))
    if mt in ("llava", "llava_next") and _get(vc, "model_type", "clip_vision_model") == "clip_vision_model":
        hv = int(_get(vc, "hidden_size", 768))
        keep_cls = config.get("vision_feature_select_strategy", "default") == "full"
        kw = dict(layers=int(_get(vc, "num_hidden_layers", 12)), hidden=hv,
                  heads=int(_get(vc, "num_attention_heads", 12)), intermediate=int(_get(vc, "intermediate_size", 3072)),
                  gated_mlp=False, activation=str(_get(vc, "hidden_act", "quick_gelu")),
                  patch=int(_get(vc, "patch_size", 32)), channels=int(_get(vc, "num_channels", 3)),
                  image_size=int(_get(vc, "image_size", 224)), class_token=True, keep_class_token=keep_cls,
                  # LlavaMultiModalProjector: linear_1 (vision hidden -> text hidden), act, linear_2
                  projector=((hv, h_text), (h_text, h_text)), projector_in_tokens="tokens")
        if mt == "llava":
            return VisionTower(image="fixed", **kw)
        pins = config.get("image_grid_pinpoints") or [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
        return VisionTower(image="anyres", grid_pinpoints=tuple((int(a), int(b)) for a, b in pins), **kw)
    if mt == "mllama":
        # MllamaVisionConfig / MllamaTextConfig defaults (transformers 5.25 configuration_mllama.py)
        hv = int(_get(vc, "hidden_size", 1280))
        cross = _get(text, "cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38])
        return VisionTower(layers=int(_get(vc, "num_hidden_layers", 32)), hidden=hv,
                           heads=int(_get(vc, "attention_heads", 16, "num_attention_heads")),
                           intermediate=int(_get(vc, "intermediate_size", 5120)),
                           gated_mlp=False, activation=str(_get(vc, "hidden_act", "gelu")),
                           patch=int(_get(vc, "patch_size", 14)), channels=int(_get(vc, "num_channels", 3)),
                           image="cross", image_size=int(_get(vc, "image_size", 448)), class_token=True,
                           extra_layers=int(_get(vc, "num_global_layers", 8)),
                           max_tiles=int(_get(vc, "max_num_tiles", 4)), position_multiple=8,
                           tiles_attend_together=True, checkpointed=False,
                           intermediate_outputs=len(_get(vc, "intermediate_layers_indices", [3, 7, 15, 23, 30])),
                           cross_layers=tuple(int(x) for x in cross),
                           # MllamaModel.multi_modal_projector: one biased Linear (vision_output_dim -> text hidden)
                           projector=((int(_get(vc, "vision_output_dim", 7680)), h_text),),
                           projector_in_tokens="patches")
    if mt == "gemma3" and _get(vc, "model_type", "siglip_vision_model") == "siglip_vision_model":
        hv = int(_get(vc, "hidden_size", 768))
        return VisionTower(layers=int(_get(vc, "num_hidden_layers", 12)), hidden=hv,
                           heads=int(_get(vc, "num_attention_heads", 12)), intermediate=int(_get(vc, "intermediate_size", 3072)),
                           gated_mlp=False, activation=str(_get(vc, "hidden_act", "gelu_pytorch_tanh")),
                           patch=int(_get(vc, "patch_size", 16)), channels=int(_get(vc, "num_channels", 3)),
                           image="fixed", image_size=int(_get(vc, "image_size", 224)),
                           pooled_tokens=int(config.get("mm_tokens_per_image") or 256),
                           # Gemma3MultiModalProjector: RMSNorm then one (vision hidden x text hidden) matmul
                           projector=((hv, h_text),))
    return None

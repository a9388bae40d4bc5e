"""Any architecture transformers can build: a ModelSpec read from the module tree on the meta device.

For a `model_type` gpuplan has no hand-written family for, `AutoModelForCausalLM.from_config` builds
the model on the meta device (no weights, no memory). Parameters are then exact: one Block per
parameter name (layer index replaced by `*`, counted once per layer). The structure the estimators need
is read from the transformers config object (its attribute_map resolves n_embd, n_head, ...) and
checked against, or inferred from, the module tree; `spec.inferred` says which field came from where.

Classification of each parameter (kind): the input embedding module and the output embedding are
found through `get_input_embeddings` / `get_output_embeddings`; norms by class name ("Norm"); a
parameter inside a decoder layer is attention, MLP, expert or router by its module path (attn /
attention / mlp / ffn / expert / router / gate ...) or by the leaf name (q_proj, fc1, wi, ...). A
parameter that fits none is refused by name rather than guessed.
"""
from __future__ import annotations

import dataclasses

import re
from typing import Any, Mapping

from ..errors import UnsupportedError
from .spec import Block, ModelSpec, _tied_head_flops_block
from .traits import ACTIVATIONS, DEFAULT_ROPE_THETA, Dropout, Traits
from . import traits as _t

_LAYER_INDEX = re.compile(r"\.(\d+)\.")
_ATTN_PATH = ("attn", "attention", "self_attention", "mixer")
_MLP_PATH = ("mlp", "ffn", "feed_forward", "feedforward", "ff", "intermediate", "output")
_ATTN_LEAF = {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "query_key_value", "query", "key", "value",
              "c_attn", "out_proj", "wq", "wk", "wv", "wo_attn", "Wqkv", "qkv", "dense"}
_MLP_LEAF = {"fc1", "fc2", "fc_in", "fc_out", "up_proj", "down_proj", "gate_proj", "gate_up_proj", "c_fc",
             # Gemma 3n / Gemma 4 per-layer embeddings: a gate h -> p and a projection p -> h in every layer
             "per_layer_input_gate", "per_layer_projection",
             "dense_h_to_4h", "dense_4h_to_h", "w1", "w2", "w3", "wi", "wo", "wi_0", "wi_1"}
_ROUTER = ("router", "gate")
_QKV_PREFIX = ("q_", "k_", "v_", "kv_", "qkv_")
_GATED_LEAF = {"gate_proj", "gate_up_proj", "w1", "w3", "wi_0", "c_fc2"}


def _token_in(path: str, tokens) -> bool:
    """Whether a module-path component is one of `tokens` or contains one of the longer ones
    (self_attn, cross_attention, block_sparse_moe.mlp ...)."""
    parts = path.split(".")
    return any(p in tokens or any(len(t) >= 3 and t != "output" and t in p for t in tokens) for p in parts)


def _classify(path: str, leaf_module: str, module_cls: str, ndim: int, in_layer: bool) -> str:
    """kind of one parameter (see spec.Block) or '' when it cannot be classified."""
    if "Norm" in module_cls or "norm" in leaf_module.lower() or leaf_module.startswith("ln"):
        return "norm"
    if not in_layer or ndim < 2:
        # outside the decoder layers (heads, poolers, vision towers), or a vector inside one (gains,
        # residual scales, conv/SSM vectors): counted as weights, never as a matmul
        return "other"
    parts = path.split(".")
    if any("shared_expert" in p or p == "shared_mlp" for p in parts):     # GraniteMoe*: shared_mlp
        return "shared_expert" if not parts[-2].endswith("gate") else "router"
    if "router" in parts[:-2]:
        return "router"         # a router's own layer (JetMoE's router.layer, inside its experts' module too)
    if any(p.startswith("expert") for p in parts):
        return "expert"
    if parts[-2] in _ROUTER or "Router" in module_cls or "Gate" in module_cls:
        return "router"
    if _token_in(path, _ATTN_PATH) or parts[-2] in _ATTN_LEAF - {"dense"}:
        return "attn"
    if any(p.startswith(_QKV_PREFIX) for p in parts[:-1]):
        # a sub-module named for the query, key or value input it feeds (Inkling-2 Loop's q/k/v_message_gate,
        # modeling_inkling2_loop.py Inkling2LoopSlidingLoopDecoderLayer: a low-rank gate that mixes the previous
        # loop pass's message into that attention input): part of the attention branch
        return "attn"
    if _token_in(path, _MLP_PATH) or parts[-2] in _MLP_LEAF:
        return "mlp"
    return ""


def _embeddings(model: Any, inferred: dict[str, str]) -> tuple[Any, Any, int, int, bool]:
    """The input embedding and output head modules, vocabulary and hidden size from the embedding's weight,
    and whether the head shares it (decoder-only and encoder-decoder readers alike)."""
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    v, h = emb.weight.shape
    inferred["vocab_size"] = inferred["hidden_size"] = "input embedding weight shape"
    return emb, out, v, h, out is not None and out.weight is emb.weight


def _head_names(modules: Mapping[str, Any], emb: Any, out: Any) -> tuple[set[str], set[str]]:
    """Parameter names of the input embedding and of the output head (a tied head shares the module)."""
    return ({f"{p}.weight" for p, m in modules.items() if m is emb},
            {f"{p}.weight" for p, m in modules.items() if out is not None and m is out})


def _head_block(key: str, numel: int, emb_names: set[str], out_names: set[str], h: int, v: int) -> Block | None:
    """The input embedding or the output head as a model-scope block; None for any other parameter."""
    if key in emb_names:
        return Block(key, "embedding", numel, 1, None, 1.0, "model")
    if key in out_names:
        return Block(key, "lm_head", numel, 1, (h, v), 1.0, "model")
    return None


def _cfg_int(cfg, *names) -> int | None:
    for n in names:
        try:
            v = getattr(cfg, n, None)
        except Exception:   # per-layer attributes of heterogeneous configs raise on global access
            v = _per_layer_value(cfg, n)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _per_layer_value(cfg, name: str):
    """A per-layer config attribute (transformers' per_layer_config): the value most layers have (spec_from_meta
    notes in `inferred` when layers differ), None when unreadable."""
    from collections import Counter
    try:
        values = Counter(getattr(pc, name, None) for pc in getattr(cfg, "per_layer_config", None) or ())
    except Exception:  # noqa: BLE001 - an unreadable per-layer config counts as absent
        return None
    return values.most_common(1)[0][0] if values else None


def _per_layer_spread(cfg, name: str) -> list:
    """The distinct per-layer values of a config attribute ([] for a homogeneous config)."""
    try:
        getattr(cfg, name, None)
        return []
    except Exception:  # noqa: BLE001 - a per-layer attribute
        try:
            return sorted({getattr(pc, name, None) for pc in cfg.per_layer_config})
        except Exception:  # noqa: BLE001
            return []


def _is_vision(path: str) -> bool:
    """Whether a module path lies in a modality tower or its projector: vision (Qwen2-VL `visual`, LLaVA
    `vision_tower` and `multi_modal_projector`, mllama `vision_model`, Gemma 3 `vision_tower`, Phi-4-multimodal
    `image_embed`) or audio (Qwen2-Audio-style `audio_tower`, Phi-4-multimodal `audio_embed`, `speech_*`
    encoders). Text never runs through them: counted as params_vision, idle in a text-only step."""
    return any(p == "visual" or p.startswith(("vision", "image_", "audio", "speech")) or p in (
        "multi_modal_projector", "mm_projector") for p in path.split("."))


def _decoder_layers(model):
    """(path, ModuleList) of the decoder layers: the longest ModuleList whose children share one class, else
    the longest list of mixed layer classes (hybrids: Zamba's hybrid and Mamba layers, OLMo-hybrid's attention
    and linear-attention layers, Llama-3.2-Vision's cross-attention layers among self-attention ones)."""
    import torch.nn as nn
    best, mixed = ("", None), ("", None)
    lists = {path: mod for path, mod in model.named_modules() if isinstance(mod, nn.ModuleList)}
    for path, mod in lists.items():
        # a list inside an element of another list (LongCat-Flash's two attentions per layer, a 4.x expert list)
        # is part of a layer, however long: with few layers it would otherwise outnumber the layer list
        nested = any(path.startswith(outer + ".") for outer in lists)
        if len(mod) > 0 and not _is_vision(path) and not nested:
            kinds = {type(c).__name__ for c in mod}
            if len(kinds) == 1 and (best[1] is None or len(mod) > len(best[1])):
                best = (path, mod)
            elif len(kinds) > 1 and (mixed[1] is None or len(mod) > len(mixed[1])):
                mixed = (path, mod)
    path, mod = best if best[1] is not None else mixed
    return (path, mod) if mod is None else _parallel_parts(lists, path, mod)


def _parallel_parts(lists: dict, path: str, mod):
    """A model that keeps each part of its layers in a list of its own, side by side: XLM's
    `transformer.attentions`, `layer_norm1`, `ffns`, `layer_norm2`, layer i being element i of each
    (modeling_xlm.py XLMModel.__init__ and forward, transformers 5.25). Sibling lists of the layer count under
    the same parent are the same layers' other parts: returned as (paths joined by '|', a list of per-layer
    ModuleLists holding element i of each). One list stands alone: returned as it is."""
    import torch.nn as nn
    parent = path.rpartition(".")[0]
    parts = [p for p, m in lists.items() if p.rpartition(".")[0] == parent and len(m) == len(mod)
             and not _is_vision(p) and not any(p.startswith(outer + ".") for outer in lists)]
    if len(parts) < 2:
        return path, mod
    return "|".join(parts), nn.ModuleList(nn.ModuleList(lists[p][i] for p in parts) for i in range(len(mod)))


def _mamba_mixers(model) -> dict[str, str]:
    """module path -> "mamba1" | "mamba2" for every Mamba mixer in the tree: a module that holds its own A_log
    and D parameters and a depthwise `conv1d` child (transformers' MambaMixer, Mamba2Mixer and the mixers of
    Bamba, Falcon-H1, GraniteMoeHybrid, Zamba, Nemotron-H). Mamba-1 projects dt, B, C from x (x_proj);
    Mamba-2 makes them in in_proj and keeps dt_bias, A_log and D per head. Gated DeltaNet (Qwen3-Next,
    OLMo-hybrid linear attention) has A_log and a conv1d but no D: it stays attention."""
    out = {}
    for path, mod in model.named_modules():
        own = {n for n, _ in mod.named_parameters(recurse=False)}
        if {"A_log", "D"} <= own and hasattr(mod, "conv1d"):
            mamba1 = hasattr(mod, "x_proj") or "x_proj_weight" in own
            out[path] = "mamba1" if mamba1 else "mamba2"
    return out


def _residual_branch_kind(parent_cls: str) -> str:
    """Kind of a Linear inside a residual-stream block of a layer, by the block's class (transformers 5.25
    modeling_gemma3n.py): AltUp (Alternating Updates, Baykal et al. 2023: Gemma3nTextAltUp keeps altup_num_inputs
    residual streams; its modality_router and the prediction/correction coefficient maps pick per token how the
    streams mix) is routing: kind router; LAuReL (Learned Augmented Residual Layer, Menghani et al. 2024:
    Gemma3nTextLaurelBlock, a rank-r linear branch over the attention's normed input, added to the attention
    output) is part of the attention branch. '' for any other block."""
    if parent_cls.endswith("AltUp"):
        return "router"
    if "Laurel" in parent_cls:
        return "attn"
    return ""


def _depthwise_conv(mod):
    """The module's own depthwise Conv1d child (groups == channels), or None."""
    import torch.nn as nn
    return next((c for c in mod.children() if isinstance(c, nn.Conv1d) and c.groups == c.in_channels
                 == c.out_channels > 1), None)


def _recurrent_mixers(model) -> dict[str, tuple[str, int, int]]:
    """module path -> (variant, width, conv taps) of every fixed-state token mixer other than Mamba (models/spec.py
    RecurrentMixer), recognised by its structure in transformers 5.25:
    * short_conv: a depthwise Conv1d child beside an `in_proj` Linear whose output is 3 x the conv's channels
      (B, C and x) and an `out_proj`, no A_log (modeling_lfm3.py / modeling_lfm2.py ShortConv);
    * rg_lru: a depthwise Conv1d child beside a child that owns a `recurrent_param` (the RG-LRU's decay,
      modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock);
    * rwkv: a module that owns `time_decay` and `time_first` (RWKV-4's WKV time mix, modeling_rwkv.py
      RwkvSelfAttention)."""
    import torch.nn as nn
    out = {}
    for path, mod in model.named_modules():
        own = {n for n, _ in mod.named_parameters(recurse=False)}
        if {"time_decay", "time_first"} <= own:
            out[path] = ("rwkv", int(mod.time_decay.numel()), 0)
            continue
        conv = _depthwise_conv(mod)
        if conv is None or "A_log" in own:
            continue
        w, k = conv.in_channels, int(conv.kernel_size[0])
        if any("recurrent_param" in dict(c.named_parameters(recurse=False)) for c in mod.children()):
            out[path] = ("rg_lru", w, k)
        elif isinstance(getattr(mod, "in_proj", None), nn.Linear) and mod.in_proj.out_features == 3 * w \
                and isinstance(getattr(mod, "out_proj", None), nn.Linear):
            out[path] = ("short_conv", w, k)
    return out


def _recurrent_spec(model, mixers: dict, layers, kind_of: dict, i: int, inferred: dict) -> dict:
    """ModelSpec fields (recurrent, layer_mixers) for a model with RecurrentMixers; {} without."""
    from .spec import RecurrentMixer
    if not mixers:
        return {}
    variants = set(mixers.values())
    if len(variants) > 1:
        raise UnsupportedError(f"model_type '{model.config.model_type}'", f"has recurrent mixers of different "
                               f"shapes {sorted(variants)}, which one RecurrentMixer cannot describe.",
                               "count it with `gpuplan model CONFIG --meta` (total only).")
    variant, w, k = variants.pop()
    rec = RecurrentMixer(variant=variant, width=w, conv_kernel=k, ffn_width=i if variant == "rwkv" else 0)
    per_layer = tuple("recurrent" if "recurrent" in {kind_of.get(id(q), "") for q in layer.parameters()}
                      else "attention" for layer in layers)
    inferred["recurrent"] = (f"{variant} mixer ({sorted(mixers)[0]}): width {w} from its "
                             + ("time_decay" if variant == "rwkv" else f"depthwise conv's channels, {k} taps"))
    inferred["layer_mixers"] = "per layer: recurrent where the layer holds the mixer, else attention"
    return dict(recurrent=rec, layer_mixers=per_layer)


def _ssm_shape(mixer, variant: str, text_cfg, inferred: dict[str, str]):
    """SSMShape of one Mamba mixer, read from its tensors' shapes and the sizes transformers stores on it
    (ssm_state_size, n_groups, chunk_size ...)."""
    from .spec import SSMShape
    conv_dim, _, kernel = (int(x) for x in mixer.conv1d.weight.shape)
    a_log = mixer.A_log
    if variant == "mamba1":
        d_state = int(a_log.shape[-1])
        d = conv_dim
        dt = getattr(mixer, "dt_proj", None)
        rank = int(dt.weight.shape[1]) if dt is not None else int(mixer.dt_proj_weight.shape[-1])
        inferred["ssm"] = ("Mamba-1 mixer: d_inner from conv1d channels, d_state from A_log, dt_rank from "
                           "dt_proj's input")
        # A_log per mamba head (heads x head_dim x d_state: Zamba's ZambaMambaMixer, modeling_zamba.py):
        # transformers' torch path scans one head at a time
        slices = int(a_log.shape[0]) if a_log.dim() == 3 else 1
        if slices > 1:
            inferred["ssm"] += f"; {slices} mamba heads (A_log's first axis), scanned one after another"
        return SSMShape(variant="mamba1", d_inner=d, d_state=d_state, d_conv=kernel, dt_rank=rank,
                        residual_fp32=bool(getattr(text_cfg, "residual_in_fp32", False)), scan_slices=slices)
    heads = int(a_log.numel())
    d = int(mixer.out_proj.weight.shape[1])
    gn = (conv_dim - d) // 2                      # conv over x | B | C: B and C are n_groups x d_state each
    groups = _attr_int(mixer, "n_groups") or 1
    d_state = _attr_int(mixer, "ssm_state_size", "d_state") or gn // groups
    if groups * d_state != gn or d % heads:
        raise UnsupportedError(f"Mamba-2 mixer '{type(mixer).__name__}'", f"conv1d has {conv_dim} channels, which "
                               f"is not d_inner {d} + 2 x {groups} groups x {d_state} states.",
                               "add a hand-written family in gpuplan/models/ssm.py.")
    inferred["ssm"] = ("Mamba-2 mixer: heads from A_log, d_inner from out_proj's input, groups and d_state from the "
                       "mixer's n_groups / ssm_state_size (checked against the conv1d channels)")
    gated_norm = any(n.startswith("norm.") for n, _ in mixer.named_parameters())
    if not gated_norm:
        inferred["ssm"] += "; no gated RMSNorm in the mixer (the scan output is gated by silu(z) alone)"
    return SSMShape(variant="mamba2", d_inner=d, d_state=d_state, d_conv=kernel, n_groups=groups, num_heads=heads,
                    head_dim=d // heads, chunk_size=_attr_int(mixer, "chunk_size") or 256,
                    residual_fp32=bool(getattr(text_cfg, "residual_in_fp32", False)), gated_norm=gated_norm)


def _attr_int(obj, *names) -> int | None:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _config_class_is_encoder_decoder(config: Mapping[str, Any]) -> bool:
    """The transformers config class's own default (BartConfig sets is_encoder_decoder=True even when the
    config.json leaves the key out)."""
    import transformers
    try:
        return bool(getattr(transformers.AutoConfig.for_model(str(config.get("model_type"))), "is_encoder_decoder",
                            False))
    except Exception:   # noqa: BLE001 - an unbuildable config is refused later, with transformers' reason
        return False


def spec_from_meta(config: Mapping[str, Any], *, name: str, hf_id: str | None, where: str) -> ModelSpec:
    """A ModelSpec for any model_type transformers builds as a causal LM (see the module docstring)."""
    import torch.nn as nn                 # torch + transformers, imported lazily
    from .meta import build_meta_model

    mt0 = str(config.get("model_type"))
    if config.get("is_encoder_decoder") or _config_class_is_encoder_decoder(config):
        return spec_from_meta_encdec(config, name=name, hf_id=hf_id, where=where)
    try:
        model = build_meta_model(config, dtype="bfloat16")     # as transformers loads a 16-bit checkpoint
    except UnsupportedError:
        model = build_meta_model(config)
    cfg = model.config
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    inferred: dict[str, str] = {}
    mt = str(config.get("model_type"))

    layers_path, layers = _decoder_layers(model)
    if layers is None:
        raise UnsupportedError(f"model_type '{mt}' in {where}", "has no list of repeated decoder layers in its "
                               "transformers module tree, so its structure cannot be read.",
                               "use a decoder-only model, or pass a config of a supported family.")
    n = len(layers)
    inferred["num_layers"] = f"length of the module list '{layers_path}'"

    emb, out, v, h, tie = _embeddings(model, inferred)
    a = _cfg_int(text_cfg, "num_attention_heads", "n_head", "num_heads")
    rec_mixers = _recurrent_mixers(model)
    if a is None and rec_mixers and len({p.rsplit(".", 1)[0] for p in rec_mixers}) == n:
        # every layer mixes tokens through a recurrence (RWKV): no attention heads; one head of the full width
        # stands in for the structural fields, and no layer attends (layer_mixers)
        a = 1
        inferred["num_heads"] = "no attention: every layer's token mixer is recurrent (one head of the full width)"
    if a is None:
        raise UnsupportedError(f"model_type '{mt}' in {where}", "has no attention heads (num_attention_heads) in "
                               "its config, and not every layer holds a recurrent mixer gpuplan reads (RWKV-4's time "
                               "mix): recurrent and pure state-space models other than RWKV-4 and the hand-written "
                               "Mamba and Mamba-2 families are not modelled.",
                               "use a transformer decoder; `gpuplan model CONFIG --meta` still counts its parameters.")
    spread = _per_layer_spread(text_cfg, "num_attention_heads")
    if len(spread) > 1:
        inferred["num_heads"] = (f"per-layer config: layers have {spread} heads; the most common is used for the "
                                 "attention terms (parameters are counted per tensor, exactly)")
    # kv_channels: Megatron's name for the head width (JetMoE: kv_channels x num_key_value_heads per projection)
    d = _cfg_int(text_cfg, "head_dim", "kv_channels") or h // a
    inferred["head_dim"] = "config head_dim / kv_channels" if _cfg_int(text_cfg, "head_dim", "kv_channels") \
        else "hidden_size / num_attention_heads"

    # ---- parameters -> blocks --------------------------------------------------------------------
    modules = dict(model.named_modules())
    groups: dict[str, list] = {}
    first_name: dict[str, str] = {}       # grouping key -> the first concrete parameter name
    emb_names, out_names = _head_names(modules, emb, out)
    layer_prefix = tuple(p + "." for p in layers_path.split("|"))
    for pname, p in model.named_parameters():
        in_layer = pname.startswith(layer_prefix)
        key = _LAYER_INDEX.sub(".*.", pname, count=1) if in_layer else pname
        # layers of one list may differ (dense first layers of an MoE model): group by shape too
        shaped = key if key not in groups or groups[key][0].shape == p.shape else f"{key}{list(p.shape)}"
        groups.setdefault(shaped, []).append(p)
        first_name.setdefault(shaped, pname)
    for bname, buf in model.named_buffers():
        # DeepSeek's routing bias: a buffer in transformers, a parameter in checkpoints (see meta.py)
        if bname.endswith("e_score_correction_bias"):
            key = _LAYER_INDEX.sub(".*.", bname, count=1)
            groups.setdefault(key, []).append(buf)
            first_name.setdefault(key, bname)
    blocks: list[Block] = []
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    experts = _cfg_int(text_cfg, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts") or 0
    k = _cfg_int(text_cfg, "num_experts_per_tok", "top_k", "moe_top_k", "moe_topk",
                "num_selected_experts") or 0
    mixers = _mamba_mixers(model)
    ssm_ids = {id(q) for path in mixers for q in modules[path].parameters()}
    rec_ids = {id(q) for path in rec_mixers for q in modules[path].parameters()}
    kind_of: dict[int, str] = {}          # id(parameter) -> kind, for the per-layer mixer list below
    for key, params in groups.items():
        p = params[0]
        count, numel = len(params), p.numel()
        mod_path, _, leaf = key.rpartition(".")
        leaf = leaf.split("[")[0]
        # the module of the first layer that has this parameter (layers of a hybrid differ)
        mod = modules.get(first_name[key].rpartition(".")[0]) if key in first_name else modules.get(mod_path)
        mod_cls = type(mod).__name__ if mod is not None else ""
        in_layer = key.startswith(layer_prefix)
        head = _head_block(key, numel, emb_names, out_names, h, v)
        if head is not None:
            blocks.append(head)
            continue
        if _is_vision(key):
            # the vision tower and projector: weights (params_vision); they run over image patches, not text
            # tokens, so their matmuls stay out of the per-token FLOPs
            lin = (int(p.shape[1]), int(p.shape[0])) if isinstance(mod, nn.Linear) and p.ndim == 2 else None
            blocks.append(Block(key, "other", p.numel() * len(params), 1, lin, 1.0, "vision"))
            continue
        if id(p) in rec_ids:
            # a recurrent mixer's tensors (RecurrentMixer): its Linears are matmuls, the conv, gates' block-diagonal
            # weights, decays and token-shift mixes are weights only; a Linear's bias a bias
            lin = (int(p.shape[1]), int(p.shape[0])) if isinstance(mod, nn.Linear) and leaf == "weight" else None
            kind = "bias" if leaf == "bias" and isinstance(mod, nn.Linear) else "ssm"
            blocks.append(Block(key, kind, numel, count, lin, 1.0, "layer" if in_layer else "model"))
            for q in params:
                kind_of[id(q)] = "recurrent"
            continue
        if id(p) in ssm_ids:
            # a Mamba mixer's tensors: in/out (and Mamba-1 x/dt) projections are matmuls; conv1d, A_log, D and
            # dt_bias are weights only; its gated RMSNorm (Mamba-2) a norm, a Linear's bias a bias
            kind = "norm" if "norm" in mod_path.rpartition(".")[2].lower() else (
                "bias" if leaf == "bias" and isinstance(mod, nn.Linear) else "ssm")
            lin = (int(p.shape[1]), int(p.shape[0])) if kind == "ssm" and isinstance(mod, nn.Linear) else None
            blocks.append(Block(key, kind, numel, count, lin, 1.0, "layer" if in_layer else "model"))
            for q in params:
                kind_of[id(q)] = kind
            continue
        # a bias is classified by its module (it follows its linear), other vectors by their rank
        kind = _classify(key, mod_path.rpartition(".")[2], mod_cls, 2 if leaf == "bias" else p.ndim, in_layer)
        if kind == "other" and p.ndim == 2 and isinstance(mod, nn.Embedding):
            blocks.append(Block(key, "embedding", numel, 1, None, 1.0, "model"))   # learned positions
            continue
        if not kind and mixers and in_layer and isinstance(mod, nn.Linear) and _in_attention_branch(
                first_name[key], layers_path, modules):
            # Zamba's hybrid layers: the shared attention block's output passes a per-layer linear (h x h)
            # before it joins the Mamba stream: part of the attention branch
            kind = "attn"
        if not kind and in_layer:
            kind = _residual_branch_kind(type(modules.get(first_name[key].rsplit(".", 2)[0])).__name__)
        if not kind:
            raise UnsupportedError(f"model_type '{mt}' in {where}",
                                   f"parameter '{key}' ({mod_cls}, shape {tuple(p.shape)}) could not be classified "
                                   "as attention, MLP, expert, router, norm or embedding, so gpuplan will not guess "
                                   "its role.", "count it with `gpuplan model CONFIG --meta` (total only), or add a "
                                   "hand-written family in gpuplan/models.")
        if kind == "mlp" and p.ndim == 3 and experts and p.shape[0] == experts:
            kind = "expert"     # experts stacked in one tensor (E, out, in) in an MLP module (JetMoE's input_linear)
        # experts of an attention (JetMoE's mixture of attention heads: top-k query/output projection experts per
        # token, modeling_jetmoe.py JetMoeMoA): routed like experts, counted as attention
        moa = kind == "expert" and _token_in(key, ("attn", "attention", "self_attention"))
        if moa and leaf == "bias":
            kind = "attn"       # one output bias per token, not per expert
        if leaf == "bias" and kind in ("attn", "mlp", "expert", "shared_expert", "router"):
            blocks.append(Block(key, "bias", numel, count, None, k / experts if kind == "expert" and experts else 1.0,
                                "layer" if in_layer else "model"))
            for q in params:
                kind_of[id(q)] = kind
            continue
        linear = None
        active = 1.0
        if kind == "expert":
            if not experts or not k:
                raise UnsupportedError(f"model_type '{mt}' in {where}", f"has expert parameters ('{key}') but its "
                                       "config names no expert count or top-k.", "pass a config of a supported family.")
            active = k / experts
            if p.ndim == 3:      # transformers 5.x fused experts: (E, out, in)
                count, numel = count * p.shape[0], numel // p.shape[0]
                linear = (int(p.shape[2]), int(p.shape[1]))
            elif p.ndim == 2:
                linear = (int(p.shape[1]), int(p.shape[0]))
        elif p.ndim == 2 and kind in ("attn", "mlp", "shared_expert", "router"):
            linear = (int(p.shape[1]), int(p.shape[0]))     # nn.Linear weight (out, in)
            if "Conv1D" in mod_cls:                       # GPT-2 style Conv1D stores (in, out)
                linear = (int(p.shape[0]), int(p.shape[1]))
        if moa:
            kind = "attn"
            inferred["attention_experts"] = (f"'{key}': {experts} attention experts, top-{k} per token (mixture of "
                                             "attention heads), counted as attention at k/E")
        blocks.append(Block(key, kind, numel, count, linear, active, "layer" if in_layer else "model"))
        shapes[key] = (kind, tuple(int(s) for s in p.shape))
        for q in params:
            kind_of[id(q)] = kind
    blocks = _mark_unfed_cross_attention(blocks, layers, layers_path, inferred)
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    if any(b.layer_scope == "vision" for b in blocks):
        inferred["vision"] = ("tensors under visual / vision* / image_* / audio* / speech* / multi_modal_projector paths: params_vision, outside "
                              "the decoder layers and the per-token FLOPs")

    # ---- structure -------------------------------------------------------------------------------
    attn_lin = {kk: b for b in blocks for kk in [b.name] if b.kind == "attn" and b.linear}
    q_like = [b for b in attn_lin.values() if b.name.endswith(("q_proj.weight", "query.weight", "wq.weight"))]
    k_like = [b for b in attn_lin.values() if b.name.endswith(("k_proj.weight", "key.weight", "wk.weight"))]
    kv = _cfg_int(text_cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv:
        inferred["num_kv_heads"] = "config"
    elif k_like and k_like[0].linear[1] % d == 0:
        kv = k_like[0].linear[1] // d
        inferred["num_kv_heads"] = f"out_features of '{k_like[0].name}' / head_dim"
    else:
        fused = [b for b in attn_lin.values() if b.linear[0] == h and b.linear[1] > a * d]
        if fused and (fused[0].linear[1] - a * d) % (2 * d) == 0:
            kv = (fused[0].linear[1] - a * d) // (2 * d)
            inferred["num_kv_heads"] = f"fused projection '{fused[0].name}': (out - heads*head_dim) / (2*head_dim)"
        else:
            kv = a
            inferred["num_kv_heads"] = "assumed equal to the attention heads (no k projection found)"
    if q_like and q_like[0].linear[1] != a * d:
        inferred["head_dim"] += f" (q projection is {q_like[0].linear[1]} wide, not heads*head_dim: check)"

    mlp_in = [b for b in blocks if b.kind == "mlp" and b.linear and b.linear[0] == h]
    i = _cfg_int(text_cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", "d_ff")
    names = {b.name.rsplit(".", 2)[-2] for b in mlp_in}
    gated = len(mlp_in) >= 2 or bool(names & _GATED_LEAF)
    inferred["gated_mlp"] = (f"{len(mlp_in)} MLP input projection(s) per layer: {sorted(names)}" if mlp_in
                             else "no dense MLP found")
    if i is None and mlp_in:
        widest = max(b.linear[1] for b in mlp_in)
        i = widest // 2 if len(mlp_in) == 1 and gated else widest
        inferred["intermediate_size"] = "out_features of the MLP input projection"
    elif i is not None and len(mlp_in) >= 2 and len({b.linear[1] for b in mlp_in}) == 1 \
            and i != mlp_in[0].linear[1]:
        # a gate and an up projection of one width that is not the config's: the module builds its own
        # (RecurrentGemmaMlp takes intermediate_size // 2, modeling_recurrent_gemma.py; LFM2's MLP shrinks it to
        # 2/3 rounded to block_multiple_of, modeling_lfm2.py Lfm2MLP): the tree's width runs
        inferred["intermediate_size"] = (f"out_features of the gate/up projections (config {i} is not their "
                                         "width)")
        i = mlp_in[0].linear[1]
    elif i is not None:
        inferred["intermediate_size"] = "config"
    i = i or 0

    norm_cls = {type(m).__name__ for m in layers[0].modules() if "Norm" in type(m).__name__}
    rms = any("RMS" in c or "Rms" in c for c in norm_cls)
    inferred["norm"] = f"norm classes in a layer: {sorted(norm_cls) or 'none'}"
    norms_h = sum(1 for m in layers[0].children() if "Norm" in type(m).__name__)

    moe: dict[str, Any] = {}
    expert_blocks = [b for b in blocks if b.kind == "expert" and b.linear and b.linear[0] == h]
    mi_cfg = _cfg_int(text_cfg, "moe_intermediate_size", "expert_intermediate_size")
    # an expert's down projection (out = hidden) reading half its one input projection's width: a fused gate|up
    # (JetMoE's input_linear, chunked in two, silu(gate) * up: modeling_jetmoe.py JetMoeMoE.forward)
    expert_down = [b for b in blocks if b.kind == "expert" and b.linear and b.linear[1] == h and b.linear[0] != h]
    fused_gate_up = len(expert_blocks) == 1 and bool(expert_down) and \
        expert_blocks[0].linear[1] == 2 * expert_down[0].linear[0]
    if not mlp_in and expert_blocks:
        gated = len(expert_blocks) >= 2 or (mi_cfg is not None and expert_blocks[0].linear[1] == 2 * mi_cfg) or (
            "gate" in expert_blocks[0].name) or fused_gate_up
        inferred["gated_mlp"] = f"expert input projection(s): {[b.name for b in expert_blocks]}"
    if expert_blocks:
        moe_layers = expert_blocks[0].count // experts
        mi = mi_cfg or (expert_blocks[0].linear[1] // (2 if len(expert_blocks) == 1 and gated else 1))
        # the shared expert's width: the input width of its down projection (out = hidden), which a fused
        # gate|up input projection (GraniteMoe's shared_mlp.input_linear, 2i wide) would double
        shared = [b for b in blocks if b.kind == "shared_expert" and b.linear]
        down = [b for b in shared if b.linear[1] == h and b.linear[0] != h] or [b for b in shared if b.linear[1] == h]
        moe = dict(num_experts=experts, experts_per_tok=k, moe_intermediate_size=mi, num_moe_layers=moe_layers,
                   shared_expert_intermediate=max((b.linear[0] for b in down), default=0))
        inferred["moe"] = f"{experts} experts, top-{k} from config; {moe_layers} MoE layers from the expert tensors"

    act_name = str(getattr(text_cfg, "hidden_act", None) or getattr(text_cfg, "activation_function", None)
                   or getattr(text_cfg, "hidden_activation", None) or "silu")
    act = {"swish": "silu", "gelu_python": "gelu", "gelu_accurate": "gelu_new"}.get(act_name, act_name)
    if act not in ACTIVATIONS:
        inferred["activation"] = f"'{act_name}' is not modelled; counted as gelu (saves its input only)"
        act = "gelu"
    pos_emb = [b for b in blocks if b.kind == "embedding" and b.name not in emb_names]
    position = "learned" if pos_emb else ("alibi" if getattr(text_cfg, "alibi", False) or mt in ("mpt",) else "rope")
    inferred["position"] = ("a learned position embedding" if pos_emb else
                            "config alibi / family" if position == "alibi" else "assumed rotary (no position table)")
    windows_cfg = getattr(text_cfg, "sliding_window", None)
    lt = getattr(text_cfg, "layer_types", None)
    if isinstance(lt, (list, tuple)) and len(lt) == n and windows_cfg:
        windows = tuple(windows_cfg if t == "sliding_attention" else None for t in lt)
        pattern = "layer_types"
    else:
        windows, pattern = (None,) * n, "none"
    qkv_bias = any(b.kind == "bias" and _token_in(b.name, _ATTN_PATH) for b in blocks)
    mlp_bias = any(b.kind == "bias" and (_token_in(b.name, _MLP_PATH) or b.name.rsplit(".", 2)[-2] in _MLP_LEAF)
                   for b in blocks)
    fused_qkv = bool(attn_lin) and not q_like and any(b.linear[1] >= (a + 2 * kv) * d - 0 and b.linear[0] == h
                                                       for b in attn_lin.values())
    theta, scaling = _t.rope(config)
    traits = Traits(norm_dtype="fp32_upcast" if rms else "native", activation=act, mlp=_t.mlp_kind(gated, act),
                    attention=_t.attention_kind(a, kv, False), position=position, fused_qkv=fused_qkv,
                    attention_bias=qkv_bias, mlp_bias=mlp_bias,
                    rope_theta=theta if position == "rope" else None, rope_scaling=scaling,
                    parallel_block=bool(getattr(text_cfg, "use_parallel_residual", False)
                                        or getattr(text_cfg, "parallel_attn", False)),
                    layer_norms=1 if norms_h == 1 else 2,
                    sliding_window=max((w for w in windows if w), default=None),
                    window_pattern=pattern if any(windows) else "none",
                    eager_attention_only=_eager_only(model),
                    loss_fp32=_loss_fp32(model), logits_to_keep=_takes_logits_to_keep(model),
                    rope_fp32=position == "rope" and _rope_fp32(model), **_kda_fallback(model, text_cfg),
                    eager_prefill_score_bytes=_EAGER_PREFILL_SCORE_BYTES.get(mt, 4.0),
                    dropout=Dropout(attention=_prob(text_cfg, "attention_dropout", "attn_pdrop"),
                                    residual=_prob(text_cfg, "resid_pdrop", "hidden_dropout", "residual_dropout",
                                                   "dropout"),
                                    embedding=_prob(text_cfg, "embd_pdrop", "embedding_dropout")))
    inferred["dropout"] = "config attention/residual/embedding dropout keys (resid_pdrop, hidden_dropout, dropout ...)"
    inferred["traits"] = "read from the config and module tree; activation memory uses Llama-like HF terms"
    max_pos = _cfg_int(text_cfg, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length") or 0
    ssm_fields: dict[str, Any] = {}
    if mixers:
        variants = set(mixers.values())
        if len(variants) > 1:
            raise UnsupportedError(f"model_type '{mt}' in {where}", "mixes Mamba-1 and Mamba-2 mixers "
                                   f"({sorted(mixers)[:2]}), which one SSM shape cannot describe.",
                                   "add a hand-written family in gpuplan/models/ssm.py.")
        first = sorted(mixers)[0]
        ssm = _ssm_shape(modules[first], variants.pop(), text_cfg, inferred)
        per_layer = [_layer_mixer({kind_of.get(id(q), "") for q in layer.parameters()}) for layer in layers]
        inferred["layer_mixers"] = ("per layer from its parameters: a Mamba mixer and attention side by side = "
                                    "parallel")
        ssm_fields = dict(ssm=ssm, layer_mixers=tuple(per_layer))
    ssm_fields.update(_recurrent_spec(model, rec_mixers, layers, kind_of, i, inferred))
    if rec_mixers and norms_h == 4:
        # a norm before and after each sub-block (LFM3's operator/post_operator and ffn/post_ffn norms,
        # modeling_lfm3.py Lfm3DecoderLayer with use_sandwich_norm): sandwich placement
        traits = dataclasses.replace(traits, norm_placement="sandwich")
        inferred["norm"] += "; 4 per layer: sandwich"
    family = "generic:" + mt
    fp32 = _fp32_params(model)
    if fp32:
        inferred["params_fp32"] = "parameters kept in fp32 under a 16-bit load (built in fp32, _keep_in_fp32_modules_strict)"
    return ModelSpec(name=name, hf_id=hf_id, model_type=mt, family=family, hidden_size=h, num_layers=n, num_heads=a,
                     params_fp32=fp32,
                     num_kv_heads=kv, head_dim=d, v_head_dim=d, intermediate_size=i, vocab_size=v, tie_embeddings=tie,
                     max_position=max_pos, gated_mlp=gated, norm="rms" if rms else "layernorm",
                     layer_windows=windows, traits=traits, blocks=tuple(blocks), config=dict(config),
                     inferred=inferred, **moe, **ssm_fields)


# Eager-only models whose attention holds more per score at HF prefill's softmax than the 16-bit scores and
# probabilities (traits.eager_prefill_score_bytes, 4), by model_type, read from transformers 5.25's code.
_EAGER_PREFILL_SCORE_BYTES = {
    # modeling_mpt.py MptAttention.forward: the 16-bit scores (ALiBi added, masked) stay alive while softmax runs
    # on their fp32 copy into an fp32 output (2 + 4 + 4), and MptModel.forward's loop keeps the previous block's
    # 16-bit attn_weights in `outputs` (2): BLOOM's pattern (traced: 2-layer default MPT, prompt 510)
    "mpt": 12.0,
    # modeling_gpt_neox_japanese.py GPTNeoXJapaneseAttention._attn: baddbmm adds into a torch.zeros score buffer
    # that stays alive to the return (2), the scores and their masked sum (2 + 2) or the sum and its softmax
    # (2 + 2); the model's loop keeps the previous layer's 16-bit attn_weights in `outputs` (2)
    # (traced: 2-layer default GPT-NeoX-Japanese, prompt 512)
    "gpt_neox_japanese": 8.0,
    # modeling_megatron_bert.py / modeling_roformer.py SelfAttention.forward: scores, scaled, masked and
    # softmaxed out of place, two 16-bit copies alive at each step (2 + 2), and the encoder loop keeps the
    # previous layer's 16-bit attention_probs in `layer_outputs` (2) (traced: 2-layer defaults, prompt 510)
    "megatron-bert": 6.0,
    "roformer": 6.0,
    # modeling_xlm.py MultiHeadAttention.forward: the 16-bit scores (masked in place) stay alive while softmax runs
    # on their fp32 copy (`scores.float()`) into an fp32 output (2 + 4 + 4); the layer returns no probabilities
    "xlm": 10.0,
}


# Sub-modules of a decoder layer that attend to an encoder's output (BART-style `encoder_attn`, BERT-style
# `crossattention`): in a causal LM they run only when the caller passes encoder_hidden_states
_CROSS_ATTENTION = ("encoder_attn", "crossattention")


def _mark_unfed_cross_attention(blocks: list, layers, layers_path: str, inferred: dict) -> list:
    """A decoder-only causal LM whose layers keep a cross-attention onto an encoder it does not own (TrOCR's
    decoder: TrOCRDecoderLayer.encoder_attn, modeling_trocr.py, transformers 5.25, runs only
    `if encoder_hidden_states is not None`): its blocks get stream "cross_idle", weights that a text-only step
    never runs (no gradient, no optimizer state; memory._idle_params)."""
    names = {n for n, _ in layers[0].named_children() if n in _CROSS_ATTENTION}
    if not names:
        return blocks
    # the sub-module and what runs with it in the same branch (TrOCR's encoder_attn_layer_norm)
    marks = tuple(f"{layers_path}.*.{n}{sep}" for n in names for sep in (".", "_"))
    out = [dataclasses.replace(b, stream="cross_idle") if b.name.startswith(marks) else b for b in blocks]
    inferred["cross_idle"] = (f"cross-attention sub-modules {sorted(names)}: run only with an encoder's output, "
                              "which a causal LM is not given")
    return out


def _fp32_params(model) -> int:
    """Parameters that stay fp32 when transformers loads the model in bf16: those the model's own code creates in
    fp32 (the model is built under a bf16 default dtype, as `from_config(dtype=bf16)` does), and those matched by
    its `_keep_in_fp32_modules_strict` patterns, which `from_pretrained` keeps in fp32 for bf16 and fp16 loads
    (transformers 5.25 modeling_utils.py _get_dtype_plan; the patterns are searched in each parameter name,
    core_model_loading.py build_glob_alternation). Hunyuan-V4: its lm_head, routers and hyper-connections."""
    import re
    import torch
    strict = sorted(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    pattern = re.compile("|".join(p.replace("*", ".*") for p in strict)) if strict else None
    return sum(p.numel() for n, p in model.named_parameters()
               if p.is_floating_point() and (p.dtype == torch.float32 or (pattern is not None and pattern.search(n))))


def _kda_fallback(model, text_cfg) -> dict:
    """Kimi Delta Attention (Kimi-Linear, Bailing-hybrid): its modeling module defines the torch fallback
    `chunk_kimi_delta_attention(..., chunk_size=64)` that runs where flash-linear-attention's kernel does not
    (modeling_kimi_linear.py, transformers 5.25). Returns the traits it needs: heads x key head dim of the
    per-channel decay (config linear_num_heads x linear_head_dim) and the fallback's chunk length (its default)."""
    import inspect
    import sys
    fn = getattr(sys.modules.get(type(model).__module__), "chunk_kimi_delta_attention", None)
    heads, dk = _attr_int(text_cfg, "linear_num_heads"), _attr_int(text_cfg, "linear_head_dim")
    if fn is None or not heads or not dk:
        return {}
    try:
        chunk = inspect.signature(_torch_code(fn)).parameters["chunk_size"].default
    except (KeyError, TypeError, ValueError):
        return {}
    return dict(kda_channels=heads * dk, kda_chunk=int(chunk)) if isinstance(chunk, int) and chunk > 0 else {}


def _torch_code(fn):
    """The torch function behind a kernel-dispatch wrapper: transformers wraps some module-level functions in an
    nn.Module that calls a hub kernel where one is loaded and the function otherwise (kernels' layer.py
    _create_func_module, used by transformers' hub_kernels.py use_kernel_func_from_hub); that function is
    held in the wrapper's forward closure."""
    import inspect
    if fn is None or inspect.isfunction(fn):
        return fn
    for cell in getattr(getattr(type(fn), "forward", None), "__closure__", None) or ():
        if inspect.isfunction(cell.cell_contents):
            return cell.cell_contents
    return getattr(fn, "forward", fn)


def _rope_fp32(model) -> bool:
    """Whether the modeling module's `apply_rotary_pos_emb` rotates fp32 copies of q and k (`q.float() * cos`,
    modeling_modernbert_decoder.py / modeling_ernie4_5.py, transformers 5.25) rather than q and k in their dtype."""
    import inspect
    import sys
    fn = getattr(sys.modules.get(type(model).__module__), "apply_rotary_pos_emb", None)
    try:
        return fn is not None and "q.float()" in inspect.getsource(_torch_code(fn))
    except (OSError, TypeError):
        return False


def _takes_logits_to_keep(model) -> bool:
    """Whether the model's forward takes `logits_to_keep`: HF generate passes logits_to_keep=1 only then
    (generation/utils.py GenerationMixin._supports_logits_to_keep, transformers 5.25); without it the prefill
    projects every prompt position onto the vocabulary."""
    import inspect
    try:
        return "logits_to_keep" in inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        return True


def _loss_fp32(model) -> bool:
    """Whether the causal-LM loss upcasts the logits to fp32: transformers' shared `self.loss_function`
    (loss/loss_utils.py ForCausalLMLoss: `logits.float()`) does; a forward that builds its own CrossEntropyLoss
    on the logits as they are (TrOCR, CPM-Ant: modeling_trocr.py TrOCRForCausalLM.forward) does not. Read from
    the forward's source; a forward whose source cannot be read is assumed to use the shared loss."""
    import inspect
    try:
        src = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        return True
    return "loss_function" in src or "CrossEntropyLoss" not in src


def _eager_only(model) -> bool:
    """The model class has neither an SDPA nor a flash-attention path (`_supports_sdpa` and `_supports_flash_attn`
    false, transformers 5.25 modeling_utils.PreTrainedModel): its own attention code runs, materialising the scores."""
    cls = type(model)
    return not getattr(cls, "_supports_sdpa", True) and not getattr(cls, "_supports_flash_attn", True)


def _in_attention_branch(pname: str, layers_path: str, modules) -> bool:
    """Whether a parameter sits directly in a layer (not in a sub-block) whose layer also holds an attention
    sub-block (a hybrid layer with a shared transformer block)."""
    rest = pname[len(layers_path) + 1:].split(".")
    if len(rest) != 3:          # index, module, weight|bias
        return False
    layer = modules.get(f"{layers_path}.{rest[0]}")
    return layer is not None and any("attn" in n for n, _ in layer.named_parameters())


def _layer_mixer(kinds: set[str]) -> str:
    """The token mixer of one layer of a model with Mamba mixers, from its parameters' kinds."""
    if "ssm" in kinds:
        return "parallel" if "attn" in kinds else "mamba"
    return "attention" if "attn" in kinds else "mlp"


def _prob(cfg, *names) -> float:
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1:
            return float(v)
    return 0.0


# ---- encoder-decoders (BART, mBART, Pegasus, Marian, Blenderbot, PLBART, MVP, ProphetNet ...) -------------------
# model_types whose encoder and decoder layers run BART's ops (transformers 5.24 models/bart/modeling_bart.py
# BartEncoderLayer / BartDecoderLayer: nn.LayerNorm, biased q/k/v/out_proj through the attention interface, fc1 ->
# activation -> fc2, dropout after each sub-block); mbart, pegasus and blenderbot put the norm before each
# sub-block, which saves the same tensors (estimate/encdec.py). Their memory estimate is derived and traced.
BART_LAYER_TYPES = frozenset({"bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small", "plbart", "mvp",
                              "bigbird_pegasus", "whisper"})
# Whisper (transformers 5.25 models/whisper/modeling_whisper.py) runs mBART's pre-LN layers (WhisperEncoderLayer,
# WhisperDecoderLayer: LayerNorm before each sub-block, attention through the attention interface, fc1 -> gelu -> fc2)
# behind a front end WhisperEncoder.forward applies to log-mel frames: gelu(conv1(features)), gelu(conv2(.)) (kernel
# 3; conv2 stride 2), + the fixed positions; it requires exactly max_source_positions x conv1.stride x conv2.stride
# frames (30 s of audio), so its encoder length is the model's, not the scenario's (`traits.speech_frames`).
# BigBird-Pegasus runs Pegasus's layers, but its encoder self-attention is its own eager code
# (modeling_bigbird_pegasus.py BigBirdPegasusSelfAttention: matmul, softmax, matmul): full attention up to
# (5 + 2 x num_random_blocks) x block_size input tokens, where BigBirdPegasusEncoder.forward switches a
# block_sparse config to original_full, and block-sparse attention beyond it, which is not derived.
# encoder-decoders read for parameters whose activations differ from BART's, and why (no memory estimate)
ENCDEC_NOT_DERIVED = {
    "led": "its encoder uses Longformer's sliding-window and global attention",
}
# n-gram decoders (transformers 5.25 models/prophetnet/modeling_prophetnet.py: ProphetNetDecoder runs the main stream
# and `ngram` predicting streams, (1 + ngram) x target tokens, through every layer's ProphetNetNgramSelfAttention;
# the lm_head reads the predicting streams only). Their layers are BART's post-LN layer (LayerNorm after each residual
# sum, fc1 -> activation -> dropout -> fc2) with every attention eager (einsum, softmax, dropout, einsum): read from
# the config's `ngram` and `num_buckets` with the decoder's `ngram_embeddings`, and derived in estimate/encdec.py.
_NGRAM_EMBEDDING = "ngram_embeddings"
_CROSS_PATH = ("encoder_attn", "cross_attn", "crossattention", "cross_attention", "enc_dec_attn")
_KV_LEAF = ("k_proj", "v_proj", "key_proj", "value_proj", "key", "value", "k", "v")


def _bigbird_full_attention_up_to(cfg) -> int:
    """Input tokens up to which a BigBird encoder runs full (eager) attention: all of them for attention_type
    original_full; for block_sparse, (5 + 2 x num_random_blocks) x block_size (BigBirdPegasusEncoder.forward's
    max_tokens_to_attend, transformers 5.25). 0 for a config without BigBird's attention keys."""
    kind, block, rand = (getattr(cfg, k, None) for k in ("attention_type", "block_size", "num_random_blocks"))
    if kind == "original_full":
        return _cfg_int(cfg, "max_position_embeddings") or 1 << 30
    if kind == "block_sparse" and isinstance(block, int) and isinstance(rand, int):
        return (5 + 2 * rand) * block
    return 0


def _speech_frames(model, enc_path: str, cfg) -> tuple:
    """(mel bins, input frames, ((out_channels, stride), ...)) for an encoder whose stack starts with Conv1d layers
    over feature channels (Whisper's conv1, conv2) and whose config fixes its positions (max_source_positions);
    () otherwise."""
    import torch.nn as nn
    stack = enc_path.rpartition(".")[0]
    convs = [m for p, m in model.named_modules() if isinstance(m, nn.Conv1d) and p.rpartition(".")[0] == stack]
    positions = _cfg_int(cfg, "max_source_positions")
    if not convs or not positions:
        return ()
    frames = positions
    for c in convs:
        frames *= c.stride[0]
    return (convs[0].in_channels, frames, tuple((c.out_channels, c.stride[0]) for c in convs))


def _stack_layers(model, stack: str):
    """(path, ModuleList) of one stack's layers: the longest ModuleList under a module path component named
    `stack` ("encoder" / "decoder")."""
    import torch.nn as nn
    best = ("", None)
    for path, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) and stack in path.split(".") and (
                best[1] is None or len(mod) > len(best[1])):
            best = (path, mod)
    return best


def spec_from_meta_encdec(config: Mapping[str, Any], *, name: str, hf_id: str | None, where: str) -> ModelSpec:
    """A ModelSpec for an encoder-decoder transformers builds with AutoModelForSeq2SeqLM: parameters exact per
    tensor, each block tagged with the tokens it runs over (`stream`: encoder, decoder, or cross_kv for the
    cross-attention k/v projections that read the encoder output). Structure from the config and module
    tree as for decoder-only models; `inferred` says how."""
    import torch.nn as nn
    from .meta import build_meta_model

    mt = str(config.get("model_type"))
    model = build_meta_model(config)
    cfg = model.config
    inferred: dict[str, str] = {}
    (enc_path, enc), (dec_path, dec) = _stack_layers(model, "encoder"), _stack_layers(model, "decoder")
    if enc is None or dec is None:
        raise UnsupportedError(f"model_type '{mt}' in {where}", "is an encoder-decoder whose transformers module "
                               "tree has no list of encoder and decoder layers, so its structure cannot be read.",
                               "count it with `gpuplan model CONFIG --meta` (total only).")
    ne, nd = len(enc), len(dec)
    inferred["num_layers"] = f"length of '{dec_path}' (decoder); encoder_layers: length of '{enc_path}'"
    emb, out, v, h, tie = _embeddings(model, inferred)
    a = _cfg_int(cfg, "decoder_attention_heads", "num_attention_heads", "num_heads", "encoder_attention_heads")
    if a is None:
        raise UnsupportedError(f"model_type '{mt}' in {where}", "names no attention heads in its config.",
                               "count it with `gpuplan model CONFIG --meta` (total only).")
    d = h // a
    inferred["head_dim"] = "hidden_size / attention heads"
    modules = dict(model.named_modules())
    emb_names, out_names = _head_names(modules, emb, out)
    prefixes = (enc_path + ".", dec_path + ".")
    groups: dict[str, list] = {}
    first: dict[str, str] = {}
    for pname, p in model.named_parameters():
        key = _LAYER_INDEX.sub(".*.", pname, count=1) if pname.startswith(prefixes) else pname
        key = key if key not in groups or groups[key][0].shape == p.shape else f"{key}{list(p.shape)}"
        groups.setdefault(key, []).append(p)
        first.setdefault(key, pname)
    blocks: list[Block] = []
    for key, params in groups.items():
        p, count = params[0], len(params)
        numel = p.numel()
        mod_path = first[key].rpartition(".")[0]
        leaf = first[key].rpartition(".")[2]
        mod = modules.get(mod_path)
        mod_cls = type(mod).__name__ if mod is not None else ""
        in_layer = key.startswith(prefixes)
        stream = "encoder" if key.startswith(enc_path + ".") or ".encoder." in f".{key}" else "decoder"
        head = _head_block(key, numel, emb_names, out_names, h, v)
        if head is not None:
            blocks.append(head)
            continue
        if isinstance(mod, nn.Embedding) and p.ndim == 2:
            blocks.append(Block(key, "embedding", numel, 1, None, 1.0, "model", stream=stream))  # learned positions
            continue
        kind = _classify(key, mod_path.rpartition(".")[2], mod_cls, 2 if leaf == "bias" else p.ndim, in_layer)
        if not kind and in_layer and mod_path.rpartition(".")[2] in _MLP_LEAF | {"intermediate", "output"}:
            kind = "mlp"          # BART-style fc1/fc2 sit directly in the layer
        if not kind:
            raise UnsupportedError(f"model_type '{mt}' in {where}",
                                   f"parameter '{key}' ({mod_cls}, shape {tuple(p.shape)}) could not be classified "
                                   "as attention, MLP, norm or embedding, so gpuplan will not guess its role.",
                                   "count it with `gpuplan model CONFIG --meta` (total only).")
        cross = stream == "decoder" and _token_in(key, _CROSS_PATH)
        if cross and mod_path.rpartition(".")[2] in _KV_LEAF:
            stream = "cross_kv"
        scope = "layer" if in_layer else "model"
        if leaf == "bias" and kind in ("attn", "mlp"):
            blocks.append(Block(key, "bias", numel, count, None, 1.0, scope, stream=stream))
            continue
        linear = (int(p.shape[1]), int(p.shape[0])) if p.ndim == 2 and kind in ("attn", "mlp") and isinstance(
            mod, nn.Linear) else None
        blocks.append(Block(key, kind, numel, count, linear, 1.0, scope, stream=stream))
    if tie:
        blocks.append(_tied_head_flops_block(h, v))
    fc_in = [b for b in blocks if b.kind == "mlp" and b.linear and b.linear[0] == h and b.stream == "decoder"]
    i = _cfg_int(cfg, "decoder_ffn_dim", "ffn_dim", "intermediate_size", "d_ff") or max(
        (b.linear[1] for b in fc_in), default=0)
    inferred["intermediate_size"] = "config (decoder_ffn_dim / ffn_dim / intermediate_size) or fc1's out_features"
    norm_cls = {type(m).__name__ for m in dec[0].modules() if "Norm" in type(m).__name__}
    rms = any("RMS" in c or "Rms" in c for c in norm_cls)
    act_name = str(getattr(cfg, "activation_function", None) or getattr(cfg, "hidden_act", None) or "gelu")
    act = {"swish": "silu", "gelu_python": "gelu"}.get(act_name, act_name)
    if act not in ACTIVATIONS:
        inferred["activation"] = f"'{act_name}' is not modelled; counted as gelu (saves its input only)"
        act = "gelu"
    pos = any(b.kind == "embedding" and b.name not in emb_names for b in blocks)
    p_drop = _prob(cfg, "dropout")
    ngram = _cfg_int(cfg, "ngram") if any(n.endswith(_NGRAM_EMBEDDING) for n in modules) else None
    ngram_buckets = _cfg_int(cfg, "num_buckets") if ngram else None
    if ngram and ngram_buckets:
        inferred["ngram_streams"] = (f"config ngram = {ngram} predicting streams beside the main one (the decoder "
                                     f"holds '{_NGRAM_EMBEDDING}'); relative_attention_buckets: config num_buckets")
    layer_kind = "ngram" if ngram and ngram_buckets and not rms else (
        "bart" if mt in BART_LAYER_TYPES and not rms else "")
    traits = Traits(norm_dtype="fp32_upcast" if rms else "native", activation=act, mlp=_t.mlp_kind(False, act),
                    attention="mha", position="learned" if pos else "relative", partial_rotary=0.0, rope_theta=None,
                    attention_bias=any(b.kind == "bias" for b in blocks),
                    dropout=Dropout(attention=_prob(cfg, "attention_dropout"), residual=p_drop, embedding=p_drop,
                                    activation=_prob(cfg, "activation_dropout")),
                    speech_frames=_speech_frames(model, enc_path, cfg),
                    encdec_layer=layer_kind, ngram_streams=(ngram or 0) if layer_kind == "ngram" else 0,
                    relative_attention_buckets=(ngram_buckets or 0) if layer_kind == "ngram" else 0,
                    encoder_eager_up_to=_bigbird_full_attention_up_to(cfg))
    if not layer_kind:
        inferred["memory"] = ENCDEC_NOT_DERIVED.get(mt, "its layers are not checked against BART's")
    inferred["traits"] = "read from the config and module tree"
    max_pos = _cfg_int(cfg, "max_position_embeddings", "n_positions") or 0
    return ModelSpec(name=name, hf_id=hf_id, model_type=mt, family="generic:" + mt, hidden_size=h, num_layers=nd,
                     encoder_layers=ne, num_heads=a, num_kv_heads=a, head_dim=d, v_head_dim=d, intermediate_size=i,
                     vocab_size=v, tie_embeddings=tie, max_position=max_pos, gated_mlp=False,
                     norm="rms" if rms else "layernorm", layer_windows=(None,) * nd, traits=traits,
                     blocks=tuple(blocks), config=dict(config), inferred=inferred)

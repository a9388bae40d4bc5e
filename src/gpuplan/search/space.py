"""The candidate space: which fields of a partial scenario are fixed, which are open, and the
values an open field may take (docs/recommend.md §1).

A field is *fixed* when the user gave one value, *open* when it is absent (hardware and layout),
null or "auto", and *restricted* when the user gave a list ("method: [lora, qlora]"). Every
function that rules a value out returns the reason as a sentence, never a bare False.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from ..errors import CatalogHint, CommandHint, InputError

OPEN_WORDS = (None, "auto", "any", "open")

TRAIN_OPTIONS: dict[str, tuple] = {
    "method": ("full", "lora", "qlora"),
    "recompute": ("none", "selective", "full"),
    "micro_batch": (1, 2, 4, 8),
    "optimizer": ("adamw", "adamw-8bit"),
    "precision": ("bf16", "fp16"),
    "attention": ("flash", "sdpa"),
}
# fields that stay at the scenario default when absent (choosing them changes the result's quality
# or the user's code, so the search only opens them when asked)
TRAIN_DEFAULT_FIXED = {"method": "full", "optimizer": "adamw", "precision": "bf16", "attention": "flash"}
INFER_OPTIONS: dict[str, tuple] = {
    "engine": ("vllm", "sglang", "trtllm"),
    "weights": ("bf16", "fp8", "awq-int4"),
    "kv_cache": ("bf16", "fp8"),
}
INFER_DEFAULT_FIXED = {"weights": "bf16", "kv_cache": "bf16"}
PARALLEL_FIELDS = ("tp", "pp", "cp", "ep", "zero", "offload")
ZERO_STAGES = (0, 1, 2, 3)
OFFLOADS = ("none", "optimizer", "optimizer+params")
RECOMPUTE_RANK = {"none": 0, "selective": 1, "full": 2}
OFFLOAD_RANK = {o: i for i, o in enumerate(OFFLOADS)}
DEFAULT_MAX_GPUS = 4096


@dataclass
class Space:
    """What the search may vary. None = open (the search picks), a tuple = allowed values."""
    base: dict[str, Any]                        # fixed part of the scenario (model, task, train, infer, cost, ...)
    task: str
    gpus: tuple[str, ...] | None = None
    counts: tuple[int, ...] | None = None
    gpus_per_node: int | None = None
    parallel: dict[str, tuple | None] = field(default_factory=dict)
    train: dict[str, tuple | None] = field(default_factory=dict)
    infer: dict[str, tuple | None] = field(default_factory=dict)
    named: dict[str, tuple] = field(default_factory=dict)     # what the user spelled out (for rejections)
    global_batch_default: bool = False

    def options(self, section: str, name: str, default: tuple) -> tuple:
        opts = getattr(self, section).get(name)
        return default if opts is None else opts


def _as_options(value: Any) -> tuple | None:
    if isinstance(value, str) and value.strip().lower() in OPEN_WORDS:
        return None
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(value) if value else None
    return (value,)


MAX_OPTIONS = 64          # values one searchable field may list


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def checked_options(where: str, values: tuple | None, model: type[BaseModel], extra: Mapping[str, Any] = {}) -> tuple | None:
    """`values` validated one by one as the scenario field `where` (e.g. "train.micro_batch") would
    be, coerced the same way, and deduplicated in order; an invalid value is an InputError."""
    if values is None:
        return None
    if len(values) > MAX_OPTIONS:
        raise InputError(where, f"lists {len(values)} values; the search takes at most {MAX_OPTIONS}.",
                         f"list fewer values for {where}, or leave it open.")
    name = where.rpartition(".")[2]
    out = []
    for v in values:
        try:
            parsed = getattr(model.model_validate({**extra, name: v}), name)
        except ValidationError as err:
            why = err.errors()[0]["msg"].removeprefix("Value error, ")
            raise InputError(where, f"value {_short(v)} is not valid: {why}.",
                             f"give {where} as one valid value or a list of them, or leave it open",
                             see=CatalogHint("schema", "the allowed values")) from None
        out.append(parsed)
    return tuple(dict.fromkeys(out))


def _take_options(section: dict[str, Any], options: Mapping[str, Any], fixed: Mapping[str, Any],
                  out: dict[str, Any], named: dict[str, Any], *, mark_defaulted: bool, where: str = "",
                  model: type[BaseModel] | None = None) -> None:
    """Move searchable fields out of `section` into `out`: a given value or list restricts the
    search (and is remembered as named by the user), a fixed default pins it, anything else is open."""
    for name in options:
        if name in section:
            opts = _as_options(section.pop(name))
            if model is not None:
                opts = checked_options(f"{where}.{name}", opts, model)
            out[name] = opts
            if opts:
                named[name] = opts
        elif name in fixed:
            out[name] = (fixed[name],)
            if mark_defaulted:
                out[f"_{name}_defaulted"] = True
        else:
            out[name] = None


def space_from(data: dict[str, Any]) -> Space:
    """Split a partial scenario dict into its fixed part and the open/restricted fields."""
    if not isinstance(data, dict):
        raise InputError("recommend input", f"must be a scenario or a mapping, got {type(data).__name__}.",
                         "pass a Scenario, a dict with at least `model:`, or a scenario file.")
    if not data.get("model"):
        raise InputError("recommend input", "names no model.", "add `model: <registry name or HF id>`.")
    data = {k: v for k, v in data.items() if k not in ("constraints", "objective", "preset")}
    task = data.get("task", "train")
    if task not in ("train", "finetune", "infer"):
        raise InputError("task", f"{_short(task)} is not a task.", "use train, finetune or infer.")
    for sec in ("hardware", "parallel", "train", "infer"):
        if data.get(sec) is not None and not isinstance(data[sec], Mapping):
            raise InputError(sec, f"must be a mapping of fields, got {type(data[sec]).__name__}.",
                             f"write `{sec}:` with its fields below it, or leave it out.")
    from ..scenario import Hardware, Infer, Parallel, Train
    base: dict[str, Any] = {k: v for k, v in data.items() if k not in ("hardware", "parallel", "train", "infer")}
    base["task"] = task
    hw = dict(data.get("hardware") or {})
    sp = Space(base=base, task=task)
    sp.gpus = checked_options("hardware.gpu", _as_options(hw.get("gpu")), Hardware, {"count": 1})
    sp.counts = checked_options("hardware.count", _as_options(hw.get("count")), Hardware, {"gpu": "-"})
    gpn = checked_options("hardware.gpus_per_node", _as_options(hw.get("gpus_per_node")), Hardware, {"gpu": "-"})
    if gpn and len(gpn) > 1:
        raise InputError("hardware.gpus_per_node", "takes one value, not a list.", "give one number or leave it out.")
    sp.gpus_per_node = gpn[0] if gpn else None
    for key in ("network", "profile"):
        if hw.get(key):
            checked_options(f"hardware.{key}", (hw[key],), Hardware, {"gpu": "-"})
            base[f"_{key}"] = hw[key]
    if sp.gpus:
        sp.named["gpu"] = sp.gpus
    if sp.counts:
        sp.named["count"] = sp.counts

    par = dict(data.get("parallel") or {})
    par.pop("dp", None)
    if par.get("shard_group") is not None:
        raise InputError(f"parallel.shard_group = {par['shard_group']!r}", "is chosen by the search: with zero 3 "
                         "over more than one node it also tries a shard group of one node's GPUs (HSDP), and every "
                         "layout has its own data-parallel size for the group to divide.",
                         "remove shard_group here", see=CommandHint("estimate", "the price of one shard group"))
    for name in PARALLEL_FIELDS:
        opts = checked_options(f"parallel.{name}", _as_options(par.pop(name, None)), Parallel)
        sp.parallel[name] = opts
        if opts:
            sp.named[name] = opts
    base["_parallel_rest"] = {k: v for k, v in par.items() if v is not None}   # vpp, sp

    if task in ("train", "finetune"):
        tr = dict(data.get("train") or {})
        if data.get("tool"):
            # a fine-tuning tool's defaults are fixed choices of the plan, as if the user had written them
            from ..scenario import TOOL_DEFAULTS
            for key, value in TOOL_DEFAULTS.get(data["tool"], {}).items():
                tr.setdefault(key, value)
        _take_options(tr, TRAIN_OPTIONS, TRAIN_DEFAULT_FIXED, sp.train, sp.named, mark_defaulted=True,
                      where="train", model=Train)
        if not tr.get("global_batch"):
            sp.global_batch_default = True
        base["train"] = tr
    else:
        inf = dict(data.get("infer") or {})
        _take_options(inf, INFER_OPTIONS, INFER_DEFAULT_FIXED, sp.infer, sp.named, mark_defaulted=False,
                      where="infer", model=Infer)
        base["infer"] = inf
    return sp


def default_global_batch(task: str, seq_len: int) -> int:
    """Sequences per optimizer step when the user gives none: ~4M tokens for pre-training (Llama 3
    started at 4M, arXiv:2407.21783 §3.4), 64 sequences for fine-tuning."""
    if task == "train":
        return max(1, 2 ** 22 // seq_len)
    return 64


# ---- validity of layout values for a model ---------------------------------------------------------

def tp_reason(model: Any, tp: int, task: str) -> str | None:
    if model.num_heads % tp:
        return f"tp={tp} does not divide {model.num_heads} attention heads"
    kv = model.num_kv_heads
    if task in ("train", "finetune"):
        if not model.is_mla and kv % tp:
            return f"tp={tp} does not divide {kv} KV heads"
    elif not model.is_mla and kv % tp and tp % kv:
        return f"tp={tp} neither divides nor is a multiple of {kv} KV heads"
    return None


def pp_reason(model: Any, pp: int) -> str | None:
    if pp > model.num_layers:
        return f"pp={pp} exceeds the model's {model.num_layers} layers"
    return None


def ep_reason(model: Any, ep: int) -> str | None:
    if ep == 1:
        return None
    if not model.num_experts:
        return f"ep={ep} needs a mixture-of-experts model ({model.name} is dense)"
    if model.num_experts % ep:
        return f"ep={ep} does not divide {model.num_experts} experts"
    return None


def cp_reason(seq_len: int, cp: int, task: str) -> str | None:
    if cp == 1:
        return None
    if task == "infer":
        return "context parallel is for training only"
    if seq_len % (2 * cp):
        return f"cp={cp} does not split seq_len={seq_len} into 2*cp equal chunks"
    return None


def powers_of_two(limit: int, start: int = 1) -> list[int]:
    out, v = [], start
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def node_aligned_counts(gpus_per_node: int, max_gpus: int) -> list[int]:
    """1, 2, 4, ... up to a node, then whole nodes doubling: 8, 16, 32, ... (never 3 nodes and a bit)."""
    small = [c for c in powers_of_two(gpus_per_node) if c <= max_gpus]
    if gpus_per_node not in small and gpus_per_node <= max_gpus:
        small.append(gpus_per_node)
    big = [gpus_per_node * k for k in powers_of_two(max(1, max_gpus // gpus_per_node), 2)]
    return sorted(set(small + [c for c in big if c <= max_gpus]))

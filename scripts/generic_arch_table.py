"""Which architectures transformers can build give an exact parameter count with `gpuplan model`.

For every model_type transformers maps to AutoModelForCausalLM, build its config class's default
config, read it with gpuplan (hand-written family, or the generic meta-device reader), and compare
the total with `from_config` on the meta device. Writes docs/generic-architectures.md.

With `--trace`, every exact row is also cut to 2 layers and its memory estimate checked against a
fake-tensor trace (gpuplan.trace), as tests/test_models_family_traces.py does: (a) full bf16 fine-tuning,
AdamW without master weights, seq 512 x 1, no recompute: total peak and activations; (b) HF inference,
prompt 512, one decode step: peak. Each row is bounded to ROW_SECONDS.

Run from the repo root: PYTHONPATH=src python3 scripts/generic_arch_table.py [--limit N] [--only a,b] [--trace] [OUT.md]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def default_config(model_type: str, **fields) -> dict:
    """The config transformers' config class builds for `model_type` by default (fields override it), as the
    dict gpuplan reads, its model_type included."""
    import transformers
    cfg = transformers.AutoConfig.for_model(model_type, **fields).to_dict()
    cfg["model_type"] = model_type
    return cfg


def check(model_type: str) -> dict:
    """One row: status exact | differs | refused | unbuildable, counts and the reason."""
    from gpuplan.errors import GpuplanError
    from gpuplan.models import spec_from_config
    from gpuplan.models.meta import meta_param_count

    try:
        cfg = default_config(model_type)
    except Exception as err:  # config class needs arguments
        return dict(model_type=model_type, status="unbuildable", reason=f"config: {type(err).__name__}")
    try:
        meta = meta_param_count(cfg)["parameters_plus_stored_buffers"]
    except GpuplanError as err:
        return dict(model_type=model_type, status="unbuildable", reason=err.why[:160])
    try:
        spec = spec_from_config(cfg, name=model_type)
    except GpuplanError as err:
        return dict(model_type=model_type, status="refused", meta=meta, reason=err.why[:200])
    except Exception as err:  # a bug in gpuplan: reported, not hidden
        return dict(model_type=model_type, status="error", meta=meta, reason=f"{type(err).__name__}: {err}"[:200])
    ok = spec.params_total == meta
    return dict(model_type=model_type, status="exact" if ok else "differs", meta=meta, ours=spec.params_total,
                family=spec.family, reason="" if ok else f"{spec.params_total - meta:+,d}")


ROW_SECONDS = 150   # transformers' torch-path Mamba scan is slow on fake tensors in training
TOL = 0.05
LAYERS = 2
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
               "num_decoder_layers", "num_encoder_layers")


def _is_index_list(v: list) -> bool:
    """Layer indices (Llama 4's `moe_layers` naming all 48 layers), not one value per layer: strictly rising ints."""
    return all(isinstance(x, int) and not isinstance(x, bool) for x in v) and all(a < b for a, b in zip(v, v[1:]))


def _per_layer_keys(cfg: dict, n: int) -> list[str]:
    """Keys with one entry per layer: a list, or a string pattern ("M-M*" hybrid patterns); index lists are not."""
    return [k for k, v in cfg.items() if n > LAYERS and ((isinstance(v, list) and len(v) == n
            and not any(t in k for t in ("idx", "indices")) and not _is_index_list(v))
            or (isinstance(v, str) and len(v) == n and "pattern" in k))]


def _is_layer_refs(v: list) -> bool:
    """One layer index per layer, each at or before its own (Kolibri's `kv_source_layers`: the layer whose KV
    cache a layer reads)."""
    return len(v) > 2 and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= i for i, x in enumerate(v)) \
        and max(v) >= 2         # not a 0/1 flag per layer


def _layer_index_keys(cfg: dict, n: int) -> list[str]:
    """Keys holding rising layer indices (Zamba2's `hybrid_layer_ids`, Mllama's `cross_attention_layers`,
    Kolibri's `index_layers`, Llama 4's `moe_layers`): re-indexed to the kept layers when the count is cut."""
    return [k for k, v in cfg.items() if "layer" in k and isinstance(v, list) and v and _is_index_list(v)
            and 0 <= v[0] and v[-1] < n]


def _kept_layers(cfg: dict, n: int, per_layer: list[str], per_kind: int = 1) -> list[int]:
    """The first LAYERS layers plus the first `per_kind` layers of every kind any per-layer list names (a hybrid
    keeps an attention layer)."""
    if n <= LAYERS:
        return list(range(n))
    keep: set[int] = set(range(LAYERS))
    for k in per_layer:
        if _is_layer_refs(cfg[k]):
            # one layer of each kind: its own (v == i) and a reader of an earlier layer's, with that source
            for own in (True, False):
                i = next((i for i, v in enumerate(cfg[k]) if (v == i) == own), None)
                if i is not None:
                    keep.update((i, cfg[k][i]))
            continue
        seen: dict[str, int] = {}
        for i, v in enumerate(cfg[k]):
            if seen.get(repr(v), 0) < per_kind:
                seen[repr(v)] = seen.get(repr(v), 0) + 1
                keep.add(i)
    return sorted(keep)


def _section_keys(obj, n: int) -> list[str]:
    """Counts of consecutive sections that add up to the stack (Dory's n_input_layers + n_recurrent_layers +
    n_output_layers == num_hidden_layers, which its config validates), in stack order."""
    keys = [k for k, v in vars(obj).items() if k.startswith("n_") and k.endswith("_layers")
            and isinstance(v, int) and not isinstance(v, bool) and 0 < v < n]
    return keys if len(keys) > 1 and sum(getattr(obj, k) for k in keys) == n else []


def _cut_sections(obj, n: int, sections: list[str], per_kind: int) -> tuple[dict, list[str]]:
    """Cut a stack of sections on the config object (its to_dict may store another layout: Dory doubles every
    count, an attention and an MLP block per layer): the kept layers are the usual ones plus each section's
    first, so every section keeps a layer; each count becomes the kept layers that fall in it."""
    per_layer = [k for k, v in vars(obj).items() if isinstance(v, list) and len(v) == n]
    starts, at = [], 0
    for k in sections:
        starts.append(at)
        at += getattr(obj, k)
    idx = sorted(set(_kept_layers(vars(obj), n, per_layer, per_kind)) | set(starts))
    counts = [sum(s <= i < s + getattr(obj, k) for i in idx) for k, s in zip(sections, starts)]
    for k in per_layer:
        setattr(obj, k, [getattr(obj, k)[i] for i in idx])
    for k, c in zip(sections, counts):
        setattr(obj, k, c)
    obj.num_hidden_layers = len(idx)
    return obj.to_dict(), [f"layers {n}->{len(idx)}", f"sections {', '.join(f'{k} {c}' for k, c in zip(sections, counts))}"] + \
        [f"{k} kept layers {idx}" for k in per_layer]


def _shared_tail_key(cfg: dict, n: int) -> str | None:
    """A count of trailing layers that reuse an earlier layer's state (Gemma 3n's `num_kv_shared_layers`: the last 15
    of 35 layers read the KV cache of the last earlier layer of their type, Gemma3nTextConfig.kv_sharing_modes)."""
    return next((k for k, v in cfg.items() if k.startswith("num_") and "shared" in k and k.endswith("_layers")
                 and isinstance(v, int) and not isinstance(v, bool) and LAYERS < v < n), None)


def _cut_shared_tail(obj, cfg: dict, n: int, tail: str, per_kind: int) -> tuple[dict, list[str]]:
    """Cut a stack whose last `cfg[tail]` layers reuse earlier layers' state: the usual kept layers among the
    producers (their per-layer lists cut with them), plus the last layer, which reuses; the count becomes 1. The
    producers keep every layer type the reusing layer needs (the usual cut keeps the first layer of each kind)."""
    first = n - cfg[tail]
    per_layer = _per_layer_keys(cfg, n)
    idx = [i for i in _kept_layers(cfg, n, per_layer, per_kind) if i < first] + [n - 1]
    obj.num_hidden_layers = len(idx)
    out = obj.to_dict()
    for k in per_layer:
        v = out[k] if len(out[k]) == n else cfg[k]
        out[k] = "".join(v[i] for i in idx) if isinstance(v, str) else [v[i] for i in idx]
    out[tail] = 1
    return out, [f"layers {n}->{len(idx)}", f"{tail} {cfg[tail]}->1"] + [f"{k} kept layers {idx}" for k in per_layer]


def _cut_layers(obj, cfg: dict, per_kind: int = 1) -> tuple[dict, list[str]]:
    """Cut one (sub-)config: `obj` the config object, `cfg` its dict. Returns the cut dict and notes.

    The count is set through the config object (transformers' attribute_map maps num_hidden_layers to each
    class's own key); per-layer lists are cut to the kept layers, and a `per_layer_config` keyed by layer
    index (per-layer overrides: Gemma-4's wider full-attention heads) is re-keyed to the kept layers' new
    positions."""
    n = getattr(obj, "num_hidden_layers", None)
    stack = next((k for k, v in cfg.items() if k.endswith("layers_per_stack") and isinstance(v, int)
                  and LAYERS < v < n and n % v == 0), None)
    if stack:
        # HRM: one stack of `num_layers_per_stack` layers is built and run H_cycles x (L_cycles + 1) times;
        # num_hidden_layers counts the cache slots of every pass. The stack is cut, the slot count with it
        k = n // cfg[stack]
        obj.num_hidden_layers = LAYERS * k
        out = obj.to_dict()
        out[stack] = LAYERS
        return out, [f"{stack} {cfg[stack]}->{LAYERS}", f"layers {n}->{LAYERS * k}"]
    tail = _shared_tail_key(cfg, n)
    if tail:
        return _cut_shared_tail(obj, cfg, n, tail, per_kind)
    sections = _section_keys(obj, n)
    if sections:
        return _cut_sections(obj, n, sections, per_kind)
    per_layer = _per_layer_keys(cfg, n)
    idx = _kept_layers(cfg, n, per_layer, per_kind)
    # period/offset hybrids (Jamba: attention every 8th layer from layer 4, experts every 2nd from 1): keep the
    # leading layers up to the last kind's first layer, so each kind appears once
    offsets = [v for k, v in cfg.items() if k.endswith("_layer_offset") and isinstance(v, int)
               and isinstance(cfg.get(k.replace("_offset", "_period")), int)]
    if offsets and not per_layer and max(offsets) + 1 > len(idx):
        idx = list(range(min(n, max(offsets) + 1)))
    # a cycle of layer kinds shorter than the stack, repeated over it (RecurrentGemma's block_types: layer i is
    # block_types[i % len], RecurrentGemmaConfig.layers_block_type): keep the leading layers up to each kind's first
    cycles = [v for k, v in cfg.items() if "type" in k and isinstance(v, list) and 1 < len(v) < n
              and all(isinstance(x, str) for x in v) and len(set(v)) > 1]
    if cycles and not per_layer:
        last_first = max(cycles[0].index(t) for t in set(cycles[0]))
        idx = list(range(max(len(idx), last_first + 1)))
    new_n, cut = len(idx), []
    if new_n < n:
        try:
            obj.num_hidden_layers = new_n
        except NotImplementedError:     # ProphetNet: only its num_encoder_layers / num_decoder_layers (cut below)
            pass
        cut.append(f"layers {n}->{new_n}")
    out = obj.to_dict()
    for k in _LAYER_KEYS:
        v = out.get(k)
        if isinstance(v, int) and new_n < n and v == n:
            out[k] = new_n
        elif isinstance(v, int) and new_n < n and 0 < v < n and n % v == 0 and new_n % (n // v) == 0 \
                and getattr(type(obj), "num_hidden_layers", None) is not None:
            # num_hidden_layers is a property counting sub-layers (LongCat-Flash: 2 per `num_layers`)
            out[k] = new_n // (n // v)
    for k in _LAYER_KEYS + tuple(k for k in out if k.endswith("_layers") and k not in _LAYER_KEYS):
        # a count of layers equal to the whole stack (Gemma-4 assistant's `num_kv_shared_layers`: every layer
        # reads the target's cache; Qwen2-style `max_window_layers`) is the whole cut stack
        v = out.get(k)
        if k not in _LAYER_KEYS and isinstance(v, int) and not isinstance(v, bool) and new_n < n and v == n:
            out[k] = new_n
            cut.append(f"{k} {n}->{new_n}")
    for k in _layer_index_keys(cfg, n) if new_n < n else ():
        out[k] = [j for j, i in enumerate(idx) if i in set(cfg[k])]
        cut.append(f"{k} re-indexed {out[k]}")
    for k in per_layer:
        v = out[k]
        if isinstance(v, str):
            out[k] = "".join(v[i] for i in idx)
        elif _is_layer_refs(v):
            out[k] = [idx.index(v[i]) for i in idx]    # sources re-indexed to the kept layers
        else:
            out[k] = [v[i] for i in idx]
        cut.append(f"{k} kept layers {idx}")
    plc = out.get("per_layer_config")
    if new_n < n and isinstance(plc, dict) and all(str(k).isdigit() for k in plc):
        out["per_layer_config"] = {str(j).zfill(len(str(k))): plc[k] for k in plc for j, i in enumerate(idx)
                                   if int(k) == i}
        cut.append("per_layer_config re-keyed")
    return out, cut


def shrunk_config(model_type: str, per_kind: int = 1) -> tuple[dict, str]:
    """The default config with its layer count cut to LAYERS (plus the first `per_kind` layers of each kind), and
    a note of what was cut.

    A composite config (vision-language, audio-language: no num_hidden_layers of its own) has its language
    model's `text_config` cut; its towers stay whole. Raises ValueError where no layer count can be found."""
    import transformers
    obj = transformers.AutoConfig.for_model(model_type)
    n = getattr(obj, "num_hidden_layers", None)
    if isinstance(n, int) and n >= 1:
        cfg, cut = _cut_layers(obj, obj.to_dict(), per_kind)
    else:
        sub = getattr(obj, "text_config", None)
        sn = getattr(sub, "num_hidden_layers", None)
        if not isinstance(sn, int) or sn < 1:
            raise ValueError("no num_hidden_layers on the config: layer count not shrunk")
        text, cut = _cut_layers(sub, sub.to_dict(), per_kind)
        cut = [f"text_config {c}" for c in cut]
        cfg = obj.to_dict()
        cfg["text_config"] = text
    cfg["model_type"] = model_type
    return cfg, ", ".join(cut)


def _max_positions(cfg: dict) -> int | None:
    for c in (cfg, cfg.get("text_config") or {}):
        for k in ("max_position_embeddings", "n_positions", "max_target_positions"):
            if isinstance(c.get(k), int):
                return c[k]
    return None


def _scenarios(model_dir: str, max_positions: int | None = None,
               encoder_positions: int | None = None) -> tuple[dict, dict]:
    # the tokens must fit a learned position table (Blenderbot's holds 128, CTRL's 256, BERT-style 512): RoBERTa-style
    # embeddings number positions from padding_idx + 1 = 2 (create_position_ids_from_input_ids, modeling_xmod.py and
    # modeling_roberta.py, transformers 5.25), so a table of N holds N - 2 tokens: training's sequence, or the
    # prompt plus the output token
    fits = isinstance(max_positions, int) and max_positions > 3
    prompt = min(512, max_positions - 3) if fits else 512
    seq = min(512, max_positions - 2) if fits else 512
    hw = {"gpu": "h100-sxm", "count": 1}
    # the fake-tensor trace runs on CPU, where transformers takes its torch path for state-space mixers
    # (mamba_ssm's CUDA kernels cannot load): both scenarios say so (ssm_kernels false), as tests/test_ssm.py does
    train = {"model": model_dir, "task": "finetune", "hardware": hw,
             "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                       "seq_len": seq, "micro_batch": 1, "global_batch": 1, "recompute": "none",
                       "ssm_kernels": False}}
    infer = {"model": model_dir, "task": "infer", "hardware": hw,
             "infer": {"engine": "hf", "prompt_len": prompt, "output_len": 1, "concurrency": 1, "ssm_kernels": False}}
    if isinstance(encoder_positions, int):
        # a speech encoder (Whisper) runs its fixed frame count; the text (decoder) gets the sequence above
        train["train"].update(seq_len=encoder_positions, target_len=seq)
        infer["infer"]["prompt_len"] = encoder_positions
    return train, infer


def _first_line(err: BaseException) -> str:
    text = getattr(err, "why", None) or str(err)
    return f"{type(err).__name__}: {text}".splitlines()[0][:140]


# Trace failures explained, matched on the exception text: transformers' own (from its 5.25 code or a run on real
# tensors), fake tensors' limit, or a kind of input the harness does not build. The row stays failed, with why.
_NOT_OURS = (
    ("shared_kv_states cannot be None",
     "a draft (assistant) model: its forward takes the target model's hidden states and KV cache "
     "(shared_kv_states), so it does not run alone"),
    ("KeyError: 'sdpa'",
     "the model keeps attention classes of its own, eager and flash-attention only (GPT-Neo's "
     "GPT_NEO_ATTENTION_CLASSES): flash-attention cannot run on CPU and the harness's SDPA stand-in reaches only "
     "models on transformers' shared attention interface (the harness's limit)"),
    ("for this kind of AutoModel: AutoModelForSeq2SeqLM",
     "a speech encoder-decoder whose front end gpuplan does not read (not Whisper's Conv1d layers over log-mel "
     "frames, traits.speech_frames): the harness feeds it token ids through AutoModelForSeq2SeqLM"),
    ("can only be called on Attention layers",
     "transformers cannot run inference of this default config: every layer is a Mamba layer (no attention "
     "layer), yet its causal-mask builder asks the cache for attention sizes (cache_utils get_mask_sizes); "
     "HF generate with its default DynamicCache fails the same way on real CPU tensors (only "
     "use_cache=False, re-running the sequence each step, runs)"),
    ("expected scalar type",
     "transformers' XLNet creates its attention weights as torch.FloatTensor (fp32 whatever dtype is asked, "
     "modeling_xlnet.py XLNetRelativeAttention.__init__) and from_pretrained keeps an instantiated parameter's dtype "
     "(core_model_loading.py: a loaded tensor is cast to empty_param.dtype), so in pure bf16 its einsums mix fp32 "
     "weights with bf16 activations and fail, on real tensors too"),
    ("Expected input batch_size",
     "GIT's loss drops image_patch_tokens logit positions whatever the input (modeling_git.py), so text-only "
     "training fails in transformers itself"),
    ("a value computed from the weights picks a shape",
     "a shape depends on values the weights compute (JetMoE's per-expert split sizes come from the router's top-k), "
     "which neither fake tensors nor the inputs the harness chose can answer"),
    ("DataDependentOutputException",
     "the model reads tensor values to pick shapes, which fake tensors cannot answer"),
    ("DynamicOutputShapeException",
     "the model's shapes depend on tensor values, which fake tensors cannot run"),
)


def _not_ours(text: str) -> str | None:
    return next((why for key, why in _NOT_OURS if key in text), None)


class _RowTimeout(Exception):
    pass


# A build that fails because a weight tie across layers of one kind finds no second layer to tie (Zamba shares one
# transformer block among its hybrid layers: `_tied_weights_keys` names every hybrid layer after the first,
# modeling_zamba.py ZambaModel.__init__): the row is cut again keeping two layers of each kind.
_NEEDS_TWO_OF_A_KIND = "tie_weights_keys"


def trace_row(model_type: str, per_kind: int = 1) -> dict:
    """train_err / infer_err (estimate / trace - 1) for the 2-layer default config, or the reason there is none."""
    import json
    import signal
    import tempfile
    from gpuplan.api import estimate
    from gpuplan.trace import trace

    out: dict = {}
    try:
        cfg, cut = shrunk_config(model_type, per_kind)
    except Exception as err:
        return dict(trace_note=_first_line(err))
    out["trace_note"] = cut

    def alarm(signum, frame):
        raise _RowTimeout(f"skipped: over {ROW_SECONDS} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(ROW_SECONDS)
    try:
        with tempfile.TemporaryDirectory() as d:
            Path(d, "config.json").write_text(json.dumps(cfg))
            train, infer = _scenarios(d, _max_positions(cfg),
                                      cfg.get("max_source_positions") if cfg.get("num_mel_bins") else None)
            for key, sc in (("train", train), ("infer", infer)):
                try:
                    t = trace(sc, decode_steps=1) if key == "infer" else trace(sc)
                    e = estimate(sc)
                    # the trace allocates no CUDA context / allocator reserve: compare without them
                    est = e.memory.peak_bytes_per_gpu - e.memory.components.get("runtime_overhead", 0)
                    out[f"{key}_err"] = est / (t.peak_bytes - t.components.get("runtime_overhead", 0)) - 1
                    if key == "train":
                        ta, ea = t.components.get("activations", 0), e.memory.components.get("activations", 0)
                        # activations compare only at the same phase's peak (at an optimizer-step or tied-sum
                        # peak one side holds almost none: the ratio would mean nothing)
                        same = getattr(t, "phase", None) == e.memory.phase
                        out["act_err"] = ea / ta - 1 if ta >= 2 ** 20 and ea and same else None
                except _RowTimeout:
                    raise
                except Exception as err:
                    out[f"{key}_fail"] = _first_line(err)
                    why = _not_ours(str(getattr(err, "why", None) or err))
                    if why and why not in out["trace_note"]:
                        out["trace_note"] = (out["trace_note"] + "; " if out["trace_note"] else "") + f"{key}: {why}"
    except _RowTimeout as err:
        out["trace_note"] = (out["trace_note"] + "; " if out["trace_note"] else "") + str(err)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if per_kind == 1 and all(_NEEDS_TWO_OF_A_KIND in out.get(f"{k}_fail", "") for k in ("train", "infer")):
        return trace_row(model_type, per_kind=2)
    return out


def _pct(r: dict, key: str) -> str:
    if f"{key}_err" in r and r[f"{key}_err"] is not None:
        return f"{100 * r[f'{key}_err']:+.1f} %"
    return str(r.get(f"{key}_fail", "")).replace("|", "/")


def _within(r: dict, key: str) -> bool:
    return r.get(f"{key}_err") is not None and abs(r[f"{key}_err"]) <= TOL


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Without OUT.md the table goes to docs/generic-architectures.md.")
    ap.add_argument("out", nargs="?", default="docs/generic-architectures.md", help="the Markdown file to write")
    ap.add_argument("--limit", type=int, default=None, help="only the first N model types")
    ap.add_argument("--only", default=None, help="comma-separated model types (e.g. bloom,gemma2)")
    ap.add_argument("--trace", action="store_true", help="also check each exact row against a fake-tensor trace")
    a = ap.parse_args()
    if not a.out.endswith(".md"):
        ap.error(f"OUT '{a.out}' must be a .md file")
    out, do_trace = Path(a.out), a.trace
    types = causal_lm_types()
    if a.only:
        only = set(a.only.split(","))
        unknown = sorted(only - set(types))
        if unknown:
            ap.error(f"--only: {', '.join(unknown)} not among transformers' causal-LM model types")
        types = [t for t in types if t in only]
    types = types[:a.limit]
    rows = []
    for i, mt in enumerate(types):
        t0 = time.time()
        r = check(mt)
        r["seconds"] = time.time() - t0
        rows.append(r)
        print(f"[{i + 1}/{len(types)}] {mt:28s} {r['status']:11s} {r.get('reason', '')}", flush=True)
        if do_trace and r["status"] == "exact":
            t0 = time.time()
            r.update(trace_row(mt))
            r["trace_seconds"] = time.time() - t0
            print(f"    trace {r['trace_seconds']:5.1f} s  train {_pct(r, 'train')}  act {_pct(r, 'act')}  "
                  f"infer {_pct(r, 'infer')}  {r.get('trace_note', '')}", flush=True)
        write_table(out, rows, do_trace, len(types))
    built = [r for r in rows if r["status"] != "unbuildable"]
    exact = [r for r in built if r["status"] == "exact"]
    print(f"{len(exact)}/{len(built)} exact; wrote {out}")


def write_table(out: Path, rows: list[dict], do_trace: bool, total: int) -> None:
    """Rewritten after every row, so an interrupted run leaves the rows that finished."""
    import transformers
    built = [r for r in rows if r["status"] != "unbuildable"]
    exact = [r for r in built if r["status"] == "exact"]
    lines = [
        "# Architectures transformers builds, and what `gpuplan model` gives for them",
        "",
        f"Generated by `scripts/generic_arch_table.py` with transformers {transformers.__version__}: every model_type "
        "in `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, its config class's default config, gpuplan's count (hand-written "
        "family, or the generic meta-device reader of `models/generic.py`) against `from_config` on the meta device.",
        "",
        f"**{len(exact)} of {len(built)} buildable architectures give the exact count "
        f"({100 * len(exact) / max(len(built), 1):.1f} %)**; {len(rows) - len(built)} could not be built from a "
        "default config (their config classes need arguments or files). `refused` rows name the reason "
        "(no attention heads: recurrent models; a parameter whose role gpuplan will not guess; a default config "
        "without a field the estimate needs). Encoder-decoders (BART, Whisper ...) are built with "
        "AutoModelForSeq2SeqLM / AutoModelForSpeechSeq2Seq and counted whole. See docs/generic-coverage.md for "
        "what each newly read kind of model gets beyond its count.",
        "",
    ]
    if do_trace:
        traced = [r for r in exact if "train_err" in r or "train_fail" in r or "infer_err" in r
                  or "infer_fail" in r]
        n_tr = sum(_within(r, "train") for r in exact)
        n_in = sum(_within(r, "infer") for r in exact)
        n_both = sum(_within(r, "train") and _within(r, "infer") for r in exact)
        lines += [
            f"**Trace check: {n_both} of {len(exact)} exact rows within 5 % for both** (training peak "
            f"{n_tr}, inference peak {n_in}; {len(traced)} rows traced, the rest could not be shrunk or "
            "were skipped, see the note). Each exact row's default config is cut to "
            f"{LAYERS} layers plus the first layer of every kind a per-layer list names (each such list, and a "
            "`per_layer_config` keyed by layer, cut with it; period/offset hybrids such as Jamba keep the leading "
            "layers up to each kind's first, as does a shorter cycle of layer kinds such as RecurrentGemma's "
            "block_types; a shared tail such as Gemma 3n's num_kv_shared_layers keeps its last layer, the count set "
            "to 1; sections whose counts must add up to the stack, such as Dory's "
            "input/recurrent/output layers, keep each section's first layer; a model that ties a block across "
            "layers of one kind, such as Zamba's shared transformer, is cut again keeping two of each kind; "
            "a composite vision/audio-language config has its `text_config` cut "
            "and its towers kept whole) and `gpuplan.api.estimate` is compared with "
            "`gpuplan.trace.trace` (fake tensors): training = full bf16 fine-tuning, AdamW without master "
            "weights, seq 512 x 1 (a learned position table's length less 2 where shorter: RoBERTa-style "
            "positions start at 2), no recompute (total peak; activations alongside); inference = engine hf, "
            "prompt 512 (509 where a learned position table holds 512: prompt and output token fit the table "
            "less 2), one decode step (peak). For a fair "
            "comparison both scenarios set `ssm_kernels: false`: the trace runs on CPU, where transformers takes "
            "its torch path for Mamba mixers (mamba_ssm's CUDA kernels cannot load); linear-attention layers "
            "(Kimi/KDA, gated delta rules) likewise run transformers' torch fallback in the trace; the estimate "
            "models KDA's (its per-channel chunk decay), not the gated delta rules'. A model that cannot take the trace's StaticCache (BERT-style decoders) is "
            "traced with the DynamicCache HF generate uses by default; as under HF generate, a model with no SDPA or "
            "flash-attention path runs eager, a model with a cache class of its own (MiniMax) builds it, a model "
            "with none (OpenAI GPT) re-runs the sequence each step, and each decode step takes what the model's "
            "prepare_inputs_for_generation keeps (CPM-Ant: the whole sequence); at inference a fake tensor answers "
            "`is_cuda` as the GPU tensor it stands for (Ergo's CUDA-only fp32-output lm_head GEMM). A model that "
            "reads tensor values to "
            "pick shapes (XLM, X-MOD, Kolibri) is traced on fake tensors that carry the values fixed before the run "
            "(the harness's seeded token ids, constants the code builds; trace/_known.py). A trace note after "
            "`train:` / `infer:` says why a failed trace is transformers' own, fake tensors' limit (a shape picked "
            "from values the weights compute) or the harness's. Both peaks leave out runtime_overhead (CUDA "
            "context, allocator reserve), which a fake-tensor trace does not allocate; a blank activations cell "
            "means the two peaks fall in different phases, or the traced peak holds under 1 MiB of activations (an "
            "optimizer-step or tied-gradient-sum peak): no meaningful ratio. Errors are estimate / trace - 1; a cell with text is the "
            f"first line of the exception. Rows bounded to {ROW_SECONDS} s.",
            "",
            "| model_type | status | family | parameters (meta) | note | train peak | train act | infer peak "
            "| trace note |",
            "|---|---|---|---:|---|---:|---:|---:|---|",
        ]
    else:
        lines += ["| model_type | status | family | parameters (meta) | note |", "|---|---|---|---:|---|"]
    for r in rows:
        meta = f"{r['meta']:,}" if "meta" in r else ""
        note = str(r.get("reason", "")).replace("|", "/").replace("\n", " ")
        line = f"| {r['model_type']} | {r['status']} | {r.get('family', '')} | {meta} | {note} |"
        if do_trace:
            tn = str(r.get("trace_note", "")).replace("|", "/")
            line += f" {_pct(r, 'train')} | {_pct(r, 'act')} | {_pct(r, 'infer')} | {tn} |"
        lines.append(line)
    if len(rows) < total:
        lines.insert(2, f"**Partial run: {len(rows)} of {total} model types done.**\n")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

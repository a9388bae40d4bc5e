"""`gpuplan models | model | gpus | gpu | schema`: what the catalogs hold."""
from __future__ import annotations

import argparse

from ..cliargs import MAX_TOKENS_IN_SEQ, print_result, whole_number
from ..term import emit


def add_parsers(sub) -> None:
    s = sub.add_parser("models", help="list bundled models")
    s.add_argument("search", nargs="?", help="part of a registry name or HF id to filter by (default: all)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("model", help="parameters, KV cache and FLOPs of one model")
    s.add_argument("name", help="registry name, HF repo id, or path to config.json")
    s.add_argument("--seq-len", type=whole_number("--seq-len", 1, MAX_TOKENS_IN_SEQ), default=2048,
                   help="context for the FLOPs figure")
    s.add_argument("--meta", action="store_true", help="also count on the meta device (needs the trace extra: pip install '.[trace]' in the checkout)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_model)

    s = sub.add_parser("gpus", help="list accelerators in the catalog")
    s.add_argument("filter", nargs="?", help="part of an id, name, vendor, family or segment (e.g. consumer) to filter by (default: all)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_gpus)

    s = sub.add_parser("gpu", help="one accelerator's facts")
    s.add_argument("id", help="catalog id or alias, e.g. h100-sxm, rtx-4090 (list: `gpuplan gpus`)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_gpu)

    s = sub.add_parser("schema", help="JSON schema of the scenario file (or of --json output)")
    s.add_argument("--envelope", action="store_true",
                   help="print instead the JSON Schema of every command's --json output")
    s.add_argument("--json", action="store_true", help="wrap the schema in the JSON envelope")
    s.set_defaults(func=cmd_schema)


def cmd_models(args: argparse.Namespace) -> int:
    from ..models import list_models
    from ..models.registry import listing
    from ..report import table
    from ..units import fmt_count
    rows_ = [listing(e) for e in list_models(args.search)]
    if args.json:
        out = [{"name": r.entry.name, "hf_id": r.entry.hf_id, "aliases": list(r.entry.aliases),
                "model_type": r.model_type, "params_total": r.params_total, "params_active": r.params_active,
                "source": r.entry.source} for r in rows_]
        print_result("models", {"models": out})
        return 0
    rows = []
    for r in rows_:
        active = fmt_count(r.params_active) if r.params_active != r.params_total else ""
        rows.append((r.entry.name, r.entry.hf_id, r.model_type, fmt_count(r.params_total), active,
                     f"{r.max_position:,}" if r.max_position else "-"))
    emit(table(rows, ["name", "hf id", "type", "params", "active", "context"], "lllrrr"))
    emit(f"\n{len(rows)} models. Also accepted: any HF repo id (online) or a path to a config.json.", info=True)
    if not rows and args.search:
        _nothing_matches(args.search, [e.name for e in list_models(None)] + [e.hf_id for e in list_models(None)])
    return 0


def _nothing_matches(needle: str, names: list[str]) -> None:
    """An empty listing: the names that look like the filter (a missing hyphen or dot is the usual cause)."""
    from ..errors import close_matches
    squeezed = needle.lower().replace("-", "").replace(".", "").replace("_", "")
    near = [n for n in names if squeezed and squeezed in n.lower().replace("-", "").replace(".", "").replace("_", "")]
    near = list(dict.fromkeys(near + close_matches(needle, names, n=5)))[:8]
    emit(f"nothing matches '{needle}'" + (f"; close matches: {', '.join(near)}" if near else "")
         + " (the filter is a plain substring of the name).")


MAX_CELL = 96


def _short(value) -> str:
    """A table cell: nested values (traits, inferred fields) cut to one readable line; --json has them whole."""
    text = str(value)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 20] + f"… (+{len(text) - MAX_CELL + 20} chars; --json)"


def cmd_model(args: argparse.Namespace) -> int:
    from ..errors import UnsupportedError
    from ..models import get_model
    from ..report import table
    from ..units import fmt_bytes, fmt_count
    if str(args.name).lower().endswith(".gguf"):
        return _gguf_model(args)
    try:
        m = get_model(args.name)
    except UnsupportedError:
        if args.meta:                   # an architecture gpuplan's formulas do not know: transformers counts it
            return _meta_only(args)
        raise
    d = m.to_dict(args.seq_len)
    if args.meta:
        from ..models.meta import meta_param_count
        d["meta_device"] = meta_param_count(m.config)
    if args.json:
        print_result("model", d)
        return 0
    rows = [(k, f"{v:,} ({fmt_count(v)})" if k.startswith("params") and v else
             f"{v:.4g}" if k.startswith("flops_per") else _short(v)) for k, v in d.items()]
    emit(table(rows, ["field", "value"], "ll"))
    emit(f"\nKV cache: {d['kv_cache_bytes_per_token']:,} bytes/token at 16-bit "
          f"({fmt_bytes(d['kv_cache_bytes_per_token'] * 8192)} per 8k-token sequence).")
    return 0


def _gguf_model(args: argparse.Namespace) -> int:
    """`gpuplan model FILE.gguf`: what the file stores, tensor type by tensor type, from its header."""
    from ..models.gguf import read_gguf
    from ..report import table
    from ..units import fmt_bytes, fmt_count
    from ..errors import GpuplanError
    from ..models.gguf import spec_from_gguf
    info = read_gguf(args.name)
    d = info.to_dict()
    try:
        spec, why_not = spec_from_gguf(info), None
    except GpuplanError as err:      # the stored bytes are reported whatever the architecture
        spec, why_not = None, err.why
    arch = None
    if spec is not None:
        arch = {**spec.to_dict(), "source": "GGUF metadata ({arch}.block_count, embedding_length, attention.* ...)",
                "params_match_file": spec.params_total == info.weight_parameters}
    if args.json:
        print_result("model", {"name": str(args.name), "checkpoint": d, "modelled": spec is not None,
                               **({"model": arch} if arch else {"not_modelled": why_not})})
        return 0
    rows = [(t, f"{info.elements_by_type[t]:,}", fmt_bytes(b), f"{8 * b / info.elements_by_type[t]:.3g}")
            for t, b in sorted(info.bytes_by_type.items(), key=lambda kv: -kv[1])]
    emit(f"{args.name}: GGUF v{info.version}, architecture {d['architecture'] or '?'}"
         + (f" ({d['name']})" if d["name"] else "") + f", {info.tensors} tensors, "
         f"{info.parameters:,} parameters ({fmt_count(info.parameters)}), {fmt_bytes(info.tensor_bytes)} of tensor "
         f"data in a {fmt_bytes(info.file_bytes)} file")
    emit(table(rows, ["ggml type", "elements", "bytes", "bits/element"], "lrrr"))
    if arch is not None:
        match = "equal to" if arch["params_match_file"] else "NOT equal to"
        emit(f"\nArchitecture from the GGUF metadata: {spec.model_type}, {spec.num_layers} layers, hidden "
             f"{spec.hidden_size}, {spec.num_heads} heads ({spec.num_kv_heads} KV), vocabulary {spec.vocab_size:,}: "
             f"{spec.params_total:,} parameters, {match} the file's {info.weight_parameters:,} weight elements.")
    else:
        emit(f"\nArchitecture not read: {why_not}")
    emit("\nWeights as stored (read from the header; no tensor data loaded). For llama.cpp serving estimates name "
          "the model and its format: --model NAME --engine llama.cpp --weights gguf-q4_k_m.")
    return 0


def _meta_only(args: argparse.Namespace) -> int:
    """`gpuplan model CONFIG --meta` for an architecture outside gpuplan's families: the exact parameter count
    from transformers on the meta device, and nothing else (no KV-cache or FLOPs formulas for it)."""
    from pathlib import Path

    from ..errors import InputError
    from ..inputs import read_mapping_file
    from ..models.meta import meta_param_count
    path = Path(args.name)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(f"model '{args.name}'", "--meta for an architecture gpuplan does not model needs the "
                         "config.json file itself.", "pass the path to its config.json (download it from the Hub).")
    counts = meta_param_count(read_mapping_file(path, "model config"))
    if args.json:
        print_result("model", {"name": str(args.name), "meta_device": counts, "modelled": False})
        return 0
    emit(f"{args.name}: {counts['parameters']:,} parameters on the meta device (transformers). gpuplan does not "
          "model this architecture, so it has no memory, KV-cache or FLOPs estimate for it.")
    return 0


def _scaled(value: float | None, unit: float, fmt: str) -> str:
    """A catalog figure in `unit`s, '-' where the catalog has none (TPU and Apple rows lack some)."""
    return "-" if value is None else format(value / unit, fmt)


def gpu_rows(gpus) -> list[tuple]:
    rows = []
    for g in gpus:
        bf16 = g.peak_flops_per_s.get("bf16")
        train = g.peak_flops_per_s.get("fp16_fp32acc", bf16)
        rows.append((g.id, g.name, _scaled(g.usable_memory_bytes, 2**30, ".1f"),
                     _scaled(g.mem_bandwidth_bytes_per_s, 1e12, ".2f"), _scaled(bf16 or None, 1e12, ".0f"),
                     _scaled(train or None, 1e12, ".0f"), g.scale_up or "-", _scaled(g.tdp_w, 1, ".0f")))
    return rows


def cmd_gpus(args: argparse.Namespace) -> int:
    from ..hardware import list_gpus
    from ..report import table
    gpus = list_gpus(args.filter)
    if args.json:
        print_result("gpus", {"gpus": [g.to_dict() for g in gpus]})
        return 0
    rows = gpu_rows(gpus)
    emit(table(rows, ["id", "name", "usable GiB", "TB/s", "bf16 TF", "train TF", "scale-up", "TDP W"], "llrrrrlr"))
    emit(f"\n{len(rows)} accelerators. Dense peak rates; 'train TF' is the 16-bit rate with fp32 accumulate.",
         info=True)
    if not rows and args.filter:
        _nothing_matches(args.filter, [g.id for g in list_gpus(None)])
    return 0


def cmd_gpu(args: argparse.Namespace) -> int:
    from ..hardware import get_gpu
    from ..report import table
    d = get_gpu(args.id).to_dict()
    if args.json:
        print_result("gpu", d)
        return 0
    emit(table([(k, v) for k, v in d.items()], ["field", "value"], "ll"))
    # the nominal size can read below the usable one (a vendor's "80 GB" is 80 GiB of HBM): say which one plans use
    emit(f"memory_bytes is the vendor's nominal \"{d['memory_gb']:g} GB\" read as {d['memory_gb']:g} x 10^9 bytes; every "
         f"plan uses usable_memory_bytes ({d['usable_memory_gib']:g} GiB: {d['usable_memory_basis'] or 'catalog'}).")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from ..report import dumps
    if args.envelope:
        schema = envelope_schema()
    else:
        from ..scenario import Scenario
        schema = Scenario.model_json_schema()
    if args.json:
        print_result("schema", schema)
    else:
        print(dumps(schema))
    return 0


def envelope_schema() -> dict:
    """The JSON Schema of `--json` output (envelope.schema.json beside this module)."""
    import json
    from importlib.resources import files
    return json.loads(files(__package__).joinpath("envelope.schema.json").read_text(encoding="utf-8"))

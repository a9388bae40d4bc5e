"""Resolve a model name, HF repo id, config path or dict to a ModelSpec.

Order: dict -> existing path -> bundled registry (short name, alias or HF id, case-insensitive)
-> Hugging Face Hub (`org/name`, needs huggingface_hub and network; cached) -> clear error.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..errors import CatalogHint, InputError, UnknownNameError, close_matches
from . import hub
from .checkpoint import read_checkpoint
from .spec import ModelSpec, spec_from_config


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    hf_id: str
    config_file: str
    source: str
    completeness: str
    notes: str
    aliases: tuple[str, ...] = ()


def _package_dir():
    return resources.files("gpuplan.models")


@cache
def registry() -> tuple[RegistryEntry, ...]:
    text = (_package_dir() / "registry.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    names = {r["name"] for r in rows}
    entries = []
    for r in rows:
        n = r["name"]
        alias = {n.removesuffix(s) for s in ("-hf", "-instruct", "-it", "-pt", "-base-2407", "-v0.1", "-4k-instruct") if n.endswith(s)}
        alias = tuple(a for a in alias if a not in names)
        entries.append(RegistryEntry(n, r["hf_id"], r["config"], r["source"], r["completeness"], r["notes"], alias))
    # an alias shared by two entries is dropped (e.g. base and -instruct both present)
    seen: dict[str, int] = {}
    for e in entries:
        for a in e.aliases:
            seen[a] = seen.get(a, 0) + 1
    return tuple(RegistryEntry(**{**e.__dict__, "aliases": tuple(a for a in e.aliases if seen[a] == 1)})
                 for e in entries)


@cache
def _index() -> dict[str, RegistryEntry]:
    idx: dict[str, RegistryEntry] = {}
    for e in registry():
        for key in (e.name, e.hf_id, *e.aliases):
            idx.setdefault(key.lower(), e)
    return idx


def registry_config(entry: RegistryEntry) -> dict[str, Any]:
    return json.loads((_package_dir() / "configs" / entry.config_file).read_text(encoding="utf-8"))


def list_models(search: str | None = None) -> list[RegistryEntry]:
    entries = registry()
    if search:
        s = search.lower()
        entries = tuple(e for e in entries if s in e.name or s in e.hf_id.lower())
    return list(entries)


@dataclass(frozen=True)
class Listing:
    """One row of `gpuplan models`: a bundled model's size without building what is slow to build."""
    entry: RegistryEntry
    model_type: str
    params_total: int
    params_active: int
    max_position: int | None


@cache
def _meta_counts() -> dict[str, dict[str, str]]:
    """Counts of the bundled models only the meta-device reader knows (meta_counts.csv, written by
    scripts/registry_meta_counts.py): building them imports transformers and takes seconds each, and a core
    install cannot build them at all."""
    text = (_package_dir() / "meta_counts.csv").read_text(encoding="utf-8")
    return {r["name"]: r for r in csv.DictReader(text.splitlines())}


def listing(entry: RegistryEntry) -> Listing:
    row = _meta_counts().get(entry.name)
    if row is not None:
        return Listing(entry, row["model_type"], int(row["params_total"]), int(row["params_active"]),
                       int(row["max_position"]) if row["max_position"] else None)
    m = get_model(entry.name)
    return Listing(entry, m.model_type, m.params_total, m.params_active, m.max_position)


def _load_config_file(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise InputError(f"model directory '{path.parent}'", "has no config.json.",
                             "point at the folder holding config.json, or at the file itself.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(f"model config '{path}'", f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).",
                         "fix the file, or download config.json again.") from None
    except OSError as err:
        raise InputError(f"model config '{path}'", f"cannot be read ({err.strerror}).", "check the path and permissions.") from None
    if not isinstance(data, dict):
        raise InputError(f"model config '{path}'", "is not a JSON object.", "use a HF config.json.")
    return data


def _from_hub(repo_id: str) -> dict[str, Any]:
    """config.json of a Hub repo: from huggingface_hub's cache when offline, else fetched (see hub.py)."""
    matches = close_matches(repo_id, _index())
    cached = hub.cached_config(repo_id)
    if hub.offline():
        if cached is not None:
            return _load_config_file(cached)
        raise UnknownNameError(f"model '{repo_id}'", "is not in the bundled registry or the Hugging Face cache, and "
                               "hub look-ups are off (HF_HUB_OFFLINE or GPUPLAN_OFFLINE is set: offline).",
                               "pass the path of its config.json, or unset HF_HUB_OFFLINE/GPUPLAN_OFFLINE when online.",
                               matches)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise UnknownNameError(f"model '{repo_id}'", "is not in the bundled registry, and huggingface_hub is not installed to fetch it.",
                               "pip install huggingface_hub, or pass the path of its config.json.", matches) from None
    url = hub.endpoint()
    unreachable = hub.probe(hub.probe_target(url))
    if unreachable is not None:
        if cached is not None:
            return _load_config_file(cached)
        raise UnknownNameError(f"model '{repo_id}'", f"could not be fetched: the Hugging Face Hub at {url} cannot be "
                               f"reached ({unreachable}) and no cached copy exists.",
                               "check your network or proxy, set HF_HUB_OFFLINE=1 to skip the Hub, "
                               "or pass the path of its config.json.", matches)
    try:
        path = hf_hub_download(repo_id, "config.json", endpoint=url)
    except Exception as err:  # 404, gated repo, a network that fails after the probe
        gated = "Gated" in type(err).__name__ or "401" in str(err) or "403" in str(err)
        why = ("is a gated repository: its files need an access token." if gated else
               f"could not be fetched from the Hugging Face Hub ({type(err).__name__}).")
        raise UnknownNameError(f"model '{repo_id}'", why,
                               "check the repo id and your network (gated repos need `hf auth login` or HF_TOKEN), "
                               "or pass the path of its config.json.", matches) from None
    return _load_config_file(Path(path))


def get_model(model: str | Mapping[str, Any] | ModelSpec, *, allow_hub: bool = True) -> ModelSpec:
    """A ModelSpec for a registry name, HF id, path to config.json (or its folder), or config dict."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Mapping):
        return spec_from_config(model, name=str(model.get("_name_or_path") or model.get("model_type")))
    if not isinstance(model, str) or not model.strip():
        raise InputError("model", f"must be a name, HF repo id, path or config dict, got {model!r}.",
                         see=CatalogHint("models", "the bundled models"))
    key = model.strip()
    entry = _index().get(key.lower())
    if entry is not None:
        return spec_from_config(registry_config(entry), name=entry.name, hf_id=entry.hf_id)
    path = Path(key).expanduser()
    if path.exists():
        config = _load_config_file(path)
        spec = spec_from_config(config, name=path.stem if path.is_file() else path.name, where=f"'{path}'")
        folder = path if path.is_dir() else path.parent if path.name == "config.json" else None
        ckpt = read_checkpoint(folder, config) if folder is not None else None
        return dataclasses.replace(spec, checkpoint=ckpt) if ckpt is not None else spec
    if key.endswith(".json") or os.sep in key and not key.count("/") == 1:
        raise InputError(f"model config '{key}'", "does not exist.", "check the path.")
    if "/" in key and key.count("/") == 1 and allow_hub:
        return spec_from_config(_from_hub(key), name=key.split("/")[1].lower(), hf_id=key)
    raise UnknownNameError(f"model '{key}'", "is not a bundled model name, HF repo id or existing config path.",
                           "use an HF id like 'org/name', or pass a config.json path",
                           close_matches(key, [e.name for e in registry()]),
                           see=CatalogHint("models", "the bundled models"))

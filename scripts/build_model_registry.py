"""Copy the real HF config.json files from ../shared/data/model-configs into the package registry.

Run from the repo root: python scripts/build_model_registry.py [SHARED_DIR]
Writes src/gpuplan/models/configs/<org>__<name>.json and src/gpuplan/models/registry.csv.
Extra rows (base models whose config is byte-for-byte the same architecture as a shipped
instruct config, or configs written from params.csv fields) are listed in EXTRA below.
"""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

SHARED = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/model-configs")
OUT = Path("src/gpuplan/models")

# base model -> (config it shares, source note)
SAME_ARCH = {
    "meta-llama/Llama-3.2-1B": ("meta-llama/Llama-3.2-1B-Instruct", "same architecture as the Instruct config (params.csv row Llama-3.2-1B)"),
    "google/gemma-2-9b": ("google/gemma-2-9b-it", "same architecture as the -it config (params.csv row gemma-2-9b)"),
    "google/gemma-2-2b": ("google/gemma-2-2b-it", "same architecture as the -it config (params.csv row gemma-2-2b)"),
    "meta-llama/Llama-3.1-8B-Instruct": ("meta-llama/Llama-3.1-8B", "same architecture as the base config"),
    "meta-llama/Llama-3.1-70B-Instruct": ("meta-llama/Llama-3.1-70B", "same architecture as the base config"),
    "Qwen/Qwen2.5-7B-Instruct": ("Qwen/Qwen2.5-7B", "same architecture as the base config"),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistralai/Mistral-7B-v0.3", "same architecture as the base config"),
}
# Written from the HF config fields recorded in ../shared/validation/params.csv
WRITTEN = {
    "Qwen/Qwen2.5-0.5B": ({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "hidden_act": "silu", "torch_dtype": "bfloat16", "use_sliding_window": False,
        "sliding_window": 32768, "max_window_layers": 24},
        "fields from ../shared/validation/params.csv (HF config of Qwen/Qwen2.5-0.5B)"),
}


# Field corrections where the shared copy is older than the repo's current config.json
PATCHES = {
    "mistralai/Mixtral-8x22B-v0.1": ({"vocab_size": 32768},
        "vocab_size 32000 -> 32768: the repo's config was updated to the 32768-token tokenizer; 32768 "
        "reproduces the published safetensors total 140,630,071,296 exactly (params.csv)"),
}


def short_name(hf_id: str) -> str:
    name = hf_id.split("/", 1)[1].lower()
    return name.removeprefix("meta-")


def main() -> None:
    sources = {r["hf_repo"]: r for r in csv.DictReader(open(SHARED / "SOURCES.csv", encoding="utf-8"))}
    (OUT / "configs").mkdir(parents=True, exist_ok=True)
    rows = []
    for d in sorted(p for p in SHARED.iterdir() if p.is_dir()):
        hf_id = d.name.replace("__", "/", 1)
        src = sources.get(hf_id, {})
        note = src.get("notes", "")
        if hf_id in PATCHES:
            fields, why = PATCHES[hf_id]
            cfg = {**json.load(open(d / "config.json", encoding="utf-8")), **fields}
            (OUT / "configs" / f"{d.name}.json").write_text(json.dumps(cfg, indent=2) + "\n")
            note = "PATCHED: " + why
        else:
            shutil.copy(d / "config.json", OUT / "configs" / f"{d.name}.json")
        rows.append(dict(name=short_name(hf_id), hf_id=hf_id, config=f"{d.name}.json",
                         source=src.get("source", ""), completeness=src.get("completeness", ""),
                         notes=note[:300]))
    by_id = {r["hf_id"]: r for r in rows}
    for hf_id, (same, note) in SAME_ARCH.items():
        rows.append(dict(by_id[same], name=short_name(hf_id), hf_id=hf_id, notes=note))
    for hf_id, (cfg, note) in WRITTEN.items():
        fname = hf_id.replace("/", "__") + ".json"
        (OUT / "configs" / fname).write_text(json.dumps(cfg, indent=2) + "\n")
        rows.append(dict(name=short_name(hf_id), hf_id=hf_id, config=fname, source=note,
                         completeness="structural", notes=""))
    sys.path.insert(0, str(Path(__file__).parent))
    import added_model_configs  # configs added for issue 15 (their own sources)
    for r in added_model_configs.write(OUT):
        rows.append(dict(name=short_name(r["hf_id"]), **r))
    import ssm_model_configs  # state-space and hybrid configs (Mamba, Mamba-2, Jamba)
    for r in ssm_model_configs.write(OUT):
        rows.append(dict(name=short_name(r["hf_id"]), **r))
    import models_2025_configs  # popular 2025 models (their own sources; SAME_ARCH rows reuse a bundled config)
    added = models_2025_configs.write(OUT)
    added += models_2025_configs.same_arch_rows({r["hf_id"]: r for r in rows} | {r["hf_id"]: r for r in added})
    for r in added:
        rows.append(dict(name=short_name(r["hf_id"]), **{k: v for k, v in r.items() if k != "name"}))
    write_registry(rows)
    print(f"{len(rows)} registry rows")


def write_registry(rows: list[dict[str, str]], out: Path = OUT) -> None:
    """The one writer of registry.csv: rows sorted by name, LF line ends (what is committed)."""
    rows = sorted(rows, key=lambda r: r["name"])
    with open(out / "registry.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def merge_registry(new: list[dict[str, str]], out: Path = OUT) -> list[dict[str, str]]:
    """registry.csv with `new` rows (registry fields without `name`) added or replacing the rows of the same name,
    every other row kept: for a script that adds configs without the shared config dump main() copies from."""
    with open(out / "registry.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    added = {short_name(r["hf_id"]) for r in new}
    rows = [r for r in rows if r["name"] not in added]
    rows += [dict(name=short_name(r["hf_id"]), **{k: r[k] for k in fields if k != "name"}) for r in new]
    write_registry(rows, out)
    return rows


if __name__ == "__main__":
    main()

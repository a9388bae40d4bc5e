"""LLaMA-Factory's training-config keys at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv
(engine `llama-factory`).

`llamafactory-cli train config.yaml` parses the YAML with transformers' HfArgumentParser over its argument
dataclasses (src/llamafactory/hparams/parser.py: parse_dict(..., allow_extra_keys=False), so an unknown key is
an error): ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments (each a composition of
mixin dataclasses in src/llamafactory/hparams/*.py) and its TrainingArguments (transformers'
Seq2SeqTrainingArguments plus RayArguments). This script reads the fields of every dataclass in those files
(AST, no import) and writes one row per field. The transformers fields come from the `transformers` rows of
the same table. LLaMA-Factory need not be installed.

Usage: python scripts/engine_facts_llamafactory.py GIT_DIR [--tag v0.9.5]
  (GIT_DIR: a clone of https://github.com/hiyouga/LLaMA-Factory)
"""
from __future__ import annotations

import ast

from engine_facts_common import annotation_kind, pinned_checkout, today, write_rows

FILES = ("model_args.py", "data_args.py", "finetuning_args.py", "generating_args.py", "training_args.py")


def fields(source: str) -> list[dict]:
    rows = []
    for cls in (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)):
        for f in cls.body:
            if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name) and not f.target.id.startswith("_"):
                kind, choices = annotation_kind(f.annotation)
                rows.append({"flag": f.target.id, "kind": kind, "choices": ";".join(choices), "file": cls.name})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v0.9.5")
    rows = []
    for name in FILES:
        path = f"src/llamafactory/hparams/{name}"
        rows += [{"engine": "llama-factory", "version": src.version, "flag": r["flag"], "kind": r["kind"],
                  "choices": r["choices"], "source_url": src.url("hiyouga/LLaMA-Factory", path), "retrieved": today(),
                  "method": "extracted"} for r in fields(src.show(path))]
    print(write_rows("llama-factory", rows), "rows")


if __name__ == "__main__":
    main()

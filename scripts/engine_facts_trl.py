"""TRL's trainer-config fields at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv.

TRL's DPOConfig and GRPOConfig are dataclasses that subclass its BaseConfig, (`_BaseConfig`), which subclasses transformers'
TrainingArguments. This script reads the TRL-defined fields (AST of trl/trainer/{base,dpo,grpo}_config.py) and
writes one row per field as engine `trl-dpo` or `trl-grpo` (flag = the field name). The TrainingArguments
fields come from the `transformers` rows of the same table. trl need not be installed.

Usage: python scripts/engine_facts_trl.py GIT_DIR [--tag v1.9.0]
  (GIT_DIR: a clone of https://github.com/huggingface/trl)
"""
from __future__ import annotations

import ast

from engine_facts_common import annotation_kind, pinned_checkout, today, write_rows

FILES = {"trl-dpo": ("trl/trainer/dpo_config.py", "DPOConfig"), "trl-grpo": ("trl/trainer/grpo_config.py", "GRPOConfig"),
         "trl-sft": ("trl/trainer/sft_config.py", "SFTConfig")}
BASE = ("trl/trainer/base_config.py", "_BaseConfig")


def fields(source: str, cls_name: str) -> list[dict]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    rows = []
    for f in cls.body:
        if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name) and not f.target.id.startswith("_"):
            kind, choices = annotation_kind(f.annotation)
            rows.append({"flag": f.target.id, "kind": kind, "choices": ";".join(choices)})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v1.9.0")
    base = fields(src.show(BASE[0]), BASE[1])
    for engine, (path, cls) in FILES.items():
        rows = [{**r, "engine": engine, "version": src.version, "source_url": src.url("huggingface/trl", path),
                 "retrieved": today(), "method": "extracted"} for r in fields(src.show(path), cls) + base]
        print(engine, write_rows(engine, rows))


if __name__ == "__main__":
    main()

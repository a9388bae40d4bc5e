"""transformers' TrainingArguments fields from the installed package -> launch/data/engine_flags.csv.

TrainingArguments is a dataclass; HfArgumentParser turns each field into `--name`, and the Trainer
reads training_args.json with the same names. Rows: flag = the field name, kind from the type,
choices from enum or Literal types; a field whose help says "Deprecated" is kind "deprecated" so
that launch tests can refuse it (gradient_checkpointing in 5.x).

Usage: python scripts/engine_facts_transformers.py     (uses the transformers that is installed)
"""
from __future__ import annotations

import dataclasses
import enum
import typing

from engine_facts_common import today, write_rows


def kind_of(tp) -> tuple[str, list[str]]:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        kinds = [kind_of(a) for a in args]
        return next((k for k in kinds if k[0] != "str"), kinds[0])
    if typing.get_origin(tp) is typing.Literal:
        return "choice", [str(a) for a in typing.get_args(tp)]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "choice", [str(m.value) for m in tp]
    if tp in (bool, int, float, str):
        return tp.__name__, []
    if typing.get_origin(tp) in (list, dict) or tp in (list, dict):
        return "list" if typing.get_origin(tp) is list or tp is list else "dict", []
    return "str", []


def main() -> None:
    import transformers
    from transformers import TrainingArguments
    version = transformers.__version__
    hints = typing.get_type_hints(TrainingArguments)
    url = f"https://github.com/huggingface/transformers/blob/v{version}/src/transformers/training_args.py"
    rows = []
    for f in dataclasses.fields(TrainingArguments):
        if not f.init or f.name.startswith("_"):
            continue
        kind, choices = kind_of(hints.get(f.name, str))
        if "deprecated" in str(f.metadata.get("help", "")).lower():
            kind = "deprecated"
        rows.append({"engine": "transformers", "version": version, "flag": f.name, "kind": kind,
                     "choices": ";".join(choices), "source_url": url, "retrieved": today(), "method": "extracted"})
    print(f"transformers {version}: {write_rows('transformers', rows)} TrainingArguments fields")


if __name__ == "__main__":
    main()

"""Axolotl's config keys at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv (engine `axolotl`).

`axolotl train config.yml` validates the YAML with pydantic models (AxolotlInputConfig in
src/axolotl/utils/schemas/config.py, composed of mixins in src/axolotl/utils/schemas/*.py). This script reads
the annotated fields of every class in those files (AST, no import: axolotl needs a GPU stack to import) and
writes one row per field; a field declared with `Field(..., deprecated=...)` is kind `deprecated`. axolotl need
not be installed.

Usage: python scripts/engine_facts_axolotl.py GIT_DIR [--tag v0.18.0]
  (GIT_DIR: a clone of https://github.com/axolotl-ai-cloud/axolotl)
"""
from __future__ import annotations

import ast

from engine_facts_common import annotation_kind, pinned_checkout, today, write_rows

DIR = "src/axolotl/utils/schemas"


def fields(source: str) -> list[dict]:
    rows = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for f in cls.body:
            if not (isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)) or f.target.id.startswith("_"):
                continue
            kind, choices = annotation_kind(f.annotation)
            if isinstance(f.value, ast.Call) and any(k.arg == "deprecated" for k in f.value.keywords):
                kind, choices = "deprecated", []
            rows.append({"flag": f.target.id, "kind": kind, "choices": ";".join(choices)})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v0.18.0")
    rows = []
    for name in (n for n in src.ls(DIR) if n.endswith(".py")):
        path = f"{DIR}/{name}"
        rows += [{**r, "engine": "axolotl", "version": src.version, "source_url": src.url("axolotl-ai-cloud/axolotl", path),
                  "retrieved": today(), "method": "extracted"} for r in fields(src.show(path))]
    print(write_rows("axolotl", rows), "rows")


if __name__ == "__main__":
    main()

"""Unsloth's loader arguments at a pinned commit -> src/gpuplan/launch/data/engine_flags.csv (engine `unsloth`).

A generated Unsloth script calls `FastLanguageModel.from_pretrained(**kw)` (unsloth/models/loader.py, class
FastLanguageModel) and `FastLanguageModel.get_peft_model(model, **kw)` (inherited from FastLlamaModel,
unsloth/models/llama.py). This script reads the parameters of those two functions (AST, no import: Unsloth
needs a GPU to import) and writes rows `from_pretrained.<param>` and `get_peft_model.<param>`.

Usage: python scripts/engine_facts_unsloth.py GIT_DIR [--ref v0.1.801-beta]
  (GIT_DIR: a clone of https://github.com/unslothai/unsloth)
"""
from __future__ import annotations

import ast

from engine_facts_common import pinned_checkout, today, write_rows

FUNCS = (("unsloth/models/loader.py", "FastLanguageModel", "from_pretrained"),
         ("unsloth/models/llama.py", "FastLlamaModel", "get_peft_model"))


def params(source: str, cls_name: str, func: str) -> list[str]:
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == func)
    return [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg not in ("self", "cls", "model")]


def main() -> None:
    src = pinned_checkout(__doc__, "v0.1.801-beta", option="--ref")
    rows = []
    for path, cls, func in FUNCS:
        rows += [{"engine": "unsloth", "version": src.version, "flag": f"{func}.{p}", "kind": "str",
                  "source_url": src.url("unslothai/unsloth", path), "retrieved": today(), "method": "extracted"}
                 for p in params(src.show(path), cls, func)]
    print(write_rows("unsloth", rows), "rows")


if __name__ == "__main__":
    main()

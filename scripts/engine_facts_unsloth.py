"""Unsloth's loader arguments at a pinned commit -> src/gpuplan/launch/data/engine_flags.csv (engine `unsloth`).

A generated Unsloth script calls `FastLanguageModel.from_pretrained(**kw)` (unsloth/models/loader.py, class
FastLanguageModel) and `FastLanguageModel.get_peft_model(model, **kw)` (inherited from FastLlamaModel,
unsloth/models/llama.py). This script reads the parameters of those two functions (AST, no import: Unsloth
needs a GPU to import) and writes rows `from_pretrained.<param>` and `get_peft_model.<param>`.

Usage: python scripts/engine_facts_unsloth.py GIT_DIR [--ref v0.1.801-beta]
  (GIT_DIR: a clone of https://github.com/unslothai/unsloth)
"""
from __future__ import annotations

import argparse
import ast
import subprocess

from engine_facts_common import today, write_rows

FUNCS = (("unsloth/models/loader.py", "FastLanguageModel", "from_pretrained"),
         ("unsloth/models/llama.py", "FastLlamaModel", "get_peft_model"))


def params(source: str, cls_name: str, func: str) -> list[str]:
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == func)
    return [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg not in ("self", "cls", "model")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--ref", default="v0.1.801-beta")
    a = ap.parse_args()

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", a.git_dir, *args], check=True, capture_output=True, text=True).stdout
    commit = git("rev-list", "-n1", a.ref).strip()
    rows = []
    for path, cls, func in FUNCS:
        url = f"https://github.com/unslothai/unsloth/blob/{commit}/{path}"
        rows += [{"engine": "unsloth", "version": f"{a.ref} ({commit[:8]})", "flag": f"{func}.{p}", "kind": "str",
                  "source_url": url, "retrieved": today(), "method": "extracted"}
                 for p in params(git("show", f"{a.ref}:{path}"), cls, func)]
    print(write_rows("unsloth", rows), "rows")


if __name__ == "__main__":
    main()

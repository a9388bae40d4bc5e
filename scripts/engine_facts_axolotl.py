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

import argparse
import ast
import subprocess

from engine_facts_common import annotation_kind, today, write_rows

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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--tag", default="v0.18.0")
    a = ap.parse_args()

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", a.git_dir, *args], check=True, capture_output=True, text=True).stdout
    commit = git("rev-list", "-n1", a.tag).strip()
    names = [p for p in git("ls-tree", "--name-only", f"{a.tag}:{DIR}").split() if p.endswith(".py")]
    rows = []
    for name in names:
        path = f"{DIR}/{name}"
        url = f"https://github.com/axolotl-ai-cloud/axolotl/blob/{commit}/{path}"
        rows += [{**r, "engine": "axolotl", "version": f"{a.tag} ({commit[:8]})", "source_url": url,
                  "retrieved": today(), "method": "extracted"} for r in fields(git("show", f"{a.tag}:{path}"))]
    print(write_rows("axolotl", rows), "rows")


if __name__ == "__main__":
    main()

"""torchtitan's TOML keys ([section] key) at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv.

torchtitan v0.2.x loads a TOML job file whose sections are the dataclasses of
torchtitan/config/job_config.py (class JobConfig: one field per section, each a dataclass whose
fields are the keys). Later torchtitan (main, torchtitan/config/manager.py) takes a Python config
function (--module/--config) instead, so the TOML names are pinned to the last tag that read TOML.
Rows: flag = "section.key", kind from the annotation.

Usage: python scripts/engine_facts_torchtitan.py GIT_DIR [--tag v0.2.2]
  (GIT_DIR: a clone of https://github.com/pytorch/torchtitan)
"""
from __future__ import annotations

import ast

from engine_facts_common import annotation_kind, pinned_checkout, today, write_rows

PATH = "torchtitan/config/job_config.py"


def sections(tree: ast.Module) -> list[dict]:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    job = classes["JobConfig"]
    rows = []
    for node in job.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        section, cls = node.target.id, classes.get(ast.unparse(node.annotation))
        if cls is None:
            continue
        for f in cls.body:
            if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name) and not f.target.id.startswith("_"):
                kind, choices = annotation_kind(f.annotation)
                rows.append({"flag": f"{section}.{f.target.id}", "kind": kind, "choices": ";".join(choices)})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v0.2.2")
    rows = [{**r, "engine": "torchtitan", "version": src.version, "source_url": src.url("pytorch/torchtitan", PATH, at_tag=True),
             "retrieved": today(), "method": "extracted"} for r in sections(ast.parse(src.show(PATH)))]
    print(f"torchtitan {src.ref}: {write_rows('torchtitan', rows)} keys")


if __name__ == "__main__":
    main()

"""Megatron-LM's command-line flags at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv.

Reads the source from a git clone without checking it out (git show TAG:PATH):
* every literal `add_argument('--flag', ...)` in megatron/training/arguments.py, with its action,
  type and choices;
* every dataclass passed to `ArgumentGroupFactory(Class, exclude=[...])` there: Megatron turns each
  field into a flag (megatron/training/argument_utils.py): `--field-name`; a bool defaulting to
  False -> store_true, to True -> `--no-field-name` / `--disable-field-name`; a field's
  metadata {"argparse_meta": {"arg_names": [...]}} replaces the names (layernorm_epsilon ->
  --norm-epsilon). Inherited dataclass fields are included; excluded and init=False fields are not.

Usage: python scripts/engine_facts_megatron.py GIT_DIR [--tag core_v0.19.0]
  (GIT_DIR: a clone of https://github.com/NVIDIA/Megatron-LM, e.g. `git clone --bare`)
"""
from __future__ import annotations

import argparse
import ast
import subprocess

from engine_facts_common import annotation_kind, kind_of_type, literal, today, write_rows

ARGS = "megatron/training/arguments.py"
URL = "https://github.com/NVIDIA/Megatron-LM/blob/{tag}/{path}"


def show(git_dir: str, tag: str, path: str) -> str:
    return subprocess.run(["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def class_files(git_dir: str, tag: str) -> dict[str, tuple[str, ast.ClassDef]]:
    """class name -> (path, ClassDef) over every megatron/*.py file at the tag."""
    names = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "--name-only", tag, "megatron"], check=True,
                           capture_output=True, text=True).stdout.split()
    out: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in names:
        if not path.endswith(".py"):
            continue
        text = show(git_dir, tag, path)
        if "@dataclass" not in text and "dataclasses.dataclass" not in text:
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, (path, node))
    return out


def _call_name(node: ast.Call) -> str:
    return ast.unparse(node.func).split(".")[-1]


def literal_flags(tree: ast.AST) -> list[dict]:
    rows = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _call_name(node) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        names = [n for n in names if n.startswith("-")]
        if not names:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = literal(kw["action"]) if "action" in kw else None
        choices = literal(kw["choices"]) if "choices" in kw else None
        if action in ("store_true", "store_false"):
            kind = "bool"
        elif choices:
            kind = "choice"
        elif literal(kw.get("nargs", ast.Constant(None))) in ("+", "*"):
            kind = "list"
        else:
            kind = kind_of_type(kw.get("type"))
        rows.append({"flag": names[0], "aliases": ";".join(names[1:]), "kind": kind,
                     "choices": ";".join(map(str, choices)) if choices else ""})
    return rows


def _field_meta_names(value: ast.AST | None) -> tuple[list[str] | None, bool, ast.AST | None]:
    """(arg_names from argparse_meta, init, default) of a `field(...)` default, else (None, True, value)."""
    if isinstance(value, ast.Call) and _call_name(value) == "field":
        kw = {k.arg: k.value for k in value.keywords if k.arg}
        init = literal(kw["init"]) is not False if "init" in kw else True
        names = None
        meta = kw.get("metadata")
        if isinstance(meta, ast.Dict):
            for k, v in zip(meta.keys, meta.values):
                if literal(k) == "argparse_meta" and isinstance(v, ast.Dict):
                    for k2, v2 in zip(v.keys, v.values):
                        if literal(k2) == "arg_names":
                            names = literal(v2)
        return names, init, kw.get("default")
    return None, True, value


def dataclass_flags(cls: ast.ClassDef, classes: dict, exclude: set[str]) -> list[dict]:
    rows = []
    for base in cls.bases:                        # inherited fields come first, as dataclasses.fields orders them
        name = ast.unparse(base).split(".")[-1]
        if name in classes:
            rows += dataclass_flags(classes[name][1], classes, exclude)
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        attr = node.target.id
        if attr in exclude or attr.startswith("_") or "ClassVar" in ast.unparse(node.annotation):
            continue
        names, init, default = _field_meta_names(node.value)
        if not init:
            continue
        kind, choices = annotation_kind(node.annotation)
        dash = attr.replace("_", "-")
        if kind == "bool":
            default_value = literal(default) if default is not None else None
            auto = [f"--no-{dash}", f"--disable-{dash}"] if default_value is True else [f"--{dash}"]
        else:
            auto = [f"--{dash}"]
        names = names or auto
        rows.append({"flag": names[0], "aliases": ";".join(names[1:]), "kind": kind, "choices": ";".join(choices)})
    return rows


def factory_flags(tree: ast.AST, classes: dict) -> list[tuple[str, list[dict]]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "ArgumentGroupFactory" and node.args:
            name = ast.unparse(node.args[0]).split(".")[-1]
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            exclude = kw.get("exclude")
            excl = set(literal(exclude) or []) if exclude is not None else set()
            if isinstance(exclude, ast.Name):     # exclude=<a list variable assigned in the same function>
                for a in ast.walk(tree):
                    if isinstance(a, ast.Assign) and any(getattr(t, "id", None) == exclude.id for t in a.targets):
                        excl |= set(literal(a.value) or [])
            if name in classes:
                out.append((classes[name][0], dataclass_flags(classes[name][1], classes, excl)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--tag", default="core_v0.19.0")
    a = ap.parse_args()
    commit = subprocess.run(["git", "-C", a.git_dir, "rev-parse", f"{a.tag}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = ast.parse(show(a.git_dir, a.tag, ARGS))
    classes = class_files(a.git_dir, a.tag)
    version = f"{a.tag} ({commit[:8]})"
    rows = [{**r, "source_url": URL.format(tag=a.tag, path=ARGS)} for r in literal_flags(tree)]
    for path, flags in factory_flags(tree, classes):
        rows += [{**r, "source_url": URL.format(tag=a.tag, path=path)} for r in flags]
    rows = [{**r, "engine": "megatron", "version": version, "retrieved": today(), "method": "extracted"} for r in rows]
    print(f"megatron {version}: {write_rows('megatron', rows)} flags")


if __name__ == "__main__":
    main()

"""SGLang's server flags from a source checkout -> src/gpuplan/launch/data/engine_flags.csv.

Since 0.5.20 SGLang declares its server arguments as annotated fields, one class per namespace, in
python/sglang/srt/arg_groups/fields/*.py:  `name: A[type, "help"] = default` or
`name: A[type, Arg(help=..., aliases=[...], choices=..., cli_name=..., action=..., no_cli=True)]`.
The flag is cli_name or `--name-with-dashes`; choices come from Arg(choices=...) (a literal list,
or a list constant of arg_groups/choices.py) or from a Literal type; a bool is a switch. Fields
with no_cli=True and derived values are skipped.

Usage: python scripts/engine_facts_sglang.py CHECKOUT --version 0.5.23 --ref <tag or commit>
  (CHECKOUT: a clone of https://github.com/sgl-project/sglang at that ref; replaces the "read" rows)
"""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

from engine_facts_common import annotation_kind, literal, today, write_rows

FIELDS = "python/sglang/srt/arg_groups/fields"
SERVER_ARGS = "python/sglang/srt/server_args.py"      # options registered by hand, deprecated spellings among them
CHOICES = "python/sglang/srt/arg_groups/choices.py"
URL = "https://github.com/sgl-project/sglang/blob/{ref}/{path}"


def choice_constants(text: str) -> dict[str, list[str]]:
    """NAME = [..] list constants (QUANTIZATION_CHOICES, ...) of choices.py."""
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = literal(node.value)
            if isinstance(value, (list, tuple, set)):
                out[node.targets[0].id] = [str(v) for v in value]
    return out


def field_rows(text: str, constants: dict[str, list[str]]) -> list[dict]:
    rows = []
    for cls in (n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            name = node.target.id
            ann = node.annotation
            if name.startswith("_") or not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "A"):
                continue
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            kind, choices = annotation_kind(parts[0])
            arg = next((p for p in parts[1:] if isinstance(p, ast.Call) and ast.unparse(p.func) == "Arg"), None)
            kw = {k.arg: k.value for k in arg.keywords if k.arg} if arg is not None else {}
            if literal(kw.get("no_cli", ast.Constant(False))) is True:
                continue
            flag = literal(kw["cli_name"]) if "cli_name" in kw else "--" + name.replace("_", "-")
            aliases = literal(kw["aliases"]) if "aliases" in kw else []
            if "choices" in kw:
                c = kw["choices"]
                listed = literal(c)
                choices = [str(v) for v in listed] if isinstance(listed, (list, tuple)) else \
                    constants.get(ast.unparse(c), choices)
                kind = "choice" if choices else kind
            help_text = ast.unparse(parts[1]).lower() if len(parts) > 1 else ""
            if help_text[:40].count("deprecated"):          # "(Deprecated, use --x) ..." at the start of the help
                kind = "deprecated"
            rows.append({"flag": flag, "aliases": ";".join(aliases or []), "kind": kind, "choices": ";".join(choices)})
    return rows


def registered_rows(text: str) -> list[dict]:
    """Options server_args.py adds with parser.add_argument(...) itself, outside the field classes: the
    deprecated spellings (action=Deprecated...Action) and a few plain ones (--config, ...)."""
    rows = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        names = [literal(a) for a in node.args if isinstance(literal(a), str)]
        longs = [n for n in names if n.startswith("--")]
        if not longs:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = ast.unparse(kw["action"]) if "action" in kw else ""
        choices = literal(kw["choices"]) if "choices" in kw else None
        if action.startswith("Deprecated"):
            kind = "deprecated"
        elif action.strip("'\"") in ("store_true", "store_false"):
            kind = "bool"
        elif isinstance(choices, (list, tuple)):
            kind = "choice"
        else:
            kind = {"int": "int", "float": "float"}.get(ast.unparse(kw["type"]) if "type" in kw else "", "str")
        rows.append({"flag": longs[0], "aliases": ";".join(n for n in names if n != longs[0]), "kind": kind,
                     "choices": ";".join(map(str, choices)) if kind == "choice" else ""})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout")
    ap.add_argument("--version", required=True)
    ap.add_argument("--ref", required=True, help="the tag or commit the checkout is at (for the source URLs)")
    a = ap.parse_args()
    root = Path(a.checkout)
    constants = choice_constants((root / CHOICES).read_text(encoding="utf-8"))
    rows = []
    for path in sorted((root / FIELDS).glob("*.py")):
        rel = path.relative_to(root).as_posix()
        rows += [{**r, "source_url": URL.format(ref=a.ref, path=rel)} for r in
                 field_rows(path.read_text(encoding="utf-8"), constants)]
    if (root / SERVER_ARGS).exists():
        rows += [{**r, "source_url": URL.format(ref=a.ref, path=SERVER_ARGS)} for r in
                 registered_rows((root / SERVER_ARGS).read_text(encoding="utf-8"))]
    rows = [{**r, "engine": "sglang", "version": a.version, "retrieved": today(), "method": "extracted"} for r in rows]
    print(f"sglang {a.version}: {write_rows('sglang', rows)} flags")


if __name__ == "__main__":
    main()

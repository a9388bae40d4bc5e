"""mlx-lm's LoRA trainer and converter options at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv
(engines `mlx-lm` and `mlx-lm-convert`).

`mlx_lm.lora` (mlx_lm/lora.py) builds an argparse parser (`build_parser`); `-c/--config FILE` reads a YAML file
whose keys fill every argument the command line left unset, then `CONFIG_DEFAULTS` fills the rest (`main`). So a
YAML key is an argument's `dest` or a `CONFIG_DEFAULTS` key; the YAML-only keys (`lora_parameters`,
`optimizer_config`, `lr_schedule`) are dicts. `main` copies an unknown key in silently, so a misspelt key does
nothing: the table is what catches it. `mlx_lm.convert` (mlx_lm/convert.py `configure_parser`) makes the
quantized model QLoRA trains on. The parser module imports mlx at the top, which does not install off Apple
silicon, so this script reads the `add_argument` calls from the source (AST, no import): one row per argument,
flag = its first long option, aliases = its other option strings and its dest (the YAML spelling).

Usage: python scripts/engine_facts_mlxlm.py GIT_DIR [--tag v0.31.3]
  (GIT_DIR: a clone of https://github.com/ml-explore/mlx-lm)
"""
from __future__ import annotations

import ast

from engine_facts_common import kind_of_type, literal, pinned_checkout, today, write_rows


def parser_rows(source: str, function: str) -> list[dict]:
    """One row per `parser.add_argument(...)` inside `function`."""
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    consts = {t.id: literal(n.value) for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}          # choices=QUANT_RECIPES and the like
    rows = []
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        names = [literal(a) for a in call.args if isinstance(literal(a), str)]
        kw = {k.arg: k.value for k in call.keywords}
        longs = [n for n in names if n.startswith("--")]
        flag = longs[0] if longs else names[0]
        dest = literal(kw["dest"]) if "dest" in kw else flag.lstrip("-").replace("-", "_")
        action = literal(kw["action"]) if "action" in kw else None
        choices = None
        if "choices" in kw:
            node = kw["choices"]
            choices = consts.get(node.id) if isinstance(node, ast.Name) else literal(node)
        if action in ("store_true", "store_false"):
            kind = "bool"
        elif isinstance(choices, (list, tuple)):
            kind = "choice"
        else:
            kind = kind_of_type(kw.get("type"))
        aliases = [n for n in names if n != flag] + ([dest] if dest != flag else [])
        rows.append({"flag": flag, "kind": kind, "choices": ";".join(map(str, choices or [])),
                     "aliases": ";".join(aliases)})
    return rows


def config_default_rows(source: str, parser_dests: set[str]) -> list[dict]:
    """`CONFIG_DEFAULTS` keys no argument sets: YAML-only keys (their kind from the default's type)."""
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "CONFIG_DEFAULTS" for t in n.targets))
    rows = []
    for k, v in zip(node.value.keys, node.value.values):
        key = literal(k)
        if key in parser_dests:
            continue
        value = literal(v)
        kind = {dict: "dict", bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "dict")
        rows.append({"flag": key, "kind": kind, "choices": "", "aliases": ""})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v0.31.3")
    lora = src.show("mlx_lm/lora.py")
    rows = parser_rows(lora, "build_parser")
    dests = {a for r in rows for a in r["aliases"].split(";") if a and not a.startswith("-")}
    rows += config_default_rows(lora, dests | {r["flag"] for r in rows})
    url = src.url("ml-explore/mlx-lm", "mlx_lm/lora.py")
    out = [{"engine": "mlx-lm", "version": src.version, "source_url": url, "retrieved": today(),
            "method": "extracted", **r} for r in rows]
    print(write_rows("mlx-lm", out), "rows (mlx-lm)")
    conv = parser_rows(src.show("mlx_lm/convert.py"), "configure_parser")
    url = src.url("ml-explore/mlx-lm", "mlx_lm/convert.py")
    out = [{"engine": "mlx-lm-convert", "version": src.version, "source_url": url, "retrieved": today(),
            "method": "extracted", **r} for r in conv]
    print(write_rows("mlx-lm-convert", out), "rows (mlx-lm-convert)")


if __name__ == "__main__":
    main()

"""OpenRLHF's PPO/GRPO trainer options at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv (engine
`openrlhf`).

`python3 -m openrlhf.cli.train_ppo_ray` builds an argparse parser in its `__main__` block (dotted options since
v0.10: `--actor.model_name_or_path`, `--rollout.n_samples_per_prompt`, ...). This script reads every literal
`parser.add_argument(...)` of openrlhf/cli/train_ppo_ray.py (AST, no import: the module imports ray and
DeepSpeed): the option, `store_true` -> bool, `choices` -> choice, else the `type`. OpenRLHF need not be
installed.

Usage: python scripts/engine_facts_openrlhf.py GIT_DIR [--tag v0.11.0]
  (GIT_DIR: a clone of https://github.com/OpenRLHF/OpenRLHF)
"""
from __future__ import annotations

import ast

from engine_facts_common import literal, pinned_checkout, today, write_rows

PATH = "openrlhf/cli/train_ppo_ray.py"


def options(source: str) -> list[dict]:
    rows = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        kw = {k.arg: k.value for k in node.keywords}
        choices = literal(kw["choices"]) if "choices" in kw else None
        action = literal(kw["action"]) if "action" in kw else None
        if action in ("store_true", "store_false"):
            kind = "bool"
        elif choices:
            kind = "choice"
        else:
            kind = {"int": "int", "float": "float"}.get(ast.unparse(kw["type"]) if "type" in kw else "", "str")
        if "nargs" in kw:
            kind = "list"
        for name in names:
            rows.append({"flag": name, "kind": kind, "choices": ";".join(str(c) for c in choices or [])})
    return rows


def main() -> None:
    src = pinned_checkout(__doc__, "v0.11.0")
    rows = [{**r, "engine": "openrlhf", "version": src.version, "source_url": src.url("OpenRLHF/OpenRLHF", PATH),
             "retrieved": today(), "method": "extracted"} for r in options(src.show(PATH))]
    print(write_rows("openrlhf", rows), "rows")


if __name__ == "__main__":
    main()

"""verl's trainer-config keys at a pinned tag -> src/gpuplan/launch/data/engine_flags.csv (engine `verl`).

verl's PPO/GRPO trainer (`python3 -m verl.trainer.main_ppo`, Hydra config `ppo_trainer`) is configured by
`key.path=value` overrides. verl ships the fully composed config as
verl/trainer/config/_generated_ppo_trainer.yaml (written by its scripts/generate_trainer_config.sh); this script
flattens that file into one row per dotted key (kind from the default value). verl need not be installed.

Usage: python scripts/engine_facts_verl.py GIT_DIR [--tag v0.7.0]
  (GIT_DIR: a clone of https://github.com/volcengine/verl)
"""
from __future__ import annotations


import yaml

from engine_facts_common import pinned_checkout, today, write_rows

PATH = "verl/trainer/config/_generated_ppo_trainer.yaml"


def flatten(node, prefix: str = ""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, dict)):
        return "list"
    return "str"


def main() -> None:
    src = pinned_checkout(__doc__, "v0.7.0")
    url = src.url("volcengine/verl", PATH)
    rows = [{"engine": "verl", "version": src.version, "flag": key, "kind": kind(v),
             "source_url": url, "retrieved": today(), "method": "extracted"}
            for key, v in flatten(yaml.safe_load(src.show(PATH))) if key and not key.split(".")[-1].startswith("_")]
    print(write_rows("verl", rows), "rows")


if __name__ == "__main__":
    main()

"""Engine facts as data: the options each engine accepts at a pinned version.

launch/data/engine_flags.csv is written by scripts/engine_facts_*.py from the engines' own source
(Megatron-LM and torchtitan at a git tag, transformers from the installed package) or, where no
script could run, entered from the cited file (method "read") or page ("docs"). Launch tests check
every generated flag against it, and each generated file names the version it was written for.
"""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Flag:
    engine: str
    version: str
    flag: str
    kind: str                  # bool | int | float | str | choice | list | dict | plugin | deprecated
    choices: tuple[str, ...]
    aliases: tuple[str, ...]
    source_url: str
    method: str                # extracted | read | docs


def _split(text: str) -> tuple[str, ...]:
    return tuple(x for x in (text or "").split(";") if x)


@functools.cache
def all_flags() -> tuple[Flag, ...]:
    text = (resources.files("gpuplan.launch") / "data" / "engine_flags.csv").read_text(encoding="utf-8")
    return tuple(Flag(r["engine"], r["version"], r["flag"], r["kind"], _split(r["choices"]), _split(r["aliases"]),
                      r["source_url"], r["method"]) for r in csv.DictReader(text.splitlines()))


def engine_flags(engine: str) -> dict[str, Flag]:
    """flag (and each alias) -> Flag for one engine of the table ('megatron', 'vllm', 'sglang', ...)."""
    out: dict[str, Flag] = {}
    for f in all_flags():
        if f.engine == engine:
            out[f.flag] = f
            for a in f.aliases:
                out.setdefault(a, f)
    return out


def engine_version(engine: str) -> str | None:
    """The version the table holds for `engine` (one per engine), or None."""
    versions = {f.version for f in all_flags() if f.engine == engine}
    return next(iter(versions)) if len(versions) == 1 else None


# the table's engine(s) behind each launch engine's files
WRITTEN_FOR = {"torchrun": ("torchtitan",), "hf": ("transformers",), "deepspeed": ("transformers",),
               "megatron": ("megatron",), "trl": ("trl-dpo", "trl-grpo", "transformers"), "verl": ("verl",), "openrlhf": ("openrlhf",), "llama-factory": ("llama-factory", "transformers"), "axolotl": ("axolotl",), "unsloth": ("unsloth", "trl-sft", "trl-dpo", "transformers"), "mlx-lm": ("mlx-lm", "mlx-lm-convert"), "vllm": ("vllm",), "sglang": ("sglang",), "trtllm": ("trtllm",),
               "llama.cpp": ("llama.cpp",), "slurm": ()}


def written_for(launch_engine: str) -> str | None:
    """'megatron core_v0.19.0 (5be96267)': the engine versions a launch engine's files were checked against."""
    parts = [f"{e} {engine_version(e)}" for e in WRITTEN_FOR.get(launch_engine, ()) if engine_version(e)]
    return ", ".join(parts) or None

"""vLLM's `vllm serve` options from the installed package -> src/gpuplan/launch/data/engine_flags.csv.

vLLM builds its server parser in code (EngineArgs.add_cli_args from the config dataclasses, plus the
front-end's own options), so the flags are read from the parser object itself rather than from the
source text: every option string of `make_arg_parser(FlexibleArgumentParser())`, its kind (a switch,
a typed value, a choice with its choices) and its other spellings. An option whose help starts with
"[DEPRECATED]" or says "deprecated" in its first words is kept as kind `deprecated`, so launch tests
refuse it. Rows of kind `plugin` (values that exist only with an out-of-tree plugin, entered by hand
with their issue) are kept.

The parser imports on a CPU-only machine (checked with 0.33.0 on 2026-12-03):
    python -m venv --system-site-packages /tmp/engvenv
    /tmp/engvenv/bin/pip install --no-deps vllm==0.33.0      # then each module the import asks for
    VLLM_TARGET_DEVICE=cpu /tmp/engvenv/bin/python scripts/engine_facts_vllm.py
(torch and transformers come from the system site-packages; VLLM_TARGET_DEVICE=cpu lets its config
pick a device without a GPU.)
"""
from __future__ import annotations

import argparse
import csv
import os

from engine_facts_common import TABLE, today, write_rows

URL = "https://github.com/vllm-project/vllm/blob/v{version}/vllm/engine/arg_utils.py"


def _parser():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:                                               # >= 0.30
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser())


def _kind(action: argparse.Action) -> tuple[str, list[str]]:
    help_text = (action.help or "").strip().lower()
    if help_text.startswith("[deprecated]") or "deprecated" in help_text[:60]:
        return "deprecated", []
    if action.choices:
        return "choice", [str(c) for c in action.choices]
    if action.nargs == 0:                              # store_true / store_false / BooleanOptionalAction's --no-
        return "bool", []
    t = action.type
    name = getattr(t, "__name__", "") if t is not None else "str"
    if action.nargs in ("*", "+"):
        return "list", []
    if "int" in name:                                  # int, human_readable_int ("2k", "1M")
        return "int", []
    return ("float" if "float" in name else "str"), []


def _checked_later() -> dict[str, list[str]]:
    """Options whose values vLLM checks after parsing (the parser takes any string): their choices from
    the lists vLLM checks them against."""
    import typing
    from vllm.config.cache import CacheDType
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    return {"--quantization": list(QUANTIZATION_METHODS), "--kv-cache-dtype": list(typing.get_args(CacheDType))}


def option_rows(parser: argparse.ArgumentParser, later: dict[str, list[str]] | None = None) -> list[dict]:
    """One row per long option, the other spellings (short forms, --no-x) as aliases."""
    later = later or {}
    rows = []
    for action in parser._actions:                     # argparse keeps no public list of its actions
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest == "help":
            continue
        kind, choices = _kind(action)
        flag = longs[0]
        if flag in later and kind != "deprecated":
            kind, choices = "choice", later[flag]
        aliases = [o for o in action.option_strings if o != flag]
        rows.append({"flag": flag, "kind": kind, "choices": ";".join(choices), "aliases": ";".join(aliases)})
    return rows


def _plugin_rows() -> list[dict]:
    with TABLE.open(newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["engine"] == "vllm" and r["kind"] == "plugin"]


def main() -> None:
    import vllm
    version = vllm.__version__
    rows = [{**r, "engine": "vllm", "version": version, "source_url": URL.format(version=version),
             "retrieved": today(), "method": "extracted"} for r in option_rows(_parser(), _checked_later())]
    rows += [{**r, "version": version} for r in _plugin_rows()]
    print(f"vllm {version}: {write_rows('vllm', rows)} flags")


if __name__ == "__main__":
    main()

"""llama.cpp's `llama-server` options from a source tree -> src/gpuplan/launch/data/engine_flags.csv.

Every option of llama.cpp's tools is declared once in common/arg.cpp as
    add_opt(common_arg({"-m", "--model"}, "FNAME", "help ...", [](common_params & params, const std::string & value) {...})
            .set_examples({LLAMA_EXAMPLE_SERVER, ...}) / .set_excludes({...}) / .set_env("LLAMA_ARG_..."));
An option belongs to llama-server when it names no examples or names LLAMA_EXAMPLE_COMMON (common to
all tools) or LLAMA_EXAMPLE_SERVER, and does not exclude it. Its kind follows the handler's signature: no value -> a
switch (also `bool value`, the form with a negated spelling, kept as an alias); `int value` -> int; `float value` -> float; a string value -> str, or a choice when the value hint
lists them ("[on|off|auto]", "{none,layer,row}"). The cache types come from the `kv_cache_types` list the
parser checks them against.

Usage: python scripts/engine_facts_llamacpp.py TREE --commit <sha>
  (TREE: llama.cpp at that commit: a clone, or the copy vendored in llama-cpp-python's sdist, vendor/llama.cpp)
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from engine_facts_common import today, write_rows

ARG = "common/arg.cpp"
URL = "https://github.com/ggml-org/llama.cpp/blob/{commit}/common/arg.cpp"
STRING = r'"((?:[^"\\]|\\.)*)"'


def _calls(text: str) -> list[str]:
    """The source text of each add_opt(...) call, by counting parentheses (strings skipped)."""
    out = []
    for m in re.finditer(r"\badd_opt\(", text):
        depth, i, in_str = 1, m.end(), False
        while depth and i < len(text):
            c = text[i]
            if in_str:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        out.append(text[m.end():i - 1])
    return out


def _for_server(call: str) -> bool:
    examples = re.search(r"\.set_examples\(\{([^}]*)\}\)", call)
    excludes = re.search(r"\.set_excludes\(\{([^}]*)\}\)", call)
    if excludes and "LLAMA_EXAMPLE_SERVER" in excludes.group(1):
        return False
    return examples is None or any(e in examples.group(1) for e in ("LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"))


def kv_cache_types(text: str) -> list[str]:
    """Names of the ggml types in `kv_cache_types` (GGML_TYPE_Q8_0 -> q8_0)."""
    m = re.search(r"kv_cache_types\s*=\s*\{([^}]*)\}", text)
    return [t.lower() for t in re.findall(r"GGML_TYPE_(\w+)", m.group(1))] if m else []


def option_rows(text: str) -> list[dict]:
    cache = kv_cache_types(text)
    rows = []
    for call in _calls(text):
        names_m = re.match(r"\s*common_arg\(\s*\{([^}]*)\}\s*,\s*", call)
        if not names_m or not _for_server(call):
            continue
        names = re.findall(STRING, names_m.group(1))
        longs = [n for n in names if n.startswith("--")]
        flag = longs[0] if longs else names[0]
        rest = call[names_m.end():]
        negated = re.match(r"\{([^}]*)\}\s*,\s*", rest)      # a switch with its negation: {"-cb", ...}, {"-nocb", ...}
        if negated:
            names += re.findall(STRING, negated.group(1))
            rest = rest[negated.end():]
        hint_m = re.match(STRING + r"\s*,", rest)        # the value hint ("N", "[on|off|auto]"), when the option takes one
        hint = hint_m.group(1) if hint_m else ""
        sig = re.search(r"\]\s*\(\s*common_params\s*&\s*\w*\s*(,\s*([^)]*))?\)", rest)
        value_type = (sig.group(2) or "") if sig else ""
        listed = re.fullmatch(r"[\[{]([\w.-]+(?:[|,][\w.-]+)+)[\]}]", hint)
        if not value_type or value_type.split()[0] == "bool":
            kind, choices = "bool", []
        elif listed:
            kind, choices = "choice", re.split(r"[|,]", listed.group(1))
        elif "--cache-type" in flag and cache:
            kind, choices = "choice", cache
        elif "int" in value_type:
            kind, choices = "int", []
        elif "float" in value_type or "double" in value_type:
            kind, choices = "float", []
        else:
            kind, choices = "str", []
        rows.append({"flag": flag, "aliases": ";".join(n for n in names if n != flag), "kind": kind,
                     "choices": ";".join(choices)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree")
    ap.add_argument("--commit", required=True, help="the llama.cpp commit the tree is at (for the source URL)")
    a = ap.parse_args()
    text = (Path(a.tree) / ARG).read_text(encoding="utf-8")
    rows = [{**r, "engine": "llama.cpp", "version": a.commit[:8], "source_url": URL.format(commit=a.commit),
             "retrieved": today(), "method": "extracted"} for r in option_rows(text)]
    print(f"llama.cpp {a.commit[:8]}: {write_rows('llama.cpp', rows)} llama-server options")


if __name__ == "__main__":
    main()

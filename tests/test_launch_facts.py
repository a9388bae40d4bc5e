"""Every generated file of every snapshot against the engine-facts table (issue 17).

launch/data/engine_flags.csv is written by scripts/engine_facts_*.py from the engines' own source
at pinned versions; here each command line, TrainingArguments file and TOML in
tests/snapshots/launch is checked against it: every option exists for that engine, is not
deprecated, takes one of its choices, and a value only a plugin provides comes with a check that
the plugin is installed. The files are read from the committed snapshots (test_launch.py keeps
them equal to what the generators write)."""
from __future__ import annotations

import csv
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from launch_snapshots import snapshot_files

from gpuplan.launch.facts import all_flags, engine_flags, written_for

if sys.version_info >= (3, 11):
    import tomllib
else:                                              # pragma: no cover
    tomllib = pytest.importorskip("tomli")

TABLE = Path(__file__).parents[1] / "src" / "gpuplan" / "launch" / "data" / "engine_flags.csv"
KINDS = {"bool", "int", "float", "str", "choice", "list", "dict", "plugin", "deprecated"}

# command line -> (engine in the table, program prefix, how many words before the first option)
COMMANDS = {"vllm": ("vllm serve", 3), "sglang": ("python -m sglang.launch_server", 3),
            "trtllm": ("trtllm-serve", 2), "trtllm-bench": ("trtllm-bench", 4), "llama.cpp": ("llama-server", 1)}




FILES = snapshot_files()


def command(text, program, contains=""):
    """argv of the line starting with `program` (continuations joined, shell variables kept as words)."""
    joined = re.sub(r" *\\\n *", " ", text)
    line = next((ln.strip() for ln in joined.splitlines() if ln.strip().startswith(program) and contains in ln), None)
    return None if line is None else shlex.split(line.rstrip("&").strip())


def problems(engine, argv):
    """Options of argv the table does not accept for `engine`: unknown, deprecated, or a bad choice."""
    table = engine_flags(engine)
    plugins = {f.flag: f for f in table.values() if f.kind == "plugin"}
    found = []
    for i, tok in enumerate(argv):
        if not tok.startswith("-") or re.fullmatch(r"-\d.*", tok):
            continue
        name, _, inline = tok.partition("=")
        f = table.get(name)
        if f is None or f.kind in ("deprecated", "plugin"):
            found.append(f"{tok}: {'deprecated' if f else 'unknown'} for {engine}")
            continue
        value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
        if f.kind == "choice" and value not in f.choices and f"{name}={value}" not in plugins:
            found.append(f"{name} {value}: not one of {engine}'s choices")
    return found


def plugin_values(engine, argv):
    table = engine_flags(engine)
    return [table[f"{tok}={argv[i + 1]}"] for i, tok in enumerate(argv[:-1]) if f"{tok}={argv[i + 1]}" in table]


def test_table_rows_carry_kind_source_and_date():
    with TABLE.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {"megatron", "torchtitan", "transformers", "vllm", "sglang", "trtllm", "llama.cpp"} <= {r["engine"] for r in rows}
    for r in rows:
        assert r["kind"] in KINDS and r["source_url"].startswith("https://") and re.fullmatch(r"\d{4}-\d\d-\d\d", r["retrieved"])
        assert r["method"] in ("extracted", "read", "docs") and r["version"]
        assert (r["kind"] == "choice") <= bool(r["choices"])
    assert len({(r["engine"], r["flag"]) for r in rows}) == len(rows)
    # one version per engine, so a file can say what it was written for
    assert all(len({r["version"] for r in rows if r["engine"] == e}) == 1 for e in {r["engine"] for r in rows})


def test_the_check_can_fail():
    # the flags issue 17 found in generated files are refused by the table
    assert problems("sglang", ["--disable-cuda-graph"]) == ["--disable-cuda-graph: deprecated for sglang"]
    assert problems("sglang", ["--tp", "8"]) == ["--tp: unknown for sglang"]      # only an argparse prefix
    assert problems("vllm", ["--quantization", "awq_int4"]) == ["--quantization awq_int4: not one of vllm's choices"]
    assert problems("megatron", ["--qk-layernorm", "--add-qkv-bias", "--norm-epsilon", "1e-6"]) == []
    assert "gradient_checkpointing" in {f for f, v in engine_flags("transformers").items() if v.kind == "deprecated"}


@pytest.mark.parametrize("snap,name,text", [f for f in FILES if f[1] in ("serve.sh", "bench.sh")],
                         ids=[f"{f[0]}/{f[1]}" for f in FILES if f[1] in ("serve.sh", "bench.sh")])
def test_serving_commands_use_only_table_options(snap, name, text):
    checked = 0
    for engine, (program, skip) in COMMANDS.items():
        argv = command(text, program, " throughput " if engine == "trtllm-bench" else "")
        if argv is None:
            continue
        checked += 1
        assert problems(engine, argv[skip:]) == []
        for plug in plugin_values(engine, argv):        # e.g. --quantization bitsandbytes on vLLM >= 0.28
            module = plug.choices[0].replace("-", "_")
            assert f"import {module}" in text.split(program)[0], f"{plug.flag} needs {plug.choices[0]} checked first"
    assert checked


@pytest.mark.parametrize("snap,text", [(f[0], f[2]) for f in FILES if f[1] == "train_megatron.sh"])
def test_megatron_arguments_use_only_table_options(snap, text):
    argv = command(text, "torchrun")
    script = next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py"))
    assert problems("megatron", argv[script + 1:]) == []


@pytest.mark.parametrize("snap,text", [(f[0], f[2]) for f in FILES if f[1] == "training_args.json"])
def test_training_arguments_are_current_transformers_fields(snap, text):
    fields = engine_flags("transformers")
    args = {k: v for k, v in json.loads(text).items() if k != "_gpuplan"}
    assert [k for k in args if k not in fields] == []
    assert [k for k in args if fields[k].kind == "deprecated"] == []           # e.g. gradient_checkpointing
    assert args["optim"] in fields["optim"].choices


@pytest.mark.parametrize("snap,text", [(f[0], f[2]) for f in FILES if f[1] == "train_fsdp2.toml"])
def test_fsdp2_toml_keys_are_torchtitan_keys(snap, text):
    keys = engine_flags("torchtitan")
    ours = {"model", "gpuplan", "lora"}                 # read only by train_fsdp2.py, said in its docstring
    data = tomllib.loads(text)
    assert [f"{s}.{k}" for s, kv in data.items() if s not in ours for k in kv if f"{s}.{k}" not in keys] == []
    for s, kv in data.items():
        for k, v in kv.items():
            f = keys.get(f"{s}.{k}")
            if f is not None and f.kind == "choice":
                assert str(v) in f.choices, f"{s}.{k} = {v}"


@pytest.mark.parametrize("snap,text", [(f[0], f[2]) for f in FILES if f[1] == "torchtitan.toml"])
def test_torchtitan_job_file_keys_are_torchtitan_keys(snap, text):
    # a job file torchtitan itself loads: every key, [model] included, is a JobConfig key of the
    # pinned release, every choice one it accepts
    keys = engine_flags("torchtitan")
    data = tomllib.loads(text)
    assert [f"{s}.{k}" for s, kv in data.items() for k in kv if f"{s}.{k}" not in keys] == []
    for s, kv in data.items():
        for k, v in kv.items():
            f = keys[f"{s}.{k}"]
            assert f.kind != "deprecated", f"{s}.{k}"
            if f.kind == "choice":
                assert str(v) in f.choices, f"{s}.{k} = {v}"


def test_torchtitan_job_files_exist_among_the_snapshots():
    assert {s for s, name, _ in FILES if name == "torchtitan.toml"} >= {"train70b_titan2d__torchrun",
                                                                        "train70b_titan3d__torchrun"}


def test_every_file_says_which_engine_version_it_was_written_for():
    for snap, name, text in FILES:
        if name in ("slurm.sbatch", "submit.sh"):
            continue                                        # SLURM files wrap an engine whose files say it
        engine = re.search(r"\(engine: ([\w.]+)\)|\"engine\": \"([\w.]+)\"", text)
        expected = written_for(engine.group(1) or engine.group(2))
        assert expected and (f"written for: {expected}" in text or f'"written_for": "{expected}"' in text), \
            f"{snap}/{name}"


def test_table_versions_name_pinned_sources():
    megatron = {f.version for f in all_flags() if f.engine == "megatron"}
    assert megatron == {"core_v0.19.0 (5be96267)"}
    assert all("/blob/core_v0.19.0/" in f.source_url for f in all_flags() if f.engine == "megatron")
    assert {f.version for f in all_flags() if f.engine == "torchtitan"} == {"v0.2.2 (73a0e697)"}

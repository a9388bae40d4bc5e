"""One JSON envelope for every command under --json (issue 19): {command, version, result} or
{command, version, error}; `result` is always an object; errors come out as JSON too. Every command's output
is checked against the JSON Schema that `gpuplan schema --envelope` prints (src/gpuplan/cli/envelope.schema.json)."""
from __future__ import annotations

import json

import pytest

from gpuplan import __version__
from gpuplan.cli import OPTIONAL_COMMANDS, build_parser, main
from gpuplan.cli.catalog import envelope_schema

jsonschema = pytest.importorskip("jsonschema")

SMALL = ["--model", "qwen2.5-0.5b", "--gpu", "l4"]
# every command, answered (exit 0 or 1); (argv, expected exit codes)
ANSWERED = {
    "models": (["models", "qwen"], {0}),
    "model": (["model", "qwen2.5-0.5b"], {0}),
    "gpus": (["gpus", "h100"], {0}),
    "gpu": (["gpu", "h100-sxm"], {0}),
    "schema": (["schema"], {0}),
    "estimate": (["estimate", *SMALL], {0}),
    "memory": (["memory", *SMALL], {0}),
    "train": (["train", *SMALL, "--tokens", "1e9"], {0}),
    "serve": (["serve", *SMALL, "--task", "infer"], {0}),
    "recommend": (["recommend", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", "l4", "--top", "2"], {0}),
    "compare": (["compare", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", "l4,h100-sxm"], {0}),
    "whatif": (["whatif", *SMALL, "--task", "finetune"], {0}),
    "rl-plan": (["rl-plan", "examples/grpo-7b-colocated.yaml", "--steps", "10", "--top", "2"], {0}),
    "launch": (["launch", *SMALL, "--engine", "torchrun"], {0}),
    "doctor": (["doctor", "--gpu", "h100-sxm", "--count", "8", "--models", "qwen2.5-0.5b"], {0, 1}),
    "calibrate": (["calibrate"], {0, 1}),
    "measure": (["measure", *SMALL, "--task", "infer"], {0, 1}),
    "explain": (["explain", *SMALL, "memory.weights"], {0}),
}
# one bad input per command (exit 2)
BAD = {name: ([name, "--no-such-flag"]) for name in ANSWERED} | {
    "estimate-model": ["estimate", "--model", "llama-3.1-8bb", "--gpu", "l4"],
    "compare-gpu": ["compare", "--model", "qwen2.5-0.5b", "--gpus", "h100-sxmm"],
    "whatif-file": ["whatif", "/no/such/file.yaml"],
    "unknown-command": ["estimat"],
    "explain-quantity": ["explain", *SMALL, "memory.weigths"],
}


def _run(argv, capsys):
    rc = main([*argv, "--json"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out)


def _validate(envelope):
    jsonschema.validate(envelope, envelope_schema(), cls=jsonschema.Draft202012Validator)


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(envelope_schema())


def test_every_command_is_covered():
    parser = build_parser()
    commands = {n for a in parser._actions if hasattr(a, "choices") and a.choices for n in a.choices}
    assert set(OPTIONAL_COMMANDS) <= commands
    # web is a server and prints no JSON; trace has its own test below (it needs torch); completion prints a
    # shell script
    assert commands - {"web", "trace", "completion"} == set(ANSWERED)


@pytest.mark.parametrize("name", sorted(ANSWERED))
def test_answer_is_the_envelope_with_an_object_result(name, capsys):
    argv, codes = ANSWERED[name]
    rc, envelope = _run(argv, capsys)
    assert rc in codes, envelope
    assert envelope["command"] == argv[0] and envelope["version"] == __version__
    assert isinstance(envelope["result"], dict) and "error" not in envelope
    _validate(envelope)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_the_error_envelope(name, capsys):
    argv = BAD[name]
    rc, envelope = _run(argv, capsys)
    assert rc == 2
    assert envelope["command"] == argv[0] and set(envelope["error"]) == {"what", "why", "fix", "close_matches"}
    _validate(envelope)


def test_trace_envelope(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    rc, envelope = _run(["trace", "--model", "smollm2-135m-instruct", "--gpu", "l4", "--task", "infer",
                         "--prompt-len", "64", "--output-len", "8"], capsys)
    assert rc == 0 and "trace" in envelope["result"]
    _validate(envelope)


def test_compare_says_output_tokens_per_s_for_serving(capsys):
    _, envelope = _run(ANSWERED["compare"][0], capsys)
    rows = envelope["result"]["rows"]
    assert envelope["result"]["task"] == "infer" and len(rows) == 2
    assert all(r["output_tokens_per_s"] > 0 and "tokens_per_s" not in r for r in rows)


def test_whatif_and_lists_are_objects(capsys):
    _, whatif = _run(ANSWERED["whatif"][0], capsys)
    assert whatif["result"]["task"] == "finetune" and whatif["result"]["techniques"]
    _, models = _run(["models", "qwen2.5"], capsys)
    assert all("qwen2.5" in m["name"] for m in models["result"]["models"])
    _, gpus = _run(["gpus", "h100"], capsys)
    assert {"h100-sxm", "h100-pcie"} <= {g["id"] for g in gpus["result"]["gpus"]}


@pytest.mark.parametrize("envelope", [
    {"command": "estimate", "version": "0", "result": []},                       # a list result
    {"command": "compare", "version": "0", "result": {"task": "infer", "rows": [{"gpu": "l4", "fits": True,
                                                      "usd_per_hour": 1, "tokens_per_s": 3}]}},   # the old name
    {"command": "estimate", "version": "0", "error": {"what": "x", "why": "y"}},   # an incomplete error
    {"command": "estimate", "version": "0", "result": {}, "error": {"what": "", "why": "", "fix": "",
                                                                     "close_matches": []}},
])
def test_the_schema_refuses_what_the_contract_forbids(envelope):
    with pytest.raises(jsonschema.ValidationError):
        _validate(envelope)


def test_schema_envelope_flag_prints_the_schema(capsys):
    assert main(["schema", "--envelope"]) == 0
    assert json.loads(capsys.readouterr().out) == envelope_schema()


def test_memory_without_gpu_envelope(capsys):
    rc, envelope = _run(["memory", "--model", "qwen2.5-0.5b", "--task", "train"], capsys)
    assert rc == 0 and envelope["result"]["layouts"]
    _validate(envelope)

"""`gpuplan <command> --help` documents every flag (issue 19): the walk covers every command, the
optional ones (built only when they run) included, and every sub-command below them."""
from __future__ import annotations

import argparse

import pytest

from gpuplan.cli import OPTIONAL_COMMANDS, OWN_COMMANDS, build_parser, main
from gpuplan.cliargs import SCENARIO_FLAGS, scenario_flag_help


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's own parser: the core ones from the plain parser, each optional one from the parser
    built for it (placeholders are left out)."""
    lazy = {**OPTIONAL_COMMANDS, **OWN_COMMANDS}
    found = {name: p for name, p in _children(build_parser()).items() if name not in lazy}
    for name in lazy:
        found[name] = _children(build_parser(name))[name]
    return found


def _undocumented(prefix: str, parser: argparse.ArgumentParser) -> list[str]:
    parser.format_help()                    # help that is built lazily is filled in here
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                missing += _undocumented(f"{prefix} {name}", child)
        elif action.help is argparse.SUPPRESS:
            continue
        elif not (action.help or "").strip():
            missing.append(f"{prefix}: {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_command_is_walked():
    commands = _commands()
    assert {"estimate", "memory", "train", "serve", "models", "gpus", "schema"} <= set(commands)
    assert set(OPTIONAL_COMMANDS) <= set(commands)
    for name, parser in commands.items():
        assert any(a.option_strings for a in parser._actions if a.dest != "help"), f"{name}: a placeholder"


def test_every_flag_of_every_command_has_help():
    missing = [m for name, parser in _commands().items() for m in _undocumented(f"gpuplan {name}", parser)]
    assert not missing, "flags without help:\n" + "\n".join(missing)


@pytest.mark.parametrize("flag", sorted(SCENARIO_FLAGS))
def test_scenario_flag_help_says_what_and_which_field(flag):
    section, field, _, _, _ = SCENARIO_FLAGS[flag]
    text = scenario_flag_help(flag)
    assert f"[sets {section + '.' if section else ''}{field}]" in text
    assert len(text.split("[sets")[0].strip()) > 10, text


@pytest.mark.parametrize("flag,needles", [
    ("task", ["train, finetune, infer", "default: train"]),
    ("method", ["full, lora, qlora", "default: full"]),
    ("seq_len", ["tokens", "default: 2048", "10,485,760"]),
    ("count", ["GPUs", "default: 1"]),
    ("zero", ["0 <= value <= 3", "default: 0"]),
    ("weights", ["nf4", "default: bf16"]),
    ("engine", ["vllm", "sglang", "default: vllm"]),
    ("offload", ["optimizer+params"]),
])
def test_scenario_flag_help_gives_unit_default_and_allowed_values(flag, needles):
    text = scenario_flag_help(flag)
    for needle in needles:
        assert needle in text, (needle, text)


def test_estimate_help_prints_the_generated_text(capsys):
    assert main(["estimate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "one of: full, lora, qlora; default: full [sets train.method]" in out
    assert '{"command", "version", "result"}' in out

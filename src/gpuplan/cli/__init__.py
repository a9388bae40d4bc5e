"""Command-line interface: one thin subcommand per library function, `--json` everywhere.

Modules: `catalog` (models, model, gpus, gpu, schema), `plan` (estimate, memory, train, serve); the
other commands live in their packages' `cli.py` and are imported only when they run. Shared flags,
number parsers, the JSON envelope and the error handling are in `gpuplan.cliargs`, below this package.

Exit codes: 0 ok, 1 "no plan / does not fit", 2 bad input or environment (one paragraph, and the
--json error envelope), 3 a gpuplan bug (no traceback unless GPUPLAN_DEBUG=1), 130 Ctrl-C.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from ..cliargs import Parser, report

# Commands whose modules live in their own packages. Their parsers are built only when that
# command runs, so `gpuplan --help` and the core commands start without importing them.
OPTIONAL_COMMANDS: dict[str, tuple[str, str, str]] = {
    "recommend": ("gpuplan.search.cli", "add_parsers", "which GPUs, how many, configured how: ranked plans with reasons"),
    "compare": ("gpuplan.search.cli", "add_parsers", "several GPUs side by side for one workload"),
    "whatif": ("gpuplan.search.cli", "add_parsers", "memory saved and time cost of each memory-saving technique"),
    "rl-plan": ("gpuplan.search.cli", "add_parsers", "RL: colocated or split rollout/training GPUs, cheapest for N "
                "steps, and what group size, response length and the reference cost"),
    "launch": ("gpuplan.launch.cli", "add_parser", "write runnable launch configuration for a plan"),
    "trace": ("gpuplan.trace.cli", "add_parser", "measure per-GPU memory with PyTorch fake tensors (the trace extra)"),
    "doctor": ("gpuplan.local.cli", "add_parsers", "your GPUs: what is here, what runs, why it ran out of memory"),
    "calibrate": ("gpuplan.local.cli", "add_parsers", "benchmark the local GPU(s) and write a hardware profile"),
    "measure": ("gpuplan.local.cli", "add_parsers", "run a scenario for a few steps on the local GPU"),
    "web": ("gpuplan.web.cli", "add_parser", "serve the web page and HTTP API"),
}

# commands of this package beside catalog/plan (their modules are imported only when they run)
OWN_COMMANDS: dict[str, tuple[str, str, str]] = {
    "explain": ("gpuplan.cli.explain", "add_parser", "walk through one number of a scenario: formula, inputs, "
                                                     "sources, error bar"),
    "completion": ("gpuplan.cli.completion", "add_parser", "print a shell completion script (bash, zsh, fish)"),
}

QUIET_FLAGS = ("-q", "--quiet")
NO_COLOR_FLAG = "--no-color"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    from . import catalog, plan
    p = Parser(prog="gpuplan", description="Plan LLM hardware: memory, speed, cost, and what to choose.")
    p.command = command       # the subcommand named on the command line: its flags are the close matches
    p.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    p.add_argument(*QUIET_FLAGS, dest="_quiet", action="store_true", help="print only results and errors")
    p.add_argument(NO_COLOR_FLAG, dest="_no_color", action="store_true", help="no colour on a terminal")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    catalog.add_parsers(sub)
    plan.add_parsers(sub)
    _optional_commands(sub, command)
    add_output_flags(sub)
    return p


def _optional_commands(sub, command: str | None) -> None:
    """Commands whose modules load only when they run (or all of them: command '*', for completion)."""
    table = {**OWN_COMMANDS, **OPTIONAL_COMMANDS}
    loaded = set()
    for name, (module, func, helptext) in table.items():
        if command == "*" or table.get(command or "", ("",))[0] == module:
            if module not in loaded:
                getattr(importlib.import_module(module), func)(sub)
                loaded.add(module)
        else:
            sub.add_parser(name, help=helptext, add_help=False)


def add_output_flags(sub) -> None:
    """--quiet and --no-color on every command (read from the command line before parsing, see main)."""
    for parser in sub.choices.values():
        if not parser.add_help or "--quiet" in parser._option_string_actions:
            continue                       # a placeholder of a command not loaded this time
        g = parser.add_argument_group("output")
        g.add_argument(*QUIET_FLAGS, dest="quiet", action="store_true",
                       help="print only the result and errors: no notes, hints or progress bars")
        g.add_argument(NO_COLOR_FLAG, dest="no_color", action="store_true",
                       help="no colour on a terminal (also: the NO_COLOR environment variable); piped output "
                            "never has colour")


def _command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    from .. import term
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    as_json = "--json" in argv
    term.configure(quiet=any(f in argv for f in QUIET_FLAGS), no_color=NO_COLOR_FLAG in argv, as_json=as_json)
    try:
        return report(command, as_json, lambda: _run(argv, command))
    finally:
        term.reset()


def _run(argv: list[str], command: str | None) -> int:
    parser = build_parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:          # --help and --version
        return done.code if isinstance(done.code, int) else 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


__all__ = ["main", "build_parser", "OPTIONAL_COMMANDS", "OWN_COMMANDS"]

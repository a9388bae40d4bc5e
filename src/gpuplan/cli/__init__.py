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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    from . import catalog, plan
    p = Parser(prog="gpuplan", description="Plan LLM hardware: memory, speed, cost, and what to choose.")
    p.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    catalog.add_parsers(sub)
    plan.add_parsers(sub)
    _optional_commands(sub, command)
    return p


def _optional_commands(sub, command: str | None) -> None:
    chosen = OPTIONAL_COMMANDS.get(command or "")
    if chosen:
        getattr(importlib.import_module(chosen[0]), chosen[1])(sub)
    for name, (module, _, helptext) in OPTIONAL_COMMANDS.items():
        if not chosen or module != chosen[0]:
            sub.add_parser(name, help=helptext, add_help=False)


def _command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    return report(command, "--json" in argv, lambda: _run(argv, command))


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


__all__ = ["main", "build_parser", "OPTIONAL_COMMANDS"]

"""`gpuplan launch SCENARIO --engine ENGINE [--out DIR] [--json]` (wired into gpuplan.cli by the lead)."""
from __future__ import annotations

import argparse
import json
import sys

from . import ENGINES, launch_files, write_launch


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("launch", help="write runnable launch configuration for a plan",
                              description="Turn a scenario into launch files for one engine. Each file's header "
                                          "holds the predicted memory, speed and cost.")
    from ..cli import add_scenario_args
    add_scenario_args(p, exclude=("engine",))
    p.add_argument("--engine", required=True, help=f"one of: {', '.join(ENGINES)}")
    p.add_argument("--inner", default=None, help="for --engine slurm: the training engine to wrap "
                                                  "(default from the scenario's framework)")
    p.add_argument("--out", default=None, help="write the files into this folder instead of printing them")
    p.add_argument("--json", action="store_true", help="print {file name: text} as JSON")
    p.add_argument("--no-estimate", action="store_true", help="do not run the estimator for the headers")
    p.set_defaults(func=run)
    return p


def _estimate(scenario) -> dict | None:
    try:
        from ..api import estimate  # type: ignore[attr-defined]
    except Exception:
        return None
    try:
        result = estimate(scenario)
        return result.to_json() if hasattr(result, "to_json") else dict(result)
    except Exception:
        # the launch files are still useful without numbers; the header then says "not estimated"
        return None


def run(args) -> int:
    from ..cli import scenario_from_args
    scenario = scenario_from_args(args)
    est = None if getattr(args, "no_estimate", False) else _estimate(scenario)
    inner = getattr(args, "inner", None)
    if args.out:
        paths = write_launch(scenario, args.engine, args.out, estimate=est, inner=inner)
        if args.json:
            print(json.dumps({"written": [str(p) for p in paths]}, indent=2))
        else:
            for p in paths:
                print(p)
        return 0
    files = launch_files(scenario, args.engine, estimate=est, inner=inner)
    if args.json:
        print(json.dumps(files, indent=2))
    else:
        for name, text in files.items():
            sys.stdout.write(f"==> {name} <==\n{text}\n")
    return 0

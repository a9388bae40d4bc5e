"""`gpuplan launch SCENARIO --engine ENGINE [--out DIR] [--force] [--json]` (wired in by gpuplan.cli).

The headers' numbers come from `gpuplan.pipeline.evaluate`; an estimate that fails is an error (pass
--no-estimate to write files without numbers). A plan the estimate marks DOES NOT FIT gets no files
(exit 1) unless --force; --out never overwrites a file whose content differs unless --force."""
from __future__ import annotations

import argparse
import sys

from . import ENGINES, engine_name, launch_files, write_launch


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("launch", help="write runnable launch configuration for a plan",
                              description="Turn a scenario into launch files for one engine. Each file's header "
                                          "holds the predicted memory, speed and cost.")
    from ..cliargs import add_scenario_args
    add_scenario_args(p, exclude=("engine",))
    p.add_argument("--engine", required=True, help=f"one of: {', '.join(ENGINES)}")
    p.add_argument("--inner", default=None, help="for --engine slurm: the training engine to wrap "
                                                  "(default from the scenario's framework)")
    p.add_argument("--time-limit", type=float, default=None, metavar="HOURS",
                   help="for --engine slurm: the partition's time limit per job (default 24); a longer run "
                        "becomes chained jobs that resume from the latest checkpoint")
    p.add_argument("--out", default=None, help="write the files into this folder instead of printing them")
    p.add_argument("--force", action="store_true", help="write even if the plan does not fit, and overwrite "
                                                        "changed files in --out")
    p.add_argument("--json", action="store_true", help="print {engine, files: {file name: text}, notes} as JSON "
                                                       "(the body POST /api/launch returns)")
    p.add_argument("--no-estimate", action="store_true", help="do not run the estimator for the headers")
    p.set_defaults(func=run)
    return p


def _estimate(scenario) -> dict:
    from ..pipeline import evaluate
    return evaluate(scenario).to_json()


def _launchable(scenario, engine: str | None) -> bool:
    """The engine writes files for this scenario (its checks pass); True when no engine is named."""
    if engine is None:
        return True
    try:
        launch_files(scenario, engine)
    except Exception:
        return False
    return True


def fit_fix(scenario, mem: dict, engine: str | None = None) -> str:
    """The change that makes the plan fit: the what-if steps (search.whatif.path_to_fit), else a single what-if
    change that fits, else the fewest GPUs of this type with the same settings (estimate.fit.fewest_gpus), else a
    pointer. With `engine`, only a change that engine can write is named (issue 20: verl was told to set
    master_weights=false, which its FSDP actor does not run)."""
    try:
        from ..search.whatif import path_to_fit, whatif
        from ..techniques import techniques_for
        steps = [s for s in path_to_fit(scenario) if s.get("technique")]
        if steps and steps[-1].get("fits"):
            cand = scenario
            for step in steps:              # replay the path: each step is one technique of the catalog
                change = next((t.changes for t in techniques_for(cand) if t.name == step["technique"]), None)
                cand = cand.replace(**change) if change is not None else cand
            if _launchable(cand, engine):
                return ("it fits with " + ", then ".join(s["technique"] for s in steps)
                        + " (`gpuplan whatif` shows each)")
        if engine is not None:
            for row in whatif(scenario)[1:]:
                if row.get("fits") and not row.get("error") and _launchable(scenario.replace(**row["change"]), engine):
                    return f"it fits with {row['technique']}, which {engine} writes (`gpuplan whatif` shows each)"
        from ..estimate.fit import fewest_gpus
        from ..models import get_model
        n = fewest_gpus(scenario, get_model(scenario.model), int(mem["capacity_bytes_per_gpu"]))
        if n:
            return f"with the same settings it fits on {n} x {scenario.hardware.gpu} (hardware.count: {n})"
    except Exception:                       # the advice is a courtesy; the refusal stands without it
        pass
    return "`gpuplan memory` shows what to change; `gpuplan recommend` searches GPUs and layouts"


def _does_not_fit(est: dict | None) -> bool:
    return bool(est) and (est.get("memory") or {}).get("fits") is False


def run(args) -> int:
    from ..cliargs import NO_PLAN, print_result, scenario_from_args
    from ..units import fmt_bytes
    scenario = scenario_from_args(args)
    est = None if getattr(args, "no_estimate", False) else _estimate(scenario)
    inner = getattr(args, "inner", None)
    force = getattr(args, "force", False)
    limit = getattr(args, "time_limit", None)
    files = launch_files(scenario, args.engine, estimate=est, inner=inner, time_limit_h=limit)    # an engine that cannot run it raises
    if _does_not_fit(est):
        mem = est["memory"]
        shown = (f"the plan DOES NOT FIT: peak {fmt_bytes(mem['peak_bytes_per_gpu'])} per GPU > capacity "
                 f"{fmt_bytes(mem['capacity_bytes_per_gpu'])}")
        if not force:
            message = (f"{shown}; no launch files written. Fix: {fit_fix(scenario, mem, args.engine)}. --force writes them "
                       "anyway.")
            print(message, file=sys.stderr)
            if args.json:
                print_result("launch", {"fits": False, "memory": mem, "message": message})
            return NO_PLAN
        print(f"warning: {shown}; writing the files anyway (--force).", file=sys.stderr)
    if args.out:
        paths = write_launch(scenario, args.engine, args.out, estimate=est, inner=inner, force=force,
                             time_limit_h=limit)
        if args.json:
            print_result("launch", {"written": [str(p) for p in paths]})
        else:
            for p in paths:
                print(p)
        return 0
    if args.json:       # the web API's launch body (web/jobs.launch_job), so both surfaces answer alike
        print_result("launch", {"engine": engine_name(args.engine), "files": files, "notes": []})
    else:
        for name, text in files.items():
            sys.stdout.write(f"==> {name} <==\n{text}\n")
    return 0

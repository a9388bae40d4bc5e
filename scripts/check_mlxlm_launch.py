"""Run mlx-lm's own argument parsers on gpuplan's mlx-lm launch files, without mlx.

mlx_lm/lora.py and mlx_lm/convert.py import mlx at the top, and mlx installs only on macOS, so this script takes
the parser-building functions out of the pinned source (`build_parser` and `CONFIG_DEFAULTS` of lora.py,
`configure_parser`, `QUANT_RECIPES` and `MODEL_CONVERSION_DTYPES` of convert.py), executes exactly that code with argparse, and then:
  1. parses the `mlx_lm.lora` command of launch.sh (argparse exits on an unknown flag or a bad value);
  2. merges mlx_lora.yaml the way lora.py `main` does (a key fills an argument the command line left unset)
     and refuses a key that is neither an argument's dest nor a CONFIG_DEFAULTS key (main would copy it in
     silently and nothing would read it), or a value outside the argument's choices;
  3. checks `lora_parameters` holds the keys `linear_to_lora_layers` reads (rank, scale, dropout; keys optional);
  4. parses the `mlx_lm.convert` command, where there is one.

    PYTHONPATH=src python scripts/check_mlxlm_launch.py MLX_LM_GIT_DIR [--tag v0.31.3]

Prints one line per case and exits 1 if any is refused.
"""
from __future__ import annotations

import argparse
import ast
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.launch import launch_files  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402

CASES = {
    "qlora 8b": {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
                 "train": {"method": "qlora", "seq_len": 2048, "micro_batch": 2, "global_batch": 8,
                           "recompute": "full", "tokens": 1e7}},
    "lora targets fp16": {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
                          "train": {"method": "lora", "lora_rank": 8, "lora_alpha": 16, "precision": "fp16",
                                    "lora_targets": ["q_proj", "v_proj", "down_proj"], "seq_len": 1024}},
    "full sgd": {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
                 "train": {"method": "full", "optimizer": "sgd", "seq_len": 512, "recompute": "none"}},
}


def _pieces(source: str, names: set[str]) -> str:
    """The top-level functions and assignments called `names`, as source text."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            out.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            out.append(ast.get_source_segment(source, node))
    return "\n\n".join(out)


def load_parsers(git_dir: str, tag: str):
    show = lambda p: subprocess.run(["git", "-C", git_dir, "show", f"{tag}:{p}"], check=True,  # noqa: E731
                                    capture_output=True, text=True).stdout
    lora_ns: dict = {"argparse": argparse, "_parse_size": str}     # _parse_size (utils.py) turns "2GB" into bytes
    exec(_pieces(show("mlx_lm/lora.py"), {"build_parser", "CONFIG_DEFAULTS"}), lora_ns)  # noqa: S102
    conv_ns: dict = {"argparse": argparse}
    exec(_pieces(show("mlx_lm/convert.py"), {"configure_parser", "QUANT_RECIPES", "MODEL_CONVERSION_DTYPES"}), conv_ns)  # noqa: S102
    return lora_ns["build_parser"](), lora_ns["CONFIG_DEFAULTS"], conv_ns["configure_parser"]()


def check(files: dict[str, str], lora_parser, defaults: dict, conv_parser) -> list[str]:
    errors = []
    cmds = [shlex.split(line.split("|| ", 1)[-1]) for line in files["launch.sh"].splitlines()
            if "mlx_lm." in line and not line.startswith("#")]
    lora_cmd = next(c for c in cmds if c[0] == "mlx_lm.lora")
    args = vars(lora_parser.parse_args(lora_cmd[1:]))          # exits on an unknown flag
    cfg = yaml.safe_load(files["mlx_lora.yaml"])
    choices = {a.dest: a.choices for a in lora_parser._actions if a.choices}
    for k, v in cfg.items():
        if k not in args and k not in defaults:
            errors.append(f"YAML key {k!r} is no argument and no CONFIG_DEFAULTS key")
        if k in choices and v not in choices[k]:
            errors.append(f"YAML {k}: {v!r} not in {choices[k]}")
        if args.get(k) is None:
            args[k] = v
    lp = cfg.get("lora_parameters")
    if lp is not None and not {"rank", "scale", "dropout"} <= set(lp) <= {"rank", "scale", "dropout", "keys"}:
        errors.append(f"lora_parameters keys {sorted(lp)}")
    for c in cmds:
        if c[0] == "mlx_lm.convert":
            conv_parser.parse_args(c[1:])
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--tag", default="v0.31.3")
    a = ap.parse_args()
    lora_parser, defaults, conv_parser = load_parsers(a.git_dir, a.tag)
    bad = 0
    for name, scn in CASES.items():
        errs = check(launch_files(scenario_from_dict(scn), "mlx-lm"), lora_parser, defaults, conv_parser)
        bad += bool(errs)
        print(f"{name}: " + ("accepted by mlx-lm " + a.tag + "'s parsers" if not errs else "; ".join(errs)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

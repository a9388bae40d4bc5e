"""Parse generated run_openrlhf.sh command lines with OpenRLHF's own argparse parser (run by hand; not a test).

    git -C OPENRLHF_CLONE show v0.11.0:openrlhf/cli/train_ppo_ray.py > /tmp/train_ppo_ray.py
    python scripts/check_openrlhf_launch.py /tmp/train_ppo_ray.py run_openrlhf.sh ...

train_ppo_ray.py imports ray and DeepSpeed at the top, so the module is not imported: the statements of its
`if __name__ == "__main__":` block that build the parser (everything before `parser.parse_args()`) are run on
their own, then `parse_args` reads the generated command line (argparse rejects an unknown option, a bad
choice or a value after a switch).
"""
import argparse
import ast
import re
import shlex
import sys

source = open(sys.argv[1]).read()
main = next(n for n in ast.parse(source).body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
body = []
for stmt in main.body:
    if "parse_args" in ast.unparse(stmt):
        break
    body.append(stmt)
scope = {"argparse": argparse, "os": __import__("os"), "datetime": __import__("datetime").datetime}
exec(compile(ast.Module(body=body, type_ignores=[]), "train_ppo_ray.__main__", "exec"), scope)
parser = scope["parser"]
for path in sys.argv[2:]:
    text = re.sub(r" *\\\n *", " ", open(path).read())
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("python3 -m openrlhf.cli.train_ppo_ray"))
    argv = [a.replace("$DATASET", "data/prompts.jsonl").replace("$REWARD", "reward_func.py")
            for a in shlex.split(line)[3:] if a != "$@"]
    args = parser.parse_args(argv)
    print(f"{path}: parsed {len(argv)} words (estimator {getattr(args, 'algo.advantage.estimator')}, "
          f"train batch {getattr(args, 'train.batch_size')})")

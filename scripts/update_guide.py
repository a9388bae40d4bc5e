"""Rewrite the output under every `$ gpuplan ...` command in docs/guide.md with what the command prints now.

    python scripts/update_guide.py            # rewrite docs/guide.md in place
    python scripts/update_guide.py --check    # exit 1 if a block differs (what tests/test_guide.py checks)

A block is a ```console fence whose first line is `$ gpuplan ARGS`; lines that change from run to run (search
timings) are written as `...`, which the check skips. The prose around the blocks is left alone.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"```console\n\$ (gpuplan [^\n]*)\n(.*?)```", re.S)
VOLATILE = re.compile(r"evaluations in [0-9.]+ s\.$")


def run(command: str) -> tuple[int, list[str]]:
    """Run one `gpuplan ...` command in this process; its exit code and what it prints, stdout then stderr
    (volatile lines as ...)."""
    from gpuplan.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(shlex.split(command)[1:])
    text = out.getvalue().rstrip("\n") + ("\n" + err.getvalue().rstrip("\n") if err.getvalue().strip() else "")
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return rc, ["..." if VOLATILE.search(line) else line for line in lines]


def blocks(text: str) -> list[tuple[str, list[str]]]:
    return [(m.group(1), m.group(2).rstrip("\n").splitlines()) for m in BLOCK.finditer(text)]


def main(argv: list[str]) -> int:
    text = GUIDE.read_text(encoding="utf-8")
    if "--check" in argv:
        stale = [cmd for cmd, shown in blocks(text) if run(cmd)[1] != shown]
        for cmd in stale:
            print(f"stale: {cmd}")
        return 1 if stale else 0

    def fresh(m: re.Match) -> str:
        return f"```console\n$ {m.group(1)}\n" + "\n".join(run(m.group(1))[1]) + "\n```"
    GUIDE.write_text(BLOCK.sub(fresh, text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

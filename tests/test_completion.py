"""`gpuplan completion bash|zsh|fish` (issue 19): scripts generated from the parser. The bash script is run in
bash with the words a user would have typed; zsh and fish scripts are syntax-checked where those shells exist."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from gpuplan.cli import build_parser, main


@pytest.fixture(scope="module")
def scripts():
    from gpuplan.cli.completion import script
    return {shell: script(shell) for shell in ("bash", "zsh", "fish")}


def _complete(bash_script: str, line: str) -> list[str]:
    """What bash offers for `line` (the cursor at its end), with the script loaded."""
    words = line.split(" ")
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = (f"{bash_script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
               "_gpuplan; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


bash_missing = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def test_completion_command_prints_a_script(capsys):
    assert main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# bash completion for gpuplan") and "complete -o default -F _gpuplan gpuplan" in out


def test_an_unknown_shell_is_refused_with_the_choices(capsys):
    assert main(["completion", "tcsh"]) == 2
    err = capsys.readouterr().err
    assert "bash" in err and "zsh" in err and "fish" in err


@bash_missing
def test_bash_script_parses(scripts):
    done = subprocess.run(["bash", "-n"], input=scripts["bash"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@bash_missing
@pytest.mark.parametrize("line,expected", [
    ("gpuplan est", {"estimate"}),
    ("gpuplan expl", {"explain"}),
    ("gpuplan rec", {"recommend"}),
    ("gpuplan estimate --mod", {"--model"}),
    ("gpuplan estimate --task ", {"train", "finetune", "infer"}),           # DESIGN §3.1: the three tasks
    ("gpuplan estimate --gpu h100-s", {"h100-sxm"}),
    ("gpuplan estimate --model llama-3.1-8", {"llama-3.1-8b"}),
    ("gpuplan model llama-3.1-7", {"llama-3.1-70b"}),
    ("gpuplan gpu rtx-409", {"rtx-4090"}),
    ("gpuplan recommend --gpus h100-sxm,rtx-409", {"h100-sxm,rtx-4090"}),
    ("gpuplan recommend --preset st", {"startup"}),
    ("gpuplan explain memory.act", {"memory.activations"}),
    ("gpuplan estimate --why speed.t", {"speed.tpot", "speed.ttft", "speed.tokens_per_s"}),
    ("gpuplan completion f", {"fish"}),
    ("gpuplan serve --qu", {"--quiet"}),
    ("gpuplan whatif --no-c", {"--no-color"}),
])
def test_bash_offers(scripts, line, expected):
    offered = set(_complete(scripts["bash"], line))
    assert expected <= offered, offered


@bash_missing
def test_bash_offers_no_model_names_for_a_number_flag(scripts):
    assert _complete(scripts["bash"], "gpuplan estimate --seq-len ") == []


def test_every_command_and_flag_is_in_every_script(scripts):
    from gpuplan.cli.completion import commands
    cmds = commands()
    names = {c.name for c in cmds}
    parser = build_parser("*")
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    assert names == set(sub.choices)
    estimate = next(c for c in cmds if c.name == "estimate")
    flags = {f for o in estimate.options for f in o.flags}
    assert {"--model", "--gpu", "--seq-len", "--json", "--quiet", "--no-color"} <= flags
    for shell, text in scripts.items():
        for name in names:
            assert name in text, (shell, name)
    for flag in ("--seq-len", "--global-batch", "--kv-cache"):
        assert flag in scripts["zsh"]
        assert f"-l {flag[2:]}" in scripts["fish"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses(scripts):
    done = subprocess.run(["zsh", "-n"], input=scripts["zsh"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_script_parses(scripts):
    done = subprocess.run(["fish", "--no-execute"], input=scripts["fish"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_help_start_up_does_not_build_the_completion_lists():
    # the lists are written into the script when it is generated: a normal command never loads them
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    code = ("import sys; from gpuplan.cli import main; main(['--help']); "
            "print(sorted(m for m in ('gpuplan.cli.completion', 'gpuplan.explain', 'rich') if m in sys.modules), "
            "file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"})
    assert done.stderr.strip().endswith("[]"), done.stderr

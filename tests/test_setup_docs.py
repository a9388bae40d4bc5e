"""The README's set-up is complete: every third-party package a test, script or benchmark imports is a core
dependency or in a declared extra, the README's test command installs every one of those extras after PyTorch's
CPU build, and `.ci/run` installs the same extras (issue 19, "Set-up")."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# import name -> distribution name, where they differ
DIST = {"yaml": "pyyaml"}
LOCAL = {"gpuplan", "conftest"}
# serving/training engines whose own argument parsers scripts/check_launch_with_engines.py runs where
# they happen to be installed (docs/launch.md): multi-GB, GPU builds, never an extra of gpuplan; trl (its
# config dataclasses build the generated TRL configs where installed; without it tests/test_launch_trl.py checks
# the keys against TRL's fields read from its source)
ENGINES_CHECKED_WHERE_INSTALLED = {"vllm", "sglang", "megatron", "trl",
                                   # probes of that engine environment, each inside try/except with a stand-in:
                                   # Megatron's unconditional triton import and Python 3.12's typing.override
                                   "triton", "typing_extensions",
                                   # the peer planner benchmarks/bench_vs_calculon.py compares against, run in a
                                   # throw-away venv (docs/recommend.md), and the pandas it imports lazily
                                   "calculon", "pandas",
                                   # the fine-tuning/RL tools whose own parsers scripts/check_{verl,llamafactory}_launch.py
                                   # run by hand from throw-away copies under /tmp (docs/launch.md): verl's Hydra,
                                   # LLaMA-Factory's hparams (and the datasets enum they import, stubbed when absent)
                                   "hydra", "llamafactory", "datasets",
                                   # the reader of NVIDIA aiconfigurator's published parquet GEMM tables, which
                                   # scripts/extract_fp4_gemm_grid.py and extract_trtllm_op_floors.py run by hand on that
                                   # repository's snapshot (the provenance of estimate/data/fp4_gemm_shapes.csv and
                                   # trtllm_op_floors.csv); nothing else imports it
                                   "pyarrow",
                                   # NeMo RL's source tree at a pinned commit, which scripts/bench_nemo_rl_host.py
                                   # imports from a `git archive` copy given on its command line (not installed)
                                   "nemo_rl"}


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:         # Python 3.10: tomli is in the test extra
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def _third_party_imports() -> dict[str, str]:
    """import name -> first file importing it, over tests/, scripts/ and benchmarks/."""
    files = [f for d in ("tests", "scripts", "benchmarks") for f in sorted((ROOT / d).glob("*.py"))]
    local = LOCAL | {f.stem for d in ("tests", "scripts", "benchmarks", "validation") for f in (ROOT / d).rglob("*.py")}
    found: dict[str, str] = {}
    for f in files:
        text = f.read_text()
        names = re.findall(r'importorskip\(\s*"([\w.]+)"', text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.append(node.module)
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in local:
                found.setdefault(top, f.relative_to(ROOT).as_posix())
    return found


def _readme_test_command() -> str:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2, f"the README keeps exactly two set-up commands at the top, found {len(commands)}"
    return commands[1]


def _extras_in(command: str) -> set[str]:
    m = re.search(r'\.\[([\w,\-$]+)\]', command)
    assert m, f"no extras in {command!r}"
    return set(m.group(1).split(","))


def test_every_test_and_script_import_is_declared():
    project = _toml()["project"]
    declared = {_dist(r) for r in project["dependencies"]}
    for reqs in project["optional-dependencies"].values():
        declared |= {_dist(r) for r in reqs}
    missing = {name: where for name, where in _third_party_imports().items()
               if DIST.get(name, name).lower() not in declared and name not in ENGINES_CHECKED_WHERE_INSTALLED}
    assert not missing, f"imported but in no extra: {missing}"


def test_readme_test_command_installs_every_extra_a_test_or_script_needs():
    extras = _toml()["project"]["optional-dependencies"]
    command = _readme_test_command()
    installed = _extras_in(command)
    for name in _third_party_imports():
        if name in ENGINES_CHECKED_WHERE_INSTALLED:
            continue
        dist = DIST.get(name, name).lower()
        assert any(dist in {_dist(r) for r in extras[e]} for e in installed) or \
            dist in {_dist(r) for r in _toml()["project"]["dependencies"]}, f"{dist}: no installed extra has it"
    for extra in ("deepspeed", "scripts", "plot", "test", "trace", "web"):
        assert extra in installed, extra


def test_readme_takes_torch_from_the_cpu_index_before_the_extras():
    command = _readme_test_command()
    torch = command.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert torch < command.index("pip install -e"), "CPU torch must be installed before the extras"
    readme = (ROOT / "README.md").read_text()
    assert "torch==2.13.0" in readme and "equivalent" in readme
    assert "chromium" in readme.lower()


def test_ci_installs_the_readme_extras_and_pins_cpu_torch():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q "torch==2.13.0"' in ci
    full = re.search(r'^EXTRAS="([\w,\-]+)"', ci, re.M).group(1)
    assert set(full.split(",")) == _extras_in(_readme_test_command())
    assert 'pip install -e ".[$EXTRAS]" && python3 -m pytest' in ci

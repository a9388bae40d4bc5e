"""Load a repository script (scripts/, benchmarks/) as a module, for tests of its functions: the scripts are not
a package, so they are executed from their path, with their own folder importable while they load (a script
may import its neighbours, e.g. cuda_timing or trace_loss_block)."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str):
    """The module of `relpath` (e.g. "scripts/validate_serving_load.py") under its file stem."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod

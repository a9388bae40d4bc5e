import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "validation" / "public"
os.environ.setdefault("GPUPLAN_OFFLINE", "1")


@pytest.fixture
def builtin_catalog(monkeypatch):
    """The packaged GPU catalog, whatever GPUPLAN_GPUS_CSV or an earlier test set."""
    from gpuplan.hardware import gpus as gpus_mod
    from gpuplan.hardware import use_user_catalog
    monkeypatch.delenv(gpus_mod.ENV_VAR, raising=False)
    use_user_catalog(None)
    yield
    use_user_catalog(None)


@pytest.fixture
def validation_dir() -> Path:
    return VALIDATION

# Property tests and fuzzing must be deterministic: the same examples on every run and machine.
try:
    from hypothesis import settings

    settings.register_profile("deterministic", derandomize=True, deadline=None, print_blob=True)
    settings.load_profile("deterministic")
except ImportError:  # hypothesis is a test dependency; without it the property tests are not collected
    pass


# ---- tests never write tracked files -------------------------------------------------------------
# At session start the size and mtime of every file git tracks are recorded; at the end any change
# fails the run and names the files (docs/img screenshots come from scripts/make_doc_images.py,
# which points GPUPLAN_DOC_IMAGES at the folder it is allowed to write; GPUPLAN_UPDATE_SNAPSHOTS=1
# may rewrite tests/snapshots).

def tracked_snapshot(root: Path) -> dict[str, tuple[int, int]] | None:
    """{path: (mtime_ns, size)} of the files git tracks under `root`; None outside a git checkout."""
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    snap = {}
    for name in out.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if name:
            try:
                st = (root / name).stat()
            except OSError:
                continue
            snap[name] = (st.st_mtime_ns, st.st_size)
    return snap


def changed_files(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                  allowed: tuple[str, ...] = ()) -> list[str]:
    """Tracked files whose size or mtime changed, or that disappeared (except under the `allowed` prefixes)."""
    return sorted(name for name, stamp in before.items()
                  if after.get(name) != stamp and not name.startswith(tuple(allowed)))


def _allowed_prefixes() -> tuple[str, ...]:
    """Folders a run was explicitly asked to rewrite: GPUPLAN_DOC_IMAGES (scripts/make_doc_images.py) and
    the launch snapshots under GPUPLAN_UPDATE_SNAPSHOTS=1."""
    allowed = ["tests/snapshots/"] if os.environ.get("GPUPLAN_UPDATE_SNAPSHOTS") == "1" else []
    target = os.environ.get("GPUPLAN_DOC_IMAGES")
    if target:
        try:
            allowed.append(Path(target).resolve().relative_to(ROOT).as_posix().rstrip("/") + "/")
        except ValueError:
            pass
    return tuple(allowed)


def pytest_sessionstart(session):
    session.config._gpuplan_tracked = tracked_snapshot(ROOT)


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_gpuplan_tracked", None)
    if not before:
        return
    changed = changed_files(before, tracked_snapshot(ROOT) or {}, _allowed_prefixes())
    if changed:
        import sys
        shown = ", ".join(changed[:20]) + (f" and {len(changed) - 20} more" if len(changed) > 20 else "")
        print(f"\nERROR: the test run wrote tracked files: {shown}. Tests must write only under tmp_path.",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

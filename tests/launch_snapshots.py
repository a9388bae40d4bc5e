"""The generated launch files kept in tests/snapshots/launch, read back one file at a time (shared by the
flag-table and real-parser tests)."""
from __future__ import annotations

import re
from pathlib import Path

SNAP = Path(__file__).parent / "snapshots" / "launch"


def snapshot_files() -> list[tuple[str, str, str]]:
    """(snapshot name, file name, text) of every generated file in tests/snapshots/launch."""
    out = []
    for path in sorted(SNAP.glob("*.txt")):
        parts = re.split(r"^==> (.+?) <==\n", path.read_text(encoding="utf-8"), flags=re.M)
        out += [(path.stem, name, text) for name, text in zip(parts[1::2], parts[2::2])]
    return out


def check_snapshot(text: str, path: Path) -> None:
    """The generated text must equal the kept snapshot; GPUPLAN_UPDATE_SNAPSHOTS=1 rewrites it instead (a
    missing snapshot fails: it is never created silently by a test run)."""
    import os
    if os.environ.get("GPUPLAN_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; create it with GPUPLAN_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed; rerun with GPUPLAN_UPDATE_SNAPSHOTS=1 if intended"

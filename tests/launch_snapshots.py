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

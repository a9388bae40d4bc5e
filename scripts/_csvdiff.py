"""Shared by the refresh scripts: render rows as the catalog's CSV text, show what a refresh would
change (a per-id summary and a unified diff), and write only when asked (--write).

A refresh is: read a source, rebuild the CSV in memory, compare with the file in the package, print the
difference, and leave the file alone unless --write is given. Rows are keyed by their first column.
"""
from __future__ import annotations

import csv
import difflib
import io
from pathlib import Path


def render(columns: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({c: row.get(c, "") for c in columns})
    return out.getvalue()


def _keyed(text: str, key: tuple[str, ...]) -> dict[tuple, dict]:
    rows = list(csv.DictReader(io.StringIO(text)))
    return {tuple(r.get(k, "") for k in key): r for r in rows}


def summary(old_text: str, new_text: str, key: tuple[str, ...]) -> dict[str, list]:
    """{'added': [...], 'removed': [...], 'changed': [(key, [columns])]} between two CSV texts."""
    old, new = _keyed(old_text, key), _keyed(new_text, key)
    changed = []
    for k in sorted(set(old) & set(new)):
        cols = [c for c in new[k] if old[k].get(c, "") != new[k].get(c, "")]
        if cols:
            changed.append((k, cols))
    return {"added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)), "changed": changed}


def report(path: Path, new_text: str, key: tuple[str, ...], *, write: bool, max_diff_lines: int = 400) -> str:
    """Human-readable account of a refresh of `path`; writes `new_text` there only when `write`."""
    old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    if old_text == new_text:
        return f"{path.name}: unchanged ({new_text.count(chr(10)) - 1} rows)."
    s = summary(old_text, new_text, key)
    label = lambda k: "/".join(x for x in k if x)  # noqa: E731
    lines = [f"{path.name}: {len(s['added'])} added, {len(s['removed'])} removed, {len(s['changed'])} changed"]
    lines += [f"  + {label(k)}" for k in s["added"]]
    lines += [f"  - {label(k)}" for k in s["removed"]]
    lines += [f"  ~ {label(k)}: {', '.join(cols)}" for k, cols in s["changed"]]
    diff = list(difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), f"a/{path.name}",
                                     f"b/{path.name}", n=0, lineterm=""))
    lines += diff[:max_diff_lines]
    if len(diff) > max_diff_lines:
        lines.append(f"... {len(diff) - max_diff_lines} more diff lines")
    if write:
        path.write_text(new_text, encoding="utf-8")
        lines.append(f"wrote {path}")
    else:
        lines.append("dry run: nothing written (pass --write to rewrite the file)")
    return "\n".join(lines)

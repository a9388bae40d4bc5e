"""Shared by scripts/engine_facts_*.py: the engine-flag table and helpers to read Python sources.

The table, src/gpuplan/launch/data/engine_flags.csv, holds one row per option of an engine at one
pinned version: engine, version, flag, kind (bool | int | float | str | choice | list), choices
(';'-joined, for kind choice), aliases (';'-joined other spellings), source_url (the file at the
pinned tag or commit), retrieved (date read) and method (extracted: written by a script from the
engine's own source; read: entered from the cited file by hand where the script could not run).
Each script replaces the rows of its engine and leaves the others.
"""
from __future__ import annotations

import argparse
import ast
import csv
import datetime as _dt
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src" / "gpuplan" / "launch" / "data" / "engine_flags.csv"
COLUMNS = ["engine", "version", "flag", "kind", "choices", "aliases", "source_url", "retrieved", "method"]


def today() -> str:
    return _dt.date.today().isoformat()


def write_rows(engine: str, rows: list[dict], table: Path = TABLE) -> int:
    """Replace `engine`'s rows in the table with `rows` (sorted); returns how many were written."""
    keep = []
    if table.exists():
        with table.open(newline="", encoding="utf-8") as f:
            keep = [r for r in csv.DictReader(f) if r["engine"] != engine]
    seen, new = set(), []
    for r in rows:
        key = (r["engine"], r["version"], r["flag"])
        if key not in seen:
            seen.add(key)
            new.append({c: r.get(c, "") for c in COLUMNS})
    out = sorted(keep + new, key=lambda r: (r["engine"], r["version"], r["flag"]))
    table.parent.mkdir(parents=True, exist_ok=True)
    with table.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    return len(new)


def literal(node: ast.AST):
    """The Python value of a constant expression, or None when it is not one."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def annotation_kind(node: ast.AST | None) -> tuple[str, list[str]]:
    """(kind, choices) of a type annotation: Optional[X] -> X; Literal[...] -> choice; list[...] -> list."""
    if node is None:
        return "str", []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):        # a string annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return "str", []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):      # X | None
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        return annotation_kind(parts[0]) if len(parts) == 1 else ("str", [])
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        inner = node.slice
        if head == "Optional":
            return annotation_kind(inner)
        if head == "Literal":
            items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            vals = [literal(i) for i in items]
            return "choice", [str(v) for v in vals if v is not None]
        if head in ("list", "List", "tuple", "Tuple"):
            return "list", []
        if head == "Union":
            items = [i for i in (inner.elts if isinstance(inner, ast.Tuple) else [inner])
                     if not (isinstance(i, ast.Constant) and i.value is None)]
            return annotation_kind(items[0]) if len(items) == 1 else ("str", [])
        if head in ("Annotated", "A"):
            first = inner.elts[0] if isinstance(inner, ast.Tuple) else inner
            return annotation_kind(first)
        return "str", []
    name = ast.unparse(node).split(".")[-1]
    return {"bool": "bool", "int": "int", "float": "float", "str": "str"}.get(name, "str"), []


def kind_of_type(node: ast.AST | None) -> str:
    """argparse type=... -> kind."""
    name = ast.unparse(node).split(".")[-1] if node is not None else "str"
    return {"int": "int", "float": "float", "str": "str"}.get(name, "str")


class PinnedCheckout:
    """An engine's git repository (a clone or a bare mirror) read at one pinned tag or commit: the commit
    it names, the version label the table keeps ("v0.2.2 (73a0e697)") and its files at that ref."""

    def __init__(self, git_dir: str, ref: str):
        self.git_dir, self.ref = git_dir, ref
        self.commit = self.git("rev-list", "-n1", ref).strip()

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", self.git_dir, *args], check=True, capture_output=True, text=True).stdout

    @property
    def version(self) -> str:
        return f"{self.ref} ({self.commit[:8]})"

    def show(self, path: str) -> str:
        return self.git("show", f"{self.ref}:{path}")

    def ls(self, folder: str) -> list[str]:
        return self.git("ls-tree", "--name-only", f"{self.ref}:{folder}").split()

    def url(self, repo: str, path: str, at_tag: bool = False) -> str:
        return f"https://github.com/{repo}/blob/{self.ref if at_tag else self.commit}/{path}"


def pinned_checkout(doc: str, default_ref: str, option: str = "--tag") -> PinnedCheckout:
    """The command line every extraction script takes: the repository, and the ref to read it at."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("git_dir", help="a clone or bare mirror of the engine's repository")
    ap.add_argument(option, dest="ref", default=default_ref, help="the tag or commit to read")
    a = ap.parse_args()
    return PinnedCheckout(a.git_dir, a.ref)

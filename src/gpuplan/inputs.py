"""Safe reading of the files users hand us: scenarios (YAML/JSON) and JSON profiles.

Only regular files, at most MAX_INPUT_BYTES, are read; the file type is checked before opening and
the open never blocks (a FIFO or a device never hangs or floods us). YAML duplicate keys are refused,
as are anchors/aliases that would expand beyond MAX_YAML_NODES nodes (the "billion laughs" bomb).
JSON duplicate keys and the non-standard NaN/Infinity constants are refused too. Error messages quote
at most a short excerpt of the input, never the input itself.
"""
from __future__ import annotations

import json
import os
import reprlib
import stat
from pathlib import Path
from typing import Any

from .errors import InputError

MAX_INPUT_BYTES = 1 << 20          # 1 MiB: a scenario is ~1 KB, a calibration profile ~50 KB
MAX_YAML_NODES = 10_000            # nodes after alias expansion; a full scenario has ~150
MAX_YAML_ALIASES = 100
MAX_YAML_DEPTH = 32                # a scenario is 3 levels deep; an inline model config 4
EXCERPT_CHARS = 60

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxdict, _repr.maxlist, _repr.maxstring, _repr.maxother = 3, 4, 4, EXCERPT_CHARS, EXCERPT_CHARS


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short repr of any input (bounded work even on huge or deeply nested values)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"an integer with {len(str(abs(value)))} digits"
    text = _repr.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short_path(path: Any, limit: int = 200) -> str:
    text = str(path)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _fail(path: Any, what: str, why: str, fix: str) -> InputError:
    return InputError(f"{what} '{short_path(path)}'", why, fix)


def read_text_file(path: str | os.PathLike, what: str = "input file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a regular file of at most `max_bytes` (UTF-8), or a clear InputError."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(path, what, "does not exist.", "check the path (relative paths start at the current "
                    "directory).") from None
    except OSError as err:
        raise _fail(path, what, f"cannot be read ({err.strerror}).", "check the path and its permissions.") from None
    except ValueError:                                    # an embedded NUL byte
        raise _fail(excerpt(str(path)), what, "is not a valid path.", "pass the path of a .yaml or .json file.") \
            from None
    if stat.S_ISDIR(st.st_mode):
        raise _fail(path, what, "is a directory.", "pass a .yaml or .json file inside it.")
    if not stat.S_ISREG(st.st_mode):
        raise _fail(path, what, "is not a regular file (a pipe, socket or device).",
                    "save the content to a file and pass that file.")
    if st.st_size > max_bytes:
        raise _fail(path, what, f"is {st.st_size:,} bytes, over the {max_bytes:,}-byte ({max_bytes / 2**20:g} MiB) "
                    "limit for input files.", "pass the scenario or profile itself, not a data dump.")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise _fail(path, what, f"cannot be opened ({err.strerror}).", "check its permissions (it must be "
                    "readable by you).") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):   # swapped between stat and open
            raise _fail(path, what, "is not a regular file.", "pass a regular .yaml or .json file.")
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise _fail(path, what, f"is over the {max_bytes:,}-byte ({max_bytes / 2**20:g} MiB) limit for input files.",
                    "pass the scenario or profile itself, not a data dump.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _fail(path, what, f"is not UTF-8 text (byte {err.start}).", "save it as UTF-8 text (YAML or "
                    "JSON).") from None


# ---- YAML ------------------------------------------------------------------------------------------------

def _safe_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml's parser: a 1 MiB file in milliseconds

    class Loader(base):  # type: ignore[valid-type,misc]
        """SafeLoader that refuses duplicate keys and bounds alias expansion (checked on the node graph,
        before any Python object is built)."""

        def get_single_node(self):
            node = super().get_single_node()
            _check_expansion(node)
            return node

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        if key in seen:
                            raise _DuplicateKey(key, seen[key], line)
                        seen[key] = line
                    except TypeError:
                        continue          # unhashable key: the base class reports it
            return super().construct_mapping(node, deep=deep)

    return Loader


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


class _TooLarge(Exception):
    pass


def _check_expansion(root: Any) -> None:
    """Refuse documents whose aliases expand past MAX_YAML_NODES (or that refer to themselves)."""
    if root is None:
        return
    sizes: dict[int, int] = {}
    active: set[int] = set()
    aliases = 0

    def size(node: Any) -> int:
        nonlocal aliases
        key = id(node)
        if key in sizes:
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise _TooLarge(f"uses more than {MAX_YAML_ALIASES} aliases")
            return sizes[key]
        if key in active:
            raise _TooLarge("has an alias that refers to itself")
        active.add(key)
        total = 1
        value = node.value
        if isinstance(value, list):
            for item in value:
                for child in (item if isinstance(item, tuple) else (item,)):
                    total += size(child)
                    if total > MAX_YAML_NODES:
                        how = " through anchors and aliases" if aliases else ""
                        raise _TooLarge(f"expands{how} to more than {MAX_YAML_NODES:,} values")
        active.discard(key)
        sizes[key] = total
        return total

    size(root)


def _yaml_excerpt(text: str, line: int) -> str:
    lines = text.splitlines()
    return excerpt(lines[line].strip()) if 0 <= line < len(lines) else ""


def _count_events(text: str, loader: Any) -> None:
    """Stop a huge or deeply nested document early, before its node graph is built."""
    import yaml
    depth = 0
    for n, event in enumerate(yaml.parse(text, Loader=loader)):
        if n > 2 * MAX_YAML_NODES:
            raise _TooLarge(f"has more than {MAX_YAML_NODES:,} values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _TooLarge(f"is nested more than {MAX_YAML_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_yaml(text: str, source: str) -> Any:
    import yaml
    try:
        loader = _safe_loader()
        _count_events(text, loader)
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        lines = f"line {dup.again}" if dup.first == dup.again else f"lines {dup.first} and {dup.again}"
        raise InputError(source, f"sets the key {excerpt(dup.key)} twice ({lines}); "
                         "YAML keeps only the last, which silently drops the first.",
                         "delete one of the two lines.") from None
    except _TooLarge as big:
        raise InputError(source, f"{big}; a scenario needs a few dozen values.",
                         "write the scenario's values out plainly (no nested anchors and aliases, no data).") from None
    except RecursionError:
        raise InputError(source, "is nested too deeply.", "a scenario is at most a few levels deep.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "malformed"
        shown = _yaml_excerpt(text, mark.line) if mark else ""
        near = f" near {shown}" if shown else ""
        raise InputError(source, f"is not valid YAML{where}{near}: {excerpt(problem, 120)}.",
                         "fix the syntax (indentation, colons, quotes).") from None


# ---- JSON ------------------------------------------------------------------------------------------------

class _JsonProblem(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _JsonProblem(f"sets the key {excerpt(k)} twice in one object; JSON readers keep only the last, "
                               "which silently drops the first")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise _JsonProblem(f"contains {name}, which is not a JSON number (and no setting may be infinite or NaN)")


def parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except _JsonProblem as err:
        raise InputError(source, f"{err}.", "give each key once, with a finite number.") from None
    except json.JSONDecodeError as err:
        raise InputError(source, f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).",
                         "fix the syntax; a JSON linter shows the exact spot.") from None
    except RecursionError:
        raise InputError(source, "is nested too deeply.", "a scenario is at most a few levels deep.") from None


def parse_mapping_text(text: str, source: str, *, json_only: bool = False) -> dict:
    """Parse YAML (a superset of JSON) or, with json_only, strict JSON; the result must be a mapping."""
    data = parse_json(text, source) if json_only else parse_yaml(text, source)
    if data is None:
        raise InputError(source, "is empty.", "write at least `model:` and `hardware: {gpu: ...}`.")
    if not isinstance(data, dict):
        raise InputError(source, f"must be a mapping of fields, got a {type(data).__name__} "
                         f"({excerpt(data)}).", "write `key: value` lines at the top level.")
    return data


def read_mapping_file(path: str | os.PathLike, what: str = "scenario file") -> dict:
    """Read a YAML or JSON file (by suffix: .json is strict JSON) into a dict, safely (module docstring)."""
    text = read_text_file(path, what)
    source = f"{what} '{short_path(path)}'"
    return parse_mapping_text(text, source, json_only=Path(path).suffix.lower() == ".json")


# ---- request traces (serving under load) -------------------------------------------------------------

MAX_TRACE_BYTES = 64 << 20        # ~1.5 M requests of CSV
TRACE_FIELDS = ("arrival_s", "input_tokens", "output_tokens")


def _trace_row(path: Any, line: int, row: dict) -> dict:
    missing = [k for k in TRACE_FIELDS if row.get(k) in (None, "")]
    if missing:
        raise _fail(path, "trace file", f"line {line} has no {', '.join(missing)}.",
                    "give every request arrival_s (seconds), input_tokens and output_tokens.")
    out: dict[str, Any] = {}
    for k in TRACE_FIELDS:
        v = row[k]
        try:
            x = float(v) if not isinstance(v, bool) else float("nan")
        except (TypeError, ValueError):
            x = float("nan")
        ok = x == x and abs(x) != float("inf") and x >= (0 if k == "arrival_s" else 1)
        if ok and k != "arrival_s":
            ok = x.is_integer() and x <= 10_485_760
        if not ok:
            rule = "a finite number of seconds >= 0" if k == "arrival_s" else "a whole number of tokens, 1 to 10,485,760"
            raise _fail(path, "trace file", f"line {line}: {k} is {excerpt(v)}, not {rule}.",
                        f"fix {k} on line {line}.")
        out[k] = x if k == "arrival_s" else int(x)
    for k in ("prefix_id", "session_id"):
        if row.get(k) not in (None, ""):
            out[k] = str(row[k])
    return out


def read_trace_file(path: str | os.PathLike) -> list[dict]:
    """Requests of a load trace: CSV with a header row, or JSON Lines (one object per line), each with
    arrival_s, input_tokens, output_tokens (optional prefix_id / session_id are kept, unused)."""
    import csv
    import io
    text = read_text_file(path, "trace file", MAX_TRACE_BYTES)
    rows: list[dict] = []
    if Path(str(path)).suffix.lower() in (".jsonl", ".ndjson", ".json") or text.lstrip().startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = parse_json(line, f"trace file line {n}")
            except InputError:
                raise _fail(path, "trace file", f"line {n} is not a JSON object.",
                            "write one JSON object per line, e.g. {\"arrival_s\": 0.5, \"input_tokens\": 800, "
                            "\"output_tokens\": 200}.") from None
            if not isinstance(obj, dict):
                raise _fail(path, "trace file", f"line {n} is not a JSON object.", "write one object per line.")
            rows.append(_trace_row(path, n, obj))
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [k for k in TRACE_FIELDS if k not in header]
        if missing:
            raise _fail(path, "trace file", f"has no column {', '.join(missing)} (header: {excerpt(header)}).",
                        "start the CSV with the header arrival_s,input_tokens,output_tokens.")
        reader.fieldnames = header
        for n, row in enumerate(reader, 2):
            rows.append(_trace_row(path, n, row))
    if not rows:
        raise _fail(path, "trace file", "has no requests.", "add one request per line.")
    return rows

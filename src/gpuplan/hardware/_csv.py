"""Reading and validating catalog CSVs: every error names the file, row, column and the fix."""
from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from ..errors import InputError

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def data_path(name: str) -> Path:
    """Path of a CSV shipped in gpuplan/hardware/data/."""
    return Path(str(resources.files("gpuplan.hardware").joinpath("data", name)))


class Row:
    """One CSV row with typed getters that raise InputError naming file, row and column."""

    def __init__(self, source: str, line: int, values: dict[str, str]):
        self.source, self.line, self.values = source, line, values

    def fail(self, column: str, why: str, fix: str) -> InputError:
        return InputError(f"{self.source}, row {self.line}, column '{column}'", why, fix)

    def text(self, column: str, required: bool = True) -> str:
        value = (self.values.get(column) or "").strip()
        if required and not value:
            raise self.fail(column, "is empty.", f"fill in '{column}' (see docs/data.md for its meaning).")
        return value

    def number(self, column: str, required: bool = True, positive: bool = True) -> float | None:
        raw = self.text(column, required)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(column, f"'{raw}' is not a number.",
                            "write a plain decimal number without units (the unit is in the column name).") from None
        if positive and not value > 0:
            raise self.fail(column, f"{raw} must be greater than 0.",
                            "leave it blank if unknown or unsupported, never 0.")
        return value

    def integer(self, column: str, required: bool = True) -> int | None:
        value = self.number(column, required)
        if value is None:
            return None
        if value != int(value):
            raise self.fail(column, f"{value:g} is not a whole number.", "write an integer.")
        return int(value)

    def boolean(self, column: str, default: bool | None = None) -> bool:
        raw = self.text(column, required=default is None).lower()
        if not raw and default is not None:
            return default
        if raw in ("true", "yes", "1"):
            return True
        if raw in ("false", "no", "0"):
            return False
        raise self.fail(column, f"'{raw}' is not true/false.", "write true or false.")

    def choice(self, column: str, allowed: tuple[str, ...], required: bool = True) -> str:
        value = self.text(column, required).lower()
        if value and value not in allowed:
            raise self.fail(column, f"'{value}' is not one of {', '.join(allowed)}.", "use one of the listed values.")
        return value

    def provenance(self) -> tuple[str, str]:
        url = self.text("source_url")
        date = self.text("retrieved")
        if not _DATE.match(date):
            raise self.fail("retrieved", f"'{date}' is not a YYYY-MM-DD date.", "write the date the source was read.")
        return url, date


def read_rows(path: Path | str, required_columns: tuple[str, ...], label: str | None = None) -> Iterator[Row]:
    """Yield rows of a CSV after checking its header. Line numbers count the header as row 1."""
    path = Path(path)
    source = label or str(path)
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"catalog file '{source}'", f"cannot be read ({exc.strerror}).", "check the path",
                         local_fix="it is set by GPUPLAN_GPUS_CSV or use_user_catalog()") from None
    with fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required_columns if c not in header]
        if missing:
            raise InputError(f"{source}, header", f"is missing column(s) {', '.join(missing)}.",
                             f"add them; the expected columns are listed in docs/data.md "
                             f"(required: {', '.join(required_columns)}).")
        for line, values in enumerate(reader, start=2):
            values = {(k or "").strip(): v for k, v in values.items()}
            if not any((v or "").strip() for v in values.values() if isinstance(v, str)):
                continue
            yield Row(source, line, values)


def split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(";") if part.strip())


def split_notes(text: str) -> dict[str, str]:
    """'key: text | key: text' -> {key: text}; repeated keys are joined."""
    out: dict[str, str] = {}
    for item in text.split(" | "):
        if ":" not in item:
            continue
        key, note = item.split(":", 1)
        key = key.strip()
        out[key] = f"{out[key]}; {note.strip()}" if key in out else note.strip()
    return out

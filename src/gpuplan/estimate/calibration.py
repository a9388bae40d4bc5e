"""The speed engine's calibrated factors (estimate/data/efficiency.json), frozen.

`scripts/calibrate_speed.py` writes the file; the engine only reads it. A `Calibration` is a
read-only mapping (nested tables are Calibrations, JSON lists tuples), so no caller can change the
packaged factors for everyone else; a key the engine needs and the file lacks is a
`CalibrationKeyError` naming the key and the file, never a silent default. `thaw()` (or
`copy.deepcopy`) gives a mutable plain-dict copy to edit, e.g. to fold in a measured profile.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

PACKAGED_FILE = "estimate/data/efficiency.json"


class CalibrationKeyError(KeyError):
    """A key the speed engine reads is missing from the calibration data."""

    def __init__(self, key: str, path: str, source: str):
        self.key, self.path, self.source = key, path, source
        super().__init__(key)

    def __str__(self) -> str:
        where = f"{self.path}.{self.key}" if self.path else self.key
        return (f"calibration key '{where}' is missing from {self.source}; re-run scripts/calibrate_speed.py "
                f"or add the key to the file")


class Calibration(Mapping):
    """Read-only, recursively frozen view of calibration data."""

    __slots__ = ("_data", "_path", "_source")

    def __init__(self, data: Mapping[str, Any], source: str = PACKAGED_FILE, path: str = ""):
        self._source, self._path = source, path
        self._data = {str(k): _freeze(v, source, f"{path}.{k}" if path else str(k)) for k, v in data.items()}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._data[key]
        except KeyError:
            raise CalibrationKeyError(key, self._path, self._source) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Calibration({self.thaw()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and thaw(self) == thaw(other)

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict) -> dict[str, Any]:
        return self.thaw()

    def __copy__(self) -> dict[str, Any]:
        return self.thaw()

    def thaw(self) -> dict[str, Any]:
        """A mutable deep copy (plain dicts and lists)."""
        return thaw(self)

    @property
    def source(self) -> str:
        return self._source


def _freeze(value: Any, source: str, path: str) -> Any:
    if isinstance(value, Mapping):
        return Calibration(value, source, path)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, source, path) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Mutable deep copy of a (possibly frozen) calibration value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _deep_merge(dst: dict, src: Mapping) -> None:
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _deep_merge(dst[k], v)
        else:
            dst[k] = thaw(v)


@lru_cache(maxsize=1)
def packaged() -> Calibration:
    """The packaged factors (read once)."""
    text = resources.files("gpuplan").joinpath(PACKAGED_FILE).read_text(encoding="utf-8")
    return Calibration(json.loads(text))


def load_efficiency(override: Mapping[str, Any] | None = None) -> Calibration:
    """The packaged factors, optionally with a (deep-merged) override, frozen."""
    if not override:
        return packaged()
    base = thaw(packaged())
    _deep_merge(base, override)
    return Calibration(base, source=f"{PACKAGED_FILE} + override")


def family_entry(table: Mapping[str, Any], family: str) -> Any:
    """A per-GPU-family entry, or the table's 'default' entry for a family it does not list."""
    return table[family] if family in table else table["default"]

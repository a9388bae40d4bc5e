"""The estimate layer's packaged tables (estimate/data/*.csv: measured kernel rates, tuned engine configs), read
through one function."""
from __future__ import annotations

import csv
import io
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def rows(name: str) -> tuple[dict[str, str], ...]:
    """The rows of estimate/data/`name` (a CSV with a header line), read once per process."""
    text = resources.files("gpuplan.estimate").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return tuple(csv.DictReader(io.StringIO(text)))

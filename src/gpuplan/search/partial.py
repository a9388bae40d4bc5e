"""The search's input: a partial scenario (hardware and layout may be left open), read and checked.

Validation is `scenario.PartialScenario`: the same fields, ranges and messages as a full Scenario,
with the searched options allowed as lists (deduplicated, at most scenario.MAX_LIST entries).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError
from ..inputs import read_mapping_file, short_path
from ..scenario import Scenario, partial_from_dict
from ..validate import check_partial_against_model


def _partial(scenario_or_partial: Any) -> dict[str, Any]:
    """A validated partial-scenario dict from a Scenario, a mapping or a file path."""
    if isinstance(scenario_or_partial, Scenario):
        data = scenario_or_partial.model_dump(exclude_unset=True)
        for extra in ("constraints", "objective", "preset"):
            v = getattr(scenario_or_partial, extra, None)
            if v is not None:
                data[extra] = v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v
        return partial_from_dict(data)
    if isinstance(scenario_or_partial, Mapping):
        return partial_from_dict(json_copy(dict(scenario_or_partial)))
    from pathlib import Path
    if isinstance(scenario_or_partial, (str, Path)):
        return partial_from_dict(load_partial(scenario_or_partial), f"file '{short_path(scenario_or_partial)}'")
    raise InputError("recommend input", f"cannot use a {type(scenario_or_partial).__name__}.",
                     "pass a Scenario, a dict or a scenario file path.")


def json_copy(d: Any) -> Any:
    """A mutable deep copy (mappings -> dicts, sequences -> lists) that the search may edit."""
    from ..estimate.calibration import thaw
    return thaw(d)


def load_partial(path: Any) -> dict[str, Any]:
    """Read a scenario file (safely, see gpuplan.inputs) without requiring hardware or a layout."""
    return read_mapping_file(path, "scenario file")


def _validate_fixed(data: dict[str, Any]) -> None:
    """Validate a partial scenario in place: the same checks and messages as a Scenario, and its fixed
    lengths against the model's context; values are replaced by their validated form (YAML reads
    1.0e12 as a string, pydantic makes it a float)."""
    checked = partial_from_dict(data)
    from ..models import get_model
    check_partial_against_model(checked, get_model(checked["model"]))
    data.clear()
    data.update(checked)

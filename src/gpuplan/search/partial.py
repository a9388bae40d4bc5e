"""Reading the search's input: a partial scenario (a Scenario, a mapping or a file) whose hardware
and layout may be left open, and the check of its fixed part."""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError
from ..scenario import Scenario, scenario_from_dict
from . import space as S


def _partial(scenario_or_partial: Any) -> dict[str, Any]:
    if isinstance(scenario_or_partial, Scenario):
        data = scenario_or_partial.model_dump(exclude_unset=True)
        for extra in ("constraints", "objective", "preset"):
            v = getattr(scenario_or_partial, extra, None)
            if v is not None:
                data[extra] = v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v
        return data
    if isinstance(scenario_or_partial, Mapping):
        return json_copy(dict(scenario_or_partial))
    from pathlib import Path
    if isinstance(scenario_or_partial, (str, Path)):
        return load_partial(scenario_or_partial)
    raise InputError("recommend input", f"cannot use a {type(scenario_or_partial).__name__}.",
                     "pass a Scenario, a dict or a scenario file path.")


def json_copy(d: Any) -> Any:
    if isinstance(d, Mapping):
        return {k: json_copy(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [json_copy(v) for v in d]
    return d


def load_partial(path: Any) -> dict[str, Any]:
    """Read a scenario file without validating it (hardware and layout may be left open)."""
    import json
    from pathlib import Path
    p = Path(path)
    if not p.exists():
        raise InputError(f"scenario file '{path}'", "does not exist.", "check the path.")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text)
    except Exception as err:
        raise InputError(f"scenario file '{path}'", f"cannot be parsed: {err}.", "fix the syntax.") from None
    if not isinstance(data, dict):
        raise InputError(f"scenario file '{path}'", "is not a mapping of fields.", "write `model:` and `task:`.")
    return data


def _validate_fixed(data: dict[str, Any]) -> None:
    """Validate the fixed part of the partial scenario now, so a typo fails with the usual message."""
    probe = json_copy(data)
    probe["hardware"] = {"gpu": "h100-sxm", "count": 1}
    probe.pop("parallel", None)
    for section, opts in (("train", S.TRAIN_OPTIONS), ("infer", S.INFER_OPTIONS)):
        if isinstance(probe.get(section), dict):
            probe[section] = {k: v for k, v in probe[section].items() if k not in opts}
    scn = scenario_from_dict(probe, "(recommend input)")
    # take the validated (coerced) values back: YAML reads 1.0e12 as a string, pydantic makes it a float
    for section in ("train", "infer"):
        given, parsed = data.get(section), getattr(scn, section)
        if isinstance(given, dict) and parsed is not None:
            for k in list(given):
                if k in probe.get(section, {}):
                    given[k] = getattr(parsed, k)

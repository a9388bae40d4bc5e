"""Request bodies of the web API, with the web server's bounds on work (issue 16).

A scenario field may hold a list of allowed values in a recommend/compare request; the search
multiplies them. Here, before any search runs: every list is deduplicated and holds at most
MAX_LIST entries of plain values, each value is checked against the scenario field's own type,
numbers are finite and inside sane ranges, and the product of the list sizes is at most
MAX_CANDIDATES — the error names the lists and how to narrow them.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from ..scenario import Constraints, Scenario
from .jobs import DEFAULT_CONCURRENCIES, excerpt

MAX_LIST = 64
MAX_CANDIDATES = 100_000
MAX_DEPTH = 8                      # nesting of a partial scenario (sections hold lists of plain values)
SECTIONS = ("hardware", "parallel", "train", "infer")
# (section, field): the sane range of a number, with the reason in the error message
RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("hardware", "count"): (1, 65_536), ("hardware", "gpus_per_node"): (1, 1024),
    ("parallel", "dp"): (1, 65_536), ("parallel", "tp"): (1, 1024), ("parallel", "pp"): (1, 1024),
    ("parallel", "cp"): (1, 1024), ("parallel", "ep"): (1, 1024), ("parallel", "vpp"): (1, 1024),
    ("parallel", "shard_group"): (1, 65_536),
    ("train", "seq_len"): (1, 10_000_000), ("train", "micro_batch"): (1, 65_536),
    ("train", "global_batch"): (1, 100_000_000), ("train", "lora_rank"): (1, 65_536),
    ("train", "lora_alpha"): (1, 1_000_000), ("train", "tokens"): (1, 1e16), ("train", "loss_chunks"): (1, 65_536),
    ("infer", "prompt_len"): (1, 10_000_000), ("infer", "output_len"): (1, 10_000_000),
    ("infer", "concurrency"): (1, 1_000_000), ("infer", "max_model_len"): (1, 10_000_000),
    ("infer", "gpu_layers"): (0, 100_000), ("infer", "max_num_seqs"): (1, 1_000_000),
    ("infer", "max_num_batched_tokens"): (1, 100_000_000), ("", "overhead_bytes"): (0, 1e15),
}
_SECTION_MODELS = {name: Scenario.model_fields[name].annotation for name in SECTIONS}
# the fields the search can vary (docs/recommend.md §1): only these may hold a list of values or an
# open word ("auto"); every other field takes one value of its own type
OPTION_FIELDS = {
    "hardware": ("gpu", "count"),
    "parallel": ("tp", "pp", "cp", "ep", "zero", "offload"),
    "train": ("method", "recompute", "micro_batch", "optimizer", "precision", "attention"),
    "infer": ("engine", "weights", "kv_cache"),
}
OPEN_WORDS = ("auto", "any", "open")


class BodyError(ValueError):
    """A bound of this module, raised inside a pydantic validator (the app turns it into a 422)."""


def _section_model(section: str) -> Any:
    ann = _SECTION_MODELS[section]
    return next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), ann)


def _adapter(section: str, name: str) -> TypeAdapter | None:
    field = _section_model(section).model_fields.get(name)
    if field is None:
        return None
    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)


def _check_number(where: str, value: Any, key: tuple[str, str]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise BodyError(f"'{where}' is {value}; it must be a finite number")
    lo, hi = RANGES.get(key, (-1e18, 1e18))
    if not lo <= value <= hi:
        raise BodyError(f"'{where}' is {excerpt(value, 40)}; the web server accepts {_num(lo)} to {_num(hi)}")


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e13 else f"{x:g}"


def _plain(where: str, value: Any, depth: int = 0) -> None:
    """No non-finite or absurd number and no deep nesting anywhere in a partial scenario."""
    if depth > MAX_DEPTH:
        raise BodyError(f"'{where}' is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        for k, v in value.items():
            _plain(f"{where}.{excerpt(k, 40)}", v, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _plain(f"{where}[{i}]", v, depth + 1)
    else:
        _check_number(where, value, ("", ""))


def _dedup(values: list[Any]) -> list[Any]:
    seen, out = set(), []
    for v in values:
        key = (type(v) is bool, v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _option_values(where: str, section: str, name: str, value: Any) -> list[Any]:
    """A field's allowed values: each checked against the scenario field's type and range."""
    option = name in OPTION_FIELDS[section]
    if isinstance(value, list) and not option:
        raise BodyError(f"'{where}' takes one value, not a list (the search varies only "
                        f"{', '.join(section + '.' + f for f in OPTION_FIELDS[section])})")
    adapter = _adapter(section, name)
    if isinstance(value, dict) and not option and adapter is not None:
        # a sub-section (infer.load, infer.speculative, train.rl): one value, validated whole; its numbers
        # and depth are bounded with the rest of the body (_plain)
        try:
            adapter.validate_python(value)
        except ValidationError as err:
            e = err.errors()[0] if err.errors() else {}
            loc = ".".join(str(x) for x in e.get("loc", ()))
            raise BodyError(f"'{where}{'.' + loc if loc else ''}': {e.get('msg', 'is invalid')}") from None
        return [value]
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, (dict, list)):
            raise BodyError(f"'{where}' must be a value or a list of plain values, not a nested {type(v).__name__}")
        if option and (v is None or isinstance(v, str) and v.strip().lower() in OPEN_WORDS):
            continue
        _check_number(where, v, (section, name))
        if adapter is not None:
            try:
                adapter.validate_python(v)
            except ValidationError as err:
                msg = err.errors()[0].get("msg", "is invalid") if err.errors() else "is invalid"
                raise BodyError(f"'{where}' value {excerpt(repr(v), 60)}: {msg}") from None
    return values


def check_partial(scenario: dict[str, Any], prefix: str = "scenario") -> tuple[dict[str, Any], dict[str, int]]:
    """The partial scenario with its lists deduplicated, and the size of every list ({where: n})."""
    out, sizes = dict(scenario), {}
    for section in SECTIONS:
        body = out.get(section)
        if body is None:
            continue
        if not isinstance(body, dict):
            raise BodyError(f"'{prefix}.{section}' must be an object of fields, not {type(body).__name__}")
        body = dict(body)
        for name, value in body.items():
            where = f"{prefix}.{section}.{excerpt(name, 40)}"
            if section == "train" and name == "lora_targets":
                continue                           # a list of module names, not a list of options
            values = _option_values(where, section, name, value)
            if isinstance(value, list):
                values = _dedup(values)
                if len(values) > MAX_LIST:
                    raise BodyError(f"'{where}' lists {len(values)} distinct values; the web server accepts at "
                                    f"most {MAX_LIST} per list")
                if values:
                    sizes[where] = len(values)
                body[name] = values
        out[section] = body
    if out.get("constraints") is not None:
        try:
            ConstraintsBody.model_validate(out["constraints"])
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(excerpt(x, 40) for x in (prefix, "constraints", *e.get("loc", ())))
            raise BodyError(f"'{where}' {e.get('msg', 'is invalid')}") from None
    for key in RANGES:
        if key[0] == "":
            _check_number(f"{prefix}.{key[1]}", out.get(key[1]), key)
    _plain(prefix, out)
    return out, sizes


def check_budget(sizes: dict[str, int]) -> None:
    total = math.prod(sizes.values()) if sizes else 1
    if total > MAX_CANDIDATES:
        lists = ", ".join(f"{k} ({n})" for k, n in sorted(sizes.items(), key=lambda kv: -kv[1]))
        raise BodyError(f"the option lists multiply to {total:,} combinations, more than the web server's budget of "
                        f"{MAX_CANDIDATES:,} (lists: {lists}); narrow the longest lists, fix some fields to one value, "
                        f"or run `gpuplan recommend` locally")


def check_scenario(scn: Scenario) -> Scenario:
    """The sane ranges on a full scenario (estimate, serving curve, launch)."""
    data = scn.model_dump()
    for (section, name) in RANGES:
        holder = data if section == "" else (data.get(section) or {})
        where = name if section == "" else f"{section}.{name}"
        value = holder.get(name)
        if value is not None:
            _check_number(where, value, (section, name))
    return scn


# ---- bodies ---------------------------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


Concurrency = Annotated[int, Field(gt=0, le=100_000)]
GpuId = Annotated[str, Field(max_length=64)]


class ServingCurveRequest(_Body):
    scenario: Scenario = Field(description="an inference scenario (task: infer)")
    concurrencies: Optional[list[Concurrency]] = Field(
        None, min_length=1, max_length=64, description=f"concurrent requests to evaluate; default {list(DEFAULT_CONCURRENCIES)}")

    @field_validator("scenario")
    @classmethod
    def _ranges(cls, v: Scenario) -> Scenario:
        return check_scenario(v)


class LaunchRequest(_Body):
    scenario: Scenario
    engine: str = Field(max_length=64, description="launch engine: torchrun, hf, deepspeed, megatron, vllm, sglang, trtllm, llama.cpp, slurm")
    inner: Optional[str] = Field(None, max_length=64, description="for engine slurm: the training engine it wraps")
    include_estimate: bool = Field(True, description="put the plan's predicted memory/speed/cost in the file headers")

    @field_validator("scenario")
    @classmethod
    def _ranges(cls, v: Scenario) -> Scenario:
        return check_scenario(v)


FiniteNonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
FinitePos = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Usd = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=86_400, allow_inf_nan=False)]
Rate = Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]


# The one Constraints model (scenario.py): the same fields, ranges and name checks as a scenario file's
# `constraints:` block and the CLI's flags.
ConstraintsBody = Constraints


Objective = Union[Annotated[str, Field(max_length=64)], dict[Annotated[str, Field(max_length=32)], FiniteNonNeg]]


class _SearchBody(_Body):
    @model_validator(mode="after")
    def _bounded(self):
        data, sizes = check_partial(self.scenario)
        gpus = getattr(self, "gpus", None)
        if gpus:
            self.gpus = _dedup(gpus)
            sizes["gpus"] = len(self.gpus)
        check_budget(sizes)
        self.scenario = data
        return self


class RecommendRequest(_SearchBody):
    scenario: dict[str, Any] = Field(description="partial scenario: model and task, plus any settings you fix; hardware "
                                                 "and layout may be left out, or given as lists of allowed values "
                                                 f"(each list at most {MAX_LIST} distinct values, their product at most "
                                                 f"{MAX_CANDIDATES:,})")
    objective: Optional[Objective] = Field(None, description="cheapest, fastest, cost_per_token, or weights like {\"cost\": 0.5, \"time\": 0.5}")
    top: int = Field(10, ge=1, le=100, description="how many plans to return")
    preset: Optional[str] = Field(None, max_length=64, description="use case: research-budget, startup, enterprise-serving, large-pretraining")
    gpus: Optional[list[GpuId]] = Field(None, min_length=1, max_length=MAX_LIST, description="GPU ids to search (default: the catalog)")
    constraints: ConstraintsBody = Field(default_factory=ConstraintsBody)

    def options(self) -> dict[str, Any]:
        return {"objective": self.objective, "top": self.top, "preset": self.preset, "gpus": self.gpus,
                **self.constraints.model_dump(exclude_none=True)}


class CompareRequest(_SearchBody):
    scenario: dict[str, Any] = Field(description="the workload: model, task and settings (hardware count optional)")
    gpus: list[GpuId] = Field(min_length=1, max_length=16, description="GPU ids to compare")
    objective: Optional[Objective] = None
    preset: Optional[str] = Field(None, max_length=64)
    constraints: ConstraintsBody = Field(default_factory=ConstraintsBody)
    steps: Optional[int] = Field(None, ge=1, le=10_000_000, description="RL objectives (grpo, ppo, rloo): the steps each "
                                 "GPU type's cheapest placement is priced for (default 1000)")

    def options(self) -> dict[str, Any]:
        return {"objective": self.objective, "preset": self.preset, "steps": self.steps,
                **self.constraints.model_dump(exclude_none=True)}

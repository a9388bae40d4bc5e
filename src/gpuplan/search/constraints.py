"""The user's limits on a plan. Each check returns the reason a plan fails it, or None.

Reasons are written for people: "misses the deadline by 2.3 days", "costs $41,200, $6,200 over
the $35,000 budget", "TPOT 61 ms exceeds the 50 ms target".
"""
from __future__ import annotations

import dataclasses
from dataclasses import fields, replace
from typing import Any, Mapping

from pydantic import ValidationError

from ..errors import InputError, close_matches
from ..scenario import Constraints as ConstraintsModel
from ..scenario import _explain
from ..units import DAY_S


class _ConstraintsMethods:
    """Behaviour of the search's Constraints; its fields, ranges and checks are scenario.Constraints'."""

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        for name, value in given.items():
            if isinstance(value, Mapping):
                given[name] = dict(value)
            elif isinstance(value, tuple):
                given[name] = list(value)
        try:
            checked = ConstraintsModel.model_validate(given)
        except ValidationError as err:
            raise _explain(err, "", ConstraintsModel, what="constraints") from None
        for name in given:
            value = getattr(checked, name)
            object.__setattr__(self, name, tuple(value) if isinstance(value, list) else value)

    def merged(self, **overrides: Any) -> "Constraints":
        """A copy with every non-None override applied (explicit arguments beat presets and files)."""
        known = [f.name for f in fields(self)]
        bad = [k for k in overrides if k not in known]
        if bad:
            raise InputError(f"constraint(s) {', '.join(bad)}", "are not known.",
                             f"use {', '.join(sorted(known))}.", close_matches(bad[0], known))
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = dict(v) if isinstance(v, Mapping) else (list(v) if isinstance(v, tuple) else v)
        return out

    @property
    def deadline_s(self) -> float | None:
        return None if self.deadline_days is None else self.deadline_days * DAY_S

    def requested_output_tokens_per_s(self, output_len: int) -> float | None:
        """Serving throughput target in output tokens/s (requests/s x output length, or given)."""
        targets = []
        if self.tokens_per_s:
            targets.append(self.tokens_per_s)
        if self.requests_per_s:
            targets.append(self.requests_per_s * output_len)
        return max(targets) if targets else None


# A frozen dataclass (recommend uses dataclasses.replace) whose fields are those of the pydantic
# scenario.Constraints, all defaulting to None; every construction is validated by that model.
# `providers` is held as a tuple, `owned` as {catalog gpu id: count}.
Constraints = dataclasses.make_dataclass(
    "Constraints", [(name, Any, dataclasses.field(default=None)) for name in ConstraintsModel.model_fields],
    bases=(_ConstraintsMethods,), frozen=True, namespace={"__module__": __name__})


def _usd(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _dur(seconds: float) -> str:
    if seconds >= 2 * DAY_S:
        return f"{seconds / DAY_S:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def check_time(c: Constraints, time_to_train_s: float | None) -> str | None:
    if c.deadline_s is None or time_to_train_s is None:
        return None
    if time_to_train_s > c.deadline_s:
        return (f"misses the deadline by {_dur(time_to_train_s - c.deadline_s)} "
                f"(takes {_dur(time_to_train_s)}, deadline {c.deadline_days:g} days)")
    return None


def check_money(c: Constraints, usd_per_hour: float | None, usd_total: float | None) -> str | None:
    if c.budget_usd_per_hour is not None:
        if usd_per_hour is None:
            return "has no price, so the hourly budget cannot be checked"
        if usd_per_hour > c.budget_usd_per_hour:
            return (f"costs {_usd(usd_per_hour)}/h, {_usd(usd_per_hour - c.budget_usd_per_hour)}/h over the "
                    f"{_usd(c.budget_usd_per_hour)}/h budget")
    if c.budget_usd is not None and usd_total is not None and usd_total > c.budget_usd:
        return f"costs {_usd(usd_total)}, {_usd(usd_total - c.budget_usd)} over the {_usd(c.budget_usd)} budget"
    return None


def check_serving(c: Constraints, ttft_s: float | None, tpot_s: float | None) -> str | None:
    if c.ttft_s is not None and (ttft_s is None or ttft_s > c.ttft_s):
        got = "-" if ttft_s is None else f"{ttft_s * 1e3:,.0f} ms"
        return f"TTFT {got} exceeds the {c.ttft_s * 1e3:,.0f} ms target"
    if c.tpot_s is not None and (tpot_s is None or tpot_s > c.tpot_s):
        got = "-" if tpot_s is None else f"{tpot_s * 1e3:,.1f} ms"
        return f"TPOT {got} exceeds the {c.tpot_s * 1e3:,.1f} ms target"
    return None


def check_gpus(c: Constraints, gpu_id: str, count: int) -> str | None:
    if c.max_gpus is not None and count > c.max_gpus:
        return f"needs {count} GPUs, more than max_gpus={c.max_gpus}"
    if c.owned is not None and gpu_id in c.owned and count > c.owned[gpu_id]:
        return f"needs {count} x {gpu_id}, you own {c.owned[gpu_id]}"
    return None


def memory_reason(peak: float, capacity: float, headroom: float | None) -> str:
    from ..units import GiB
    limit = capacity * (1 - (headroom or 0.0))
    text = f"needs {peak / GiB:.1f} GiB, has {capacity / GiB:.1f} GiB"
    if headroom:
        text += f" ({limit / GiB:.1f} GiB after the {headroom:.0%} headroom)"
    return text

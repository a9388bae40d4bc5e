"""Objectives, ranking and the cost/time Pareto front.

Each feasible candidate has a cost value (total $ of the run when the token count is known, else
$ per million tokens; serving with a throughput target: $ per hour) and a time value (time to
train, else seconds per billion trained tokens; serving: the latency of one request,
TTFT + output_len x TPOT). Lower is better for both.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import InputError, close_matches

OBJECTIVES = ("cheapest", "fastest", "cost_per_token", "weighted")


def parse_objective(objective: str | Mapping[str, float] | None) -> tuple[str, dict[str, float]]:
    """'cheapest' | 'fastest' | 'cost_per_token' | {'cost': w, 'time': w} | 'weighted:cost=0.7,time=0.3'."""
    if objective is None:
        return "cheapest", {}
    if isinstance(objective, Mapping):
        weights = {}
        for k, v in objective.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError(f"objective weight '{str(k)[:40]}'", f"must be a number, got {str(v)[:40]!r}.",
                                 "write e.g. {'cost': 0.7, 'time': 0.3}.")
            weights[str(k)[:40]] = float(v) if not isinstance(v, int) or abs(v) < 2 ** 1000 else math.inf
    elif isinstance(objective, str) and objective.startswith("weighted"):
        weights = {}
        spec = objective.partition(":")[2]
        for part in filter(None, (p.strip() for p in spec.split(","))):
            k, _, v = part.partition("=")
            try:
                weights[k.strip()] = float(v)
            except ValueError:
                raise InputError(f"objective '{objective[:60]}'", f"weight '{part[:40]}' is not key=number.",
                                 "write e.g. weighted:cost=0.7,time=0.3") from None
        weights = weights or {"cost": 0.5, "time": 0.5}
    else:
        name = str(objective).strip().lower().replace("-", "_")
        aliases = {"cheap": "cheapest", "cost": "cheapest", "fast": "fastest", "time": "fastest",
                   "per_token": "cost_per_token", "usd_per_token": "cost_per_token", "tokens": "cost_per_token"}
        name = aliases.get(name, name)
        if name not in OBJECTIVES or name == "weighted":
            from ..scenario import TrainObjective
            from typing import get_args
            training = name in get_args(TrainObjective)     # `--objective dpo`: the ranking flag, not the loss
            raise InputError(f"objective '{str(objective)[:60]}'", "is a training objective; this objective ranks "
                             "plans." if training else "is not known.",
                             ("set train.objective in the scenario file for the loss, and " if training else "")
                             + "use cheapest, fastest, cost_per_token or weighted:cost=W,time=W.",
                             list(dict.fromkeys(aliases.get(m, m) for m in close_matches(
                                 name[:60], [o for o in OBJECTIVES if o != "weighted"] + list(aliases)))))
        return name, {}
    bad = [k for k in weights if k not in ("cost", "time", "cost_per_token")]
    if bad:
        raise InputError(f"objective weight '{bad[0]}'", "is not known.", "weigh cost, time and/or cost_per_token.",
                         close_matches(bad[0], ("cost", "time", "cost_per_token")))
    if not weights or any(not math.isfinite(w) or w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise InputError(f"objective weights {weights}", "must be finite non-negative numbers for cost, time "
                         "and/or cost_per_token, not all zero.", "write e.g. {'cost': 0.7, 'time': 0.3}.")
    return "weighted", weights


def score_fn(name: str, weights: Mapping[str, float], pool: Sequence[Any]) -> Callable[[Any], tuple]:
    """A sort key over candidates (each with .cost_value, .time_value, .usd_per_m)."""
    def _v(x):
        return float("inf") if x is None else x

    if name == "cheapest":
        return lambda c: (_v(c.cost_value), _v(c.time_value))
    if name == "fastest":
        return lambda c: (_v(c.time_value), _v(c.cost_value))
    if name == "cost_per_token":
        return lambda c: (_v(c.usd_per_m), _v(c.time_value))
    best = {
        "cost": min((c.cost_value for c in pool if c.cost_value), default=1.0) or 1.0,
        "time": min((c.time_value for c in pool if c.time_value), default=1.0) or 1.0,
        "cost_per_token": min((c.usd_per_m for c in pool if c.usd_per_m), default=1.0) or 1.0,
    }
    # shares of the weights, scaled by the largest first: finite weights whose sum overflows (1e308 + 1e308)
    # rank as their ratio says, not all as zero
    top = max(weights.values())
    share = {k: w / top for k, w in weights.items()}
    total = sum(share.values())

    def key(c):
        vals = {"cost": c.cost_value, "time": c.time_value, "cost_per_token": c.usd_per_m}
        s = sum(w / total * (_v(vals[k]) / best[k]) for k, w in share.items())
        return (s, _v(c.cost_value), _v(c.time_value))
    return key


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def pareto_front(items: Iterable[Any], point: Callable[[Any], tuple[float, float] | None]) -> list[Any]:
    """Items whose (cost, time) no other item dominates, sorted by cost. O(n log n)."""
    pts = [(p, it) for it in items if (p := point(it)) is not None]
    pts.sort(key=lambda x: (x[0][0], x[0][1]))
    front, best_time = [], float("inf")
    for p, it in pts:
        if p[1] < best_time:
            front.append(it)
            best_time = p[1]
    return front

"""Bounded work and clean refusals for the search (issue 16): the call's own arguments checked, and
the number of candidate layouts counted BEFORE the search runs, so a request that would take
minutes or gigabytes is refused with the count and how to narrow it."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..errors import InputError
from . import space as S
from .state import NARROW_HINT

# Candidate layouts (GPU x count x tp x pp x cp x ep x the listed method/format/engine values) one
# search may enumerate. The default searches stay well below it: a 70B pre-training over the whole
# catalog is ~25,000, a long-context MoE pre-training ~600,000. Techniques (recompute, ZeRO,
# offload, optimizer, micro-batch) are searched cheapest-first with pruning and are not multiplied in.
MAX_CANDIDATES = 2_000_000


def check_call(*, top: Any, deadline_s: Any, gpus: Any, progress: Any) -> None:
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InputError("top", f"must be a whole number of at least 1, got {top!r}.",
                         "ask for 1 or more plans (e.g. --top 10).")
    if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                   or not math.isfinite(deadline_s)):
        raise InputError("deadline_s", f"must be a finite time.monotonic() value, got {deadline_s!r}.",
                         "pass time.monotonic() + seconds, or None for no time limit.")
    if gpus is not None:
        if isinstance(gpus, str) or not isinstance(gpus, Sequence) or not gpus:
            raise InputError("gpus", f"must be a non-empty list of GPU ids, got {gpus!r}."[:200],
                             "list GPU ids (e.g. ['h100-sxm', 'a100-sxm-80gb']), or leave it out to search all.")
        bad = [g for g in gpus if not isinstance(g, str) or not g.strip()]
        if bad:
            raise InputError("gpus", f"holds {bad[0]!r}, not a GPU id."[:200], "list GPU ids as strings.")
        if len(gpus) > S.MAX_OPTIONS:
            raise InputError("gpus", f"lists {len(gpus)} GPUs; the search takes at most {S.MAX_OPTIONS}.",
                             "list fewer GPUs, or leave it out to search the whole catalog.")
    if progress is not None and not isinstance(progress, bool):
        raise InputError("progress", f"must be true, false or None, got {progress!r}.", "pass a boolean.")


def check_constraints(given: Mapping[str, Any], where: str) -> None:
    """Validate constraint values as the scenario's `constraints:` block is validated."""
    from pydantic import ValidationError

    from ..scenario import Constraints as ScenarioConstraints
    values = {k: v for k, v in given.items() if v is not None and k != "spot"}
    if "providers" in values and not isinstance(values["providers"], (list, tuple)):
        raise InputError(f"{where} providers", f"must be a list of provider names, got {values['providers']!r}."[:200],
                         "list provider names, e.g. ['lambda', 'runpod'].")
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    if "spot" in given and given["spot"] is not None and not isinstance(given["spot"], bool):
        raise InputError(f"{where} spot", f"must be true or false, got {given['spot']!r}."[:200], "pass a boolean.")
    try:
        ScenarioConstraints.model_validate(values)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(x) for x in e["loc"])
        why = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            why = "is not a constraint"
        raise InputError(f"{where} {field}", f"{why} (got {S._short(e.get('input'))}).",
                         "see docs/recommend.md for the constraints and their ranges.") from None
    if "owned" in values:
        for gid, n in values["owned"].items():
            if n < 1:
                raise InputError(f"{where} owned.{gid}", f"must be at least 1 GPU, got {n}.",
                                 "list only the GPUs you own, with their count.")
    for k in ("budget_usd", "budget_usd_per_hour", "deadline_days", "ttft_s", "tpot_s", "requests_per_s",
              "tokens_per_s"):
        v = values.get(k)
        if isinstance(v, float) and math.isnan(v):
            raise InputError(f"{where} {k}", "is not a number (NaN).", f"give {k} as a positive number.")


def candidate_count(s: Any, gpus: Sequence[Any]) -> tuple[int, dict[str, int]]:
    """An upper bound on the candidate layouts the search would enumerate, and the list sizes behind it."""
    sp, model = s.space, s.model
    layers = max(1, int(model.num_layers))
    sizes: dict[str, int] = {"GPU types": len(gpus)}
    if sp.counts:
        sizes["GPU counts"] = len(sp.counts)
    else:
        sizes["GPU counts"] = len(S.node_aligned_counts(8, max(1, s.max_gpus)))
    sizes["tp"] = len(sp.parallel["tp"] or S.powers_of_two(8))
    if sp.task == "infer":
        sizes["pp"] = len(sp.parallel["pp"] or (1,))
        for name in ("engine", "weights", "kv_cache"):
            sizes[f"infer.{name}"] = len(sp.options("infer", name, S.INFER_OPTIONS[name]))
    else:
        sizes["pp"] = len(sp.parallel["pp"] or S.powers_of_two(min(layers, max(1, s.max_gpus))))
        seq_len = sp.base.get("train", {}).get("seq_len", 2048)
        sizes["cp"] = len(sp.parallel["cp"] or ((1, 2, 4, 8) if seq_len >= 32768 else (1,)))
        n_exp = int(model.num_experts or 0)
        sizes["ep"] = len(sp.parallel["ep"] or ([1] + S.powers_of_two(min(n_exp, 64), 2) if n_exp else [1]))
        for name in ("method", "precision", "attention"):
            sizes[f"train.{name}"] = len(sp.options("train", name, ("-",)))
    total = 1
    for v in sizes.values():
        total *= max(1, v)
    return total, sizes


def check_budget(s: Any, gpus: Sequence[Any]) -> None:
    total, sizes = candidate_count(s, gpus)
    if total > MAX_CANDIDATES:
        listed = ", ".join(f"{k} {v}" for k, v in sizes.items() if v > 1)
        raise InputError("recommend search", f"would enumerate up to {total:,} candidate layouts ({listed}), "
                         f"more than the limit of {MAX_CANDIDATES:,}.", NARROW_HINT + ".")

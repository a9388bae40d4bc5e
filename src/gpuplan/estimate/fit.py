"""What fits: the largest micro-batch, sequence length or concurrency, and the fewest GPUs.

Each limit is a search over the memory model (monotone in the searched quantity), so it inherits
every effect the model has (logits block, recompute, sharding, engine reservations).
"""
from __future__ import annotations

from typing import Callable

from ..errors import GpuplanError
from ..models.spec import ModelSpec
from ..scenario import Scenario
from .memory import estimate_memory


def _largest(fits: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Largest n in [lo, hi] with fits(n), assuming monotone; None if even lo does not fit."""
    if not fits(lo):
        return None
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _fits(scn: Scenario, model: ModelSpec, capacity: int, **updates) -> bool:
    try:
        return estimate_memory(scn.replace(**updates), model, capacity).fits
    except GpuplanError:
        return False


def fit_limits(scn: Scenario, model: ModelSpec, capacity_bytes: int) -> dict[str, int | None]:
    """max_micro_batch and max_seq_len (training; RL objectives: max_new_tokens, the generated length at the rollout's
    prompt_len) or max_concurrency and max_context (inference)."""
    out: dict[str, int | None] = {}
    if scn.is_training:
        t = scn.train
        assert t is not None
        out["max_micro_batch"] = _largest(lambda b: _fits(scn, model, capacity_bytes, train={"micro_batch": b,
                                          "global_batch": None}), 1, 4096)
        if t.rl is not None:
            # RL sequences are prompt_len + the generated response: train.seq_len is not read, so the limit a user
            # can turn is rl.max_new_tokens (issue 20: "max_seq_len = 131,072" was the unused field's search bound)
            rl = t.rl
            given = rl.model_dump(exclude_unset=True)

            def with_new_tokens(n: int) -> dict:
                d = {**given, "max_new_tokens": n}
                if rl.mean_response_len is not None:
                    d["mean_response_len"] = min(rl.mean_response_len, n)
                return {"rl": d}
            cap = max((model.max_position or 0) - rl.prompt_len, rl.max_new_tokens, 1)
            out["max_new_tokens"] = _largest(lambda n: _fits(scn, model, capacity_bytes, train=with_new_tokens(n)),
                                             min(16, cap), cap)
            return out
        cap = max(model.max_position or 0, t.seq_len, 131072)
        out["max_seq_len"] = _largest(lambda s: _fits(scn, model, capacity_bytes, train={"seq_len": s}), 128, cap)
    else:
        inf = scn.infer
        assert inf is not None
        est = estimate_memory(scn, model, capacity_bytes)
        if "max_concurrency" in est.limits:
            out["max_concurrency"] = est.limits["max_concurrency"]
        else:
            out["max_concurrency"] = _largest(lambda c: _fits(scn, model, capacity_bytes, infer={"concurrency": c}),
                                              1, 65536)
        cap = max(model.max_position or 0, 4096)
        out["max_context"] = _largest(lambda n: _fits(scn, model, capacity_bytes, infer={
            "prompt_len": max(1, n - inf.output_len), "concurrency": 1}), inf.output_len + 1, cap)
    return out


def fewest_gpus(scn: Scenario, model: ModelSpec, capacity_bytes: int, *, max_gpus: int = 4096) -> int | None:
    """Fewest GPUs (power of two, same layout rules) at which the scenario fits, scaling dp for
    sharded training (ZeRO-3) or tp for inference."""
    n = 1
    while n <= max_gpus:
        try:
            if scn.is_training:
                cand = scn.replace(hardware={"count": n * scn.parallel.tp * scn.parallel.pp * scn.parallel.cp},
                                   parallel={"dp": None})
            else:
                cand = scn.replace(hardware={"count": n}, parallel={"tp": n, "dp": None})
            if estimate_memory(cand, model, capacity_bytes).fits:
                return cand.hardware.count
        except GpuplanError:
            pass
        n *= 2
    return None

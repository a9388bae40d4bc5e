"""Issue 17: the search misses no feasible plan. For seeded random small scenarios every layout of the
search space that `estimate` (the one pipeline) finds fitting and within the limits is either
returned by `recommend` or dominated, on cost and time, by a plan it returns.

The brute force below enumerates the space the way docs/recommend.md §1 defines it (GPU x count x
tp x pp x framework x ZeRO x offload x recompute x micro-batch, the global batch as a target) and
evaluates every point with `gpuplan.api.estimate`, independently of the search's pruning, caches,
dominance rules and bounds."""
from __future__ import annotations

import itertools
import random

import pytest

from gpuplan import api
from gpuplan.models import get_model
from gpuplan.search import recommend
from gpuplan.search import frameworks as F
from gpuplan.search.train_search import BATCH_TOLERANCE, batch_for

# models and cards chosen so that memory binds: most layouts need sharding, tensor or pipeline
# parallelism, recompute or offload, and several frameworks compete
GPUS = ("a100-sxm-40gb", "l40s", "rtx-4090", "l4", "a10g", "rtx-a6000")
MODELS = ("llama-3.2-3b", "qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b")
COUNTS = (1, 2, 4, 8)
MICRO = (1, 2)
RECOMPUTE = ("none", "selective", "full")
DAY = 86400.0


def _scenario(rng: random.Random) -> dict:
    return {"model": rng.choice(MODELS), "task": "train",
            "hardware": {"count": list(COUNTS)},
            "train": {"seq_len": rng.choice((1024, 2048, 4096)), "global_batch": rng.choice((8, 16, 24, 32)),
                      "micro_batch": list(MICRO), "tokens": rng.choice((1e9, 5e9, 2e10))}}


def _layouts(model, count: int):
    for tp in (1, 2, 4, 8):
        if count % tp or model.num_heads % tp or model.num_kv_heads % tp:
            continue
        for pp in (1, 2, 4, 8):
            if count % (tp * pp) or pp > model.num_layers:
                continue
            yield {"tp": tp, "pp": pp, "cp": 1, "ep": 1, "dp": count // (tp * pp)}


def _brute_force(scn: dict, gpu: str) -> list[tuple[float, float, str]]:
    """(usd_total, time_to_train_s, label) of every fitting point within the default 90-day deadline."""
    model = get_model(scn["model"])
    tr = scn["train"]
    out = []
    for count in COUNTS:
        for par in _layouts(model, count):
            gb = batch_for(tr["global_batch"], par["dp"])
            if abs(gb - tr["global_batch"]) > BATCH_TOLERANCE * tr["global_batch"]:
                continue
            opts, _ = F.options(None, par, par["dp"] * par["cp"], model)
            for o, rec, mb in itertools.product(opts, RECOMPUTE, MICRO):
                if gb % (mb * par["dp"]):
                    continue        # exact batch (pipelines included: any micro-batch, issue 17)
                for zero, off in itertools.product(o.zeros, o.offloads):
                    if off == "optimizer+params" and zero < 3:
                        continue
                    data = {"model": scn["model"], "task": "train",
                            "hardware": {"gpu": gpu, "count": count},
                            "parallel": {**par, "zero": zero, "offload": off},
                            "train": {"seq_len": tr["seq_len"], "global_batch": gb, "micro_batch": mb,
                                      "recompute": rec, "tokens": tr["tokens"]},
                            "cost": {"basis": "rent"}}
                    if o.framework:
                        data["framework"] = o.framework
                    est = api.estimate(data)
                    t, c = est.performance.time_to_train_s, est.cost.usd_total
                    if est.memory.fits and t is not None and c is not None and t <= 90 * DAY:
                        out.append((c, t, f"{count}x{gpu} {par} {o.framework} zero={zero} off={off} "
                                          f"rec={rec} mb={mb}"))
    return out


# seeds 2 (a deeper pipeline cheaper than the first that fits), 5 and 9 (offload without recompute
# cheaper than recompute without offload) caught search shortcuts that issue 17 removed
@pytest.mark.parametrize("seed", [1, 2, 5, 9])
def test_every_fitting_layout_is_returned_or_dominated(seed):
    rng = random.Random(seed)
    scn = _scenario(rng)
    gpus = rng.sample(GPUS, 2)
    rec = recommend(scn, gpus=gpus, top=50, progress=False)
    returned = [(p.estimate["cost"]["usd_total"], p.estimate["performance"]["time_to_train_s"])
                for p in list(rec.plans) + list(rec.pareto)]
    assert len(rec.pareto) < 40          # the front is shown whole (not thinned) at this size
    points = [pt for g in gpus for pt in _brute_force(scn, g)]
    assert points, (scn, gpus)
    eps = 1e-9
    missed = [(c, t, label) for c, t, label in points
              if not any(rc <= c * (1 + eps) and rt <= t * (1 + eps) for rc, rt in returned)]
    assert not missed, (scn, gpus, missed[:5], sorted(returned)[:5])

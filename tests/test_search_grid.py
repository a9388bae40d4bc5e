"""Issue 17, planner speed: the batched memory bound over the whole search space (search/grid.py).

The bound is never above the scalar pipeline's peak (checked against `gpuplan.api.estimate` on
seeded random points of the grid), the ZeRO divisors it shares with estimate/memory.py reproduce
the ZeRO paper's figure 1 by hand arithmetic, and the grid counts the same points as an
independent enumeration of the space docs/recommend.md §1 defines."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from gpuplan import api
from gpuplan.estimate.memory import zero_divisors
from gpuplan.models import get_model
from gpuplan.search import frameworks as F
from gpuplan.search import grid as G
from gpuplan.search import recommend
from gpuplan.search.train_search import BATCH_TOLERANCE, batch_for


def test_zero_divisors_reproduce_the_zero_paper_figure_1():
    # Rajbhandari et al. 2020, figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam (2 + 2 + 12 bytes):
    # 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per GPU for stages 0-3
    psi, nd = 7.5e9, 64
    expected = {0: 120e9, 1: 4 * psi + 12 * psi / 64, 2: 2 * psi + 14 * psi / 64, 3: 16 * psi / 64}
    assert expected[1] == pytest.approx(31.40625e9) and expected[3] == pytest.approx(1.875e9)
    for zero, want in expected.items():
        d_w, d_g, d_o = zero_divisors(zero, nd)
        assert 2 * psi / d_w + 2 * psi / d_g + 12 * psi / d_o == pytest.approx(want)
    # the same function over arrays (the batched bound) gives the same numbers
    d_w, d_g, d_o = zero_divisors(np.array([0, 1, 2, 3]), np.array([nd] * 4))
    got = 2 * psi / d_w + 2 * psi / d_g + 12 * psi / d_o
    assert got.tolist() == pytest.approx([expected[z] for z in range(4)])


def _grids_of(scn: dict, **kw) -> list:
    seen = []
    orig = G.build

    def spy(*a):
        g = orig(*a)
        seen.append(g)
        return g
    G.build = spy
    try:
        rec = recommend(scn, progress=False, **kw)
    finally:
        G.build = orig
    return rec, seen


CASES = [({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1e12}},
          ["h100-sxm", "a100-sxm-40gb"]),
         ({"model": "qwen2.5-7b", "task": "train", "train": {"seq_len": 4096, "global_batch": 64, "tokens": 1e10}},
          ["rtx-4090", "l40s"])]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_memory_bound_never_exceeds_the_pipeline_peak(case):
    scn, gpus = CASES[case]
    _, grids = _grids_of(scn, gpus=gpus)
    assert grids
    rng = random.Random(17 + case)
    target = scn["train"].get("global_batch") or (2 ** 22 // scn["train"]["seq_len"])
    ratios, checked = [], 0
    for g in grids:
        rows = rng.sample(range(len(g.count)), min(25, len(g.count)))
        for i in rows:
            dp = int(g.dp[i])
            gb = batch_for(target, dp)
            mb = max(m for m in (1, 2, 4, 8) if gb % (m * dp) == 0)
            data = {"model": scn["model"], "task": "train",
                    "hardware": {"gpu": gpus[0], "count": int(g.count[i])},
                    "parallel": {"tp": int(g.tp[i]), "pp": int(g.pp[i]), "cp": int(g.cp[i]), "ep": int(g.ep[i]),
                                 "dp": dp, "zero": int(g.zero[i]), "offload": F.OFFLOADS_ALL[int(g.offload[i])]},
                    "train": {**scn["train"], "global_batch": gb, "micro_batch": mb,
                              "recompute": rng.choice(("none", "selective", "full"))}}
            fw = g.frameworks[int(g.fw[i])]
            if fw:
                data["framework"] = fw
            peak = api.estimate(data).memory.peak_bytes_per_gpu
            assert g.mem_lb[i] <= peak, (data, float(g.mem_lb[i]), peak)
            ratios.append(g.mem_lb[i] / peak)
            checked += 1
    assert checked >= 25
    # not vacuous: on some points the model states are most of the peak
    assert max(ratios) > 0.6, max(ratios)


def test_bound_decides_points_without_evaluating_them():
    # 70B on 24 GB cards: most layouts cannot hold the model states, and the grid says so up front
    rec, grids = _grids_of({"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 4096, "tokens": 1e11}},
                           gpus=["rtx-4090"], max_gpus=64)
    st = rec.stats
    assert st["space_points"] == sum(g.size for g in grids) > 0
    assert 0 < st["points_decided_by_bound"] <= st["space_points"]
    over = sum(int(p) for g in grids for lb, p in zip(g.mem_lb, g.points) if lb > 24 * 2 ** 30)
    assert over > 0


def _independent_count(scn: dict, counts, micro) -> int:
    """Rule-allowed points of docs/recommend.md §1 for a dense model on 8-GPU nodes, counted directly."""
    model = get_model(scn["model"])
    target = scn["train"]["global_batch"]
    n = 0
    for count in counts:
        for tp in (1, 2, 4, 8):
            if count % tp or model.num_heads % tp or model.num_kv_heads % tp:
                continue
            for pp in (1, 2, 4, 8, 16, 32, 64):
                if count % (tp * pp) or pp > model.num_layers:
                    continue
                dp = count // (tp * pp)
                gb = batch_for(target, dp)
                if abs(gb - target) > BATCH_TOLERANCE * target:
                    continue
                mbs = [m for m in micro if gb % (m * dp) == 0]
                par = {"tp": tp, "pp": pp, "cp": 1, "ep": 1}
                for o in F.options(None, par, dp, model)[0]:
                    pairs = [(z, off) for z, off in itertools.product(o.zeros, o.offloads)
                             if not (off == "optimizer+params" and z < 3)]
                    n += len(pairs) * 3 * len(mbs)
    return n


def test_grid_counts_the_space_an_independent_enumeration_counts():
    scn = {"model": "llama-3.1-8b", "task": "train", "hardware": {"count": [1, 2, 4, 8, 16]},
           "train": {"seq_len": 2048, "global_batch": 32, "micro_batch": [1, 2, 4], "tokens": 1e9}}
    rec = recommend(scn, gpus=["a100-sxm-40gb"], progress=False)
    assert rec.stats["space_points"] == _independent_count(scn, (1, 2, 4, 8, 16), (1, 2, 4))

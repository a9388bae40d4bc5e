"""The whole training search space of one GPU type as arrays, and a batched lower bound on each
point's memory (issue 17, "planner speed"; docs/recommend.md §1 "How it stays fast").

A point is GPU count x tp x pp x cp x ep x framework x ZeRO stage x offload x recompute x
micro-batch x optimizer, under the rules train_search applies (valid splits, the global batch as a
target, the micro-batches that give it exactly, what each framework offers). Rows are
(layout, framework, ZeRO, offload); recompute, micro-batch and optimizer are folded into each
row's `points` because the bound does not depend on them.

The bound is not a second memory model. Its only claim is `bound <= estimate_memory(...).peak` for
every point, which tests/test_search_grid.py checks against the scalar pipeline over seeded random
points. It is the optimizer-step phase of estimate/memory.py (weights + gradients + optimizer states
+ the step's temporary, ZeRO-sharded with memory.zero_divisors, minus what offload moves to the host)
plus the runtime overhead on that phase; the peak is the largest phase, so it is at least this
phase. Memory does not depend on the GPU type, so one grid serves every GPU with the same counts
and node size, and only the comparison with each GPU's capacity is per GPU.

The search uses it to decide, without a scalar estimate, every (layout, framework) whose lightest
point cannot fit, and to count the points of the space it decided by a bound rather than by
evaluation (`stats`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..estimate.layout import rank_params, stages
from ..estimate.memory import Overhead, state_bytes, zero_divisors
from ..estimate.optim import PAGED
from . import frameworks as F
from . import space as S

OFFLOAD_CODE = {o: i for i, o in enumerate(F.OFFLOADS_ALL)}
# rounding of each component to whole bytes in estimate/memory.py _finish can lose < 1 byte each
ROUNDING_MARGIN_BYTES = 16


@dataclass
class Grid:
    """One row per (layout, framework option, ZeRO stage, offload)."""
    count: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    fw: np.ndarray                 # index into `frameworks`
    zero: np.ndarray
    offload: np.ndarray            # index into frameworks.OFFLOADS_ALL
    points: np.ndarray             # recompute x micro-batch x optimizer points the row stands for
    mem_lb: np.ndarray             # bytes per GPU no point of the row goes below
    frameworks: tuple
    by_option: dict = field(default_factory=dict)   # (count, tp, pp, cp, ep, framework) -> (min bound, points)
    by_count: dict = field(default_factory=dict)    # count -> points

    @property
    def size(self) -> int:
        return int(self.points.sum())


def _bound_applies(s: Any, method: str) -> bool:
    """The optimizer-step phase bound is the peak's lower bound for plain full training; adapters,
    paged or in-backward optimizers, post-training and a user-set overhead take other branches of
    estimate/memory.py, where the grid makes no memory decision (bound 0)."""
    tr = s.space.base.get("train", {})
    return (method == "full" and not tr.get("paged_optimizer") and not tr.get("optimizer_in_backward")
            and tr.get("objective", "sft") == "sft" and s.space.base.get("overhead_bytes") is None)


def _layouts(s: Any, job: Any, method: str, counts: list[int]):
    """(count, tp, pp, cp, ep, dp, global batch, micro-batches, options) the search's rules allow,
    before software, limits or memory (the same helpers train_search uses)."""
    from .train_search import BATCH_TOLERANCE, _exact, batch_for, model_splits
    sp, model = s.space, s.model
    named = F.named_framework(sp.base)
    for count in counts:
        splits = list(model_splits(s, count, job.gpn, job.seq_len))
        if method != "full" and not sp.parallel["tp"]:
            splits = [x for x in splits if x[0] == 1 and x[1] == 1] or sorted(splits, key=lambda x: -x[0])[-1:]
        for tp, cp, ep in splits:
            pps = sp.parallel["pp"] or (S.powers_of_two(min(model.num_layers, count // (tp * cp)))
                                        if method == "full" else [1])
            for pp in pps:
                if count % (tp * cp * pp) or S.pp_reason(model, pp):
                    continue
                dp = count // (tp * cp * pp)
                if ep > 1 and (dp * cp) % ep:
                    continue
                gb = batch_for(job.global_batch, dp)
                if abs(gb - job.global_batch) > BATCH_TOLERANCE * job.global_batch:
                    continue
                mbs = tuple(m for m in job.micro_batches if _exact(gb, m, dp))
                if not mbs:
                    continue
                par = {"tp": tp, "pp": pp, "cp": cp, "ep": ep}
                opts, _ = F.options(named, par, dp * cp, model)
                if opts:
                    yield count, tp, pp, cp, ep, dp, gb, mbs, opts


def _states_per_param(s: Any, job: Any, framework: str | None) -> tuple[float, float, float]:
    """(weight, gradient, optimizer states + step temporary) bytes per parameter for `framework`,
    the least over the optimizers searched (memory.state_bytes of the scenario itself)."""
    from .candidate import fast
    best = None
    for opt in job.optimizers:
        section = {"method": "full", "precision": job.precision, "attention": job.attention, "optimizer": opt}
        sb = state_bytes(fast(s, job.gpu, 1, job.gpn, {}, section, framework))
        # paged optimizers keep their states in managed (host) memory; the shape-dependent ones (Muon,
        # GaLore, SOAP, Adafactor) report only the master copy here: both stay lower bounds
        states = 0.0 if opt in PAGED else sb.optim + sb.optim_temp
        cand = (sb.weight, sb.grad, states)
        best = cand if best is None else tuple(min(a, b) for a, b in zip(best, cand))
    return best


def build(s: Any, job: Any, method: str, counts: list[int]) -> Grid:
    sp = s.space
    cols: dict[str, list] = {k: [] for k in ("count", "tp", "pp", "cp", "ep", "dp", "fw", "zero", "offload",
                                             "points")}
    fws: list = []
    per_rec_opt = len(job.recomputes) * len(job.optimizers)
    for count, tp, pp, cp, ep, dp, gb, mbs, opts in _layouts(s, job, method, counts):
        for o in opts:
            if o.framework not in fws:
                fws.append(o.framework)
            fi = fws.index(o.framework)
            zeros = sp.parallel["zero"] or o.zeros
            offloads = sp.parallel["offload"] or o.offloads
            for z in zeros:
                for off in offloads:
                    if off == "optimizer+params" and z < 3 and not sp.parallel["offload"]:
                        continue
                    for k, v in (("count", count), ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("dp", dp),
                                 ("fw", fi), ("zero", z), ("offload", OFFLOAD_CODE[off]),
                                 ("points", per_rec_opt * len(mbs))):
                        cols[k].append(v)
    a = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
    g = Grid(**a, mem_lb=np.zeros(len(a["count"])), frameworks=tuple(fws))
    if len(g.count) and _bound_applies(s, method):
        g.mem_lb = _memory_bound(s, job, g)
    _index(g)
    return g


def _memory_bound(s: Any, job: Any, g: Grid) -> np.ndarray:
    """Per row: the optimizer-step phase (weights + gradients + optimizer states + temporary, ZeRO-
    sharded, offloaded parts removed) plus the runtime overhead on it, on the pipeline stage that
    holds the most parameters."""
    base_fw = s.space.base.get("framework", "hf")
    per_param = np.zeros((len(g.frameworks), 3))
    native = np.zeros(len(g.frameworks), dtype=bool)
    for i, fw in enumerate(g.frameworks):
        per_param[i] = _states_per_param(s, job, fw)
        native[i] = (fw or base_fw) in ("megatron", "torchtitan")
    # parameters on the fullest stage's rank, per distinct (tp, pp, ep, vocab-parallel)
    keys = np.stack([g.tp, g.pp, g.ep, native[g.fw].astype(np.int64)], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    n_uniq = np.array([max(rank_params(s.model, tp=int(tp), pp=int(pp), ep=int(ep), stage=st,
                                       vocab_parallel=bool(vp)).total for st in stages(int(pp)))
                       for tp, pp, ep, vp in uniq])
    n = n_uniq[inv.reshape(-1)]
    d_w, d_g, d_o = zero_divisors(g.zero, g.dp * g.cp)
    keeps_optimizer = g.offload == OFFLOAD_CODE["none"]
    keeps_params = ~((g.offload == OFFLOAD_CODE["optimizer+params"]) & (g.zero >= 3))
    pw = per_param[g.fw]
    states = n * (keeps_params * (pw[:, 0] / d_w + pw[:, 1] / d_g) + keeps_optimizer * pw[:, 2] / d_o)
    ov = Overhead()
    overhead = ov.cuda_context + ov.workspaces + ov.nccl_per_peer_group * (g.count > 1) + ov.fragmentation * states
    return np.maximum(0.0, states + overhead - ROUNDING_MARGIN_BYTES)


def _index(g: Grid) -> None:
    """Per (layout, framework): the least bound over its ZeRO stages and offloads, and its points."""
    if not len(g.count):
        return
    keys = np.stack([g.count, g.tp, g.pp, g.cp, g.ep, g.fw], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lb = np.full(len(uniq), np.inf)
    np.minimum.at(lb, inv, g.mem_lb)
    pts = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(pts, inv, g.points)
    for (count, tp, pp, cp, ep, fw), b, n in zip(uniq.tolist(), lb.tolist(), pts.tolist()):
        g.by_option[(count, tp, pp, cp, ep, g.frameworks[fw])] = (b, n)
        g.by_count[count] = g.by_count.get(count, 0) + n


def for_search(s: Any, job: Any, method: str, counts: list[int]) -> Grid:
    """The grid of this GPU type's space, shared by every GPU type with the same counts, node size,
    formats and numeric settings (memory does not depend on the GPU type)."""
    key = ("grid", method, tuple(counts), job.gpn, job.seq_len, job.global_batch, job.precision, job.attention,
           job.optimizers, job.recomputes, job.micro_batches)
    hit = s.cache.memory.get(key)
    if hit is None:
        hit = s.cache.memory[key] = build(s, job, method, counts)
    return hit

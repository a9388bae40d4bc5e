"""MoE training mechanisms beside the expert GEMMs: token permutation traffic and expert-parallel load
imbalance (docs/speed.md, "MoE training: permutation and EP imbalance").

Source: Megatron-Core's all-to-all token dispatcher, `MoEAlltoAllTokenDispatcher` in
megatron/core/transformer/moe/token_dispatcher.py at tag core_v0.15.0 (commit 0d7e02bd, the Megatron-Core
of the NeMo 25.11 container), and its router's benchmark mode (`moe_router_force_load_balancing`:
`RandomSTE` in moe_utils.py replaces the router logits with N(0, 1) noise, so every token picks its top-k
experts uniformly at random).

Pure functions of counts; the speed engine (speed.py) turns bytes into time and scales the expert work.
"""
from __future__ import annotations

import math


def permute_passes_per_row(top_k: int, local_experts: float, ep: int) -> float:
    """HBM passes over the T·k routed rows of one MoE layer in forward + backward, in units of
    T·k·h elements (T tokens on this GPU, k experts per token, h hidden).

    Forward, per the all-to-all dispatcher:
      permute     gather each token's k copies into expert order: read T·k rows, write T·k rows   (2)
      sort        after the EP all-to-all, regroup the received rows by local expert
                  (`sort_chunks_by_idxs`; a transpose under drop-and-pad): read + write         (2)
                  only when the rank holds more than one expert and tokens arrive from other ranks
      unsort      the same before the combine all-to-all                                          (2)
      unpermute   read the k expert outputs of each token (scaled by its probability), write one
                  row per token: T·k + T rows                                                      (1 + 1/k)
    Backward runs each op's adjoint, which moves the same bytes (permute <-> unpermute, sort <-> unsort),
    so forward + backward = 2 x forward."""
    if top_k <= 0:
        return 0.0
    sort = 4.0 if (ep > 1 and local_experts > 1) else 0.0
    forward = 2.0 + sort + 1.0 + 1.0 / top_k
    return 2.0 * forward


def permute_bytes(tokens: float, top_k: int, hidden: float, act_bytes: float, local_experts: float, ep: int,
                  moe_layers: float, recompute_forward_share: float = 0.0) -> float:
    """HBM bytes of token permutation for `moe_layers` MoE layers and `tokens` tokens on one GPU:
    passes x T·k·h x bytes per element; a recomputed forward (activation checkpointing) repeats its half."""
    passes = permute_passes_per_row(top_k, local_experts, ep) * (1.0 + 0.5 * recompute_forward_share)
    return passes * tokens * top_k * hidden * act_bytes * moe_layers


def expected_max_std_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1; 1/sqrt(pi) for 2; 3/(2 sqrt(pi)) for 3):
    the integral of x · n φ(x) Φ(x)^(n−1) over the real line, by the midpoint rule on [−10, 10]."""
    if n <= 1:
        return 0.0
    steps, lo, hi = 4000, -10.0, 10.0
    dx = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * dx
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        total += x * n * pdf * cdf ** (n - 1) * dx
    return total


def ep_rank_imbalance(tokens_per_rank: float, top_k: int, num_experts: int, ep: int) -> float:
    """Expected rows at the busiest of `ep` expert-parallel ranks over the mean, when every token picks
    `top_k` distinct experts of `num_experts` uniformly at random (Megatron's force-balanced benchmark
    routing; real routers with an auxiliary loss are at least this uneven).

    One token sends to a rank holding E/ep experts a hypergeometric count (k draws, E/ep of E marked):
    mean k/ep, variance k (1/ep)(1 − 1/ep)(E − k)/(E − 1). A rank receives from all ep·T tokens of the
    group: mean T·k, variance ep·T times that. The all-to-all and the expert GEMMs wait for the busiest
    rank: 1 + E[max of ep normals] · σ / mean (normal approximation; the ranks' slight negative
    correlation is ignored, which overstates the maximum by well under a percent here)."""
    if ep <= 1 or top_k <= 0 or num_experts <= top_k or tokens_per_rank <= 0:
        return 1.0
    p = 1.0 / ep
    var_token = top_k * p * (1.0 - p) * (num_experts - top_k) / (num_experts - 1)
    n_tokens = ep * tokens_per_rank
    mean = tokens_per_rank * top_k
    sigma = math.sqrt(n_tokens * var_token)
    return 1.0 + expected_max_std_normal(ep) * sigma / mean

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


# ---------------------------------------------------------------------------------------------
# Megatron's grouped expert MLP (TEGroupedMLP, megatron/core/transformer/moe/experts.py at core_v0.15.0):
# HBM passes it makes around the grouped GEMMs, in units of (routed rows on this rank) x h elements


def fp8_pad_passes_per_row(recompute_forward_share: float = 0.0) -> float:
    """Row padding around FP8 grouped GEMMs. An FP8 GEMM needs each expert's row count to be a multiple of
    16 (32 for MXFP8), so `TEGroupedMLP.forward` pads the permuted input with Transformer Engine's
    `Fp8Padding` and strips the pad rows from the output with `Fp8Unpadding` (experts.py, core_v0.15.0).
    Each is a copy (`tex.fused_multi_row_padding` / `fused_multi_row_unpadding` into a new tensor:
    read + write the rows) unless every expert's count is already aligned (`if m_splits ==
    padded_m_splits: return inp`; transformer_engine/pytorch/module/fp8_padding.py and fp8_unpadding.py at
    v2.9), and each backward is the opposite copy on the gradient:
      forward   pad input (2) + unpad output (2)
      backward  unpad grad input (2) + pad grad output (2)
    Dropless routing gives random counts, so it pads; drop-and-pad with a capacity that is a multiple of
    the alignment does not, and neither does Megatron's `moe_router_padding_for_fp8` (not modelled: off by
    default and in the Megatron-Bridge recipes). A recomputed forward repeats its half."""
    return 8.0 * (1.0 + 0.5 * recompute_forward_share)


def expert_bias_passes_per_row(recompute_forward_share: float = 0.0) -> float:
    """The routed experts' output bias. With biased linears (`add_bias_linear`) TEGroupedMLP builds its second
    grouped linear with `skip_bias_add=True` and adds the bias afterwards in `_apply_bias`, a Python loop over
    the local experts: `torch.cat([t + b * p for t, b, p in zip(torch.split(output, tokens_per_expert), bias,
    torch.split(probs, tokens_per_expert))])` (experts.py, core_v0.15.0), each a separate eager kernel over the
    expert's rows (probs in the activation dtype: the router's default dtype):
      forward   b·p written (1), t + b·p read 2 write 1 (3), cat read + write (2)                    (6)
      backward  mul's two gradients grad·p and grad·b, each written then summed to the bias / probs
                shape (read 1, write 1, read 1: 3 each), split's backward concatenates the
                per-expert gradients (2)                                                              (8)
    A recomputed forward repeats its 6."""
    return 14.0 + 6.0 * recompute_forward_share


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
    rank. Every token sends exactly k rows in all, so the ep counts sum to ep·T·k: exchangeable, with
    correlation ρ = −1/(ep − 1) between any two. For exchangeable normals X_i = μ + σ(√(1−ρ)·Z_i + √ρ·W)
    (ρ ≥ 0; the same covariance for ρ < 0 as the iid Z_i less their mean, scaled) the maximum is
    μ + σ·√(1 − ρ)·E[max of ep iid N(0,1)], so: 1 + √(ep/(ep − 1)) · E[max of ep normals] · σ / mean
    (normal approximation; for ep = 2 it is the exact mean absolute deviation, σ·√(2/π))."""
    if ep <= 1 or top_k <= 0 or num_experts <= top_k or tokens_per_rank <= 0:
        return 1.0
    p = 1.0 / ep
    var_token = top_k * p * (1.0 - p) * (num_experts - top_k) / (num_experts - 1)
    n_tokens = ep * tokens_per_rank
    mean = tokens_per_rank * top_k
    sigma = math.sqrt(n_tokens * var_token)
    return 1.0 + math.sqrt(ep / (ep - 1.0)) * expected_max_std_normal(ep) * sigma / mean


# ---------------------------------------------------------------------------------------------
# token dispatch: how many copies of a token cross each link


def token_reaches(num_experts: int, top_k: int, held: float) -> float:
    """P(a token's `top_k` distinct experts, drawn uniformly from `num_experts`, include at least one of
    `held` given experts) = 1 − C(E − held, k) / C(E, k): the chance that a rank (or node) holding `held`
    experts must receive the token (force-balanced routing draws each token's experts this way)."""
    if top_k <= 0 or held <= 0:
        return 0.0
    if held >= num_experts or top_k > num_experts - held:
        return 1.0
    miss = 1.0
    for i in range(top_k):
        miss *= (num_experts - held - i) / (num_experts - i)
    return 1.0 - miss


DISPATCHERS = ("alltoall", "deepep", "hybridep")


def dispatch_copies(dispatcher: str, num_experts: int, top_k: int, ep: int, per_node: int) -> tuple[float, float]:
    """(rows over the intra-node link, rows through the rank's own NIC) that one EP rank sends per token
    of its micro-batch in one dispatch (the combine returns as many), for `ep` ranks placed `per_node`
    to a node, each holding E/ep experts.

    alltoall (Megatron's MoEAlltoAllTokenDispatcher, token_dispatcher.py, core_v0.15.0): the permutation
    makes one row per (token, expert) pair (`num_out_tokens = tokens * topk`) and the all-to-all sends each
    to the rank that holds the expert, so k·(g−1)/ep rows go to same-node peers and k·(ep−g)/ep leave the
    node, duplicates included when a token picks several experts of one rank.

    deepep / hybridep (Megatron's flex dispatcher over DeepEP): DeepEP sends a token once to each rank
    that holds any of its experts (`Buffer.get_dispatch_layout`: `num_tokens_per_rank`, `is_token_in_rank`;
    deep_ep/buffer.py at v1.2.1, 9af0e0d) and across nodes once to each node, through RDMA to the GPU of the
    same index, which forwards it over NVLink (`num_tokens_per_rdma_rank`; README "forwarding data from
    NVLink domain to RDMA domain"). HybridEP takes the un-permuted tokens and permutes after the
    all-to-all (`HybridEPDispatch`, "permute + dispatch a2a + permute", megatron/core/transformer/moe/
    fused_a2a.py @d98e8a6): the same one-copy-per-destination traffic. Per token, with
    p_r = token_reaches(E, k, E/ep) and p_n = token_reaches(E, k, E·g/ep), n = ep/g nodes:
    NIC rows (n − 1)·p_n; NVLink rows (g − 1)·p_r to same-node peers plus, by symmetry, the rows this rank
    forwards for the other nodes, (n − 1)·(g − 1)·p_r."""
    if ep <= 1 or top_k <= 0:
        return 0.0, 0.0
    g = max(1, min(per_node, ep))
    if dispatcher == "alltoall":
        return top_k * (g - 1) / ep, top_k * (ep - g) / ep
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"unknown expert-parallel dispatcher {dispatcher!r}")
    nodes = ep / g
    p_rank = token_reaches(num_experts, top_k, num_experts / ep)
    p_node = token_reaches(num_experts, top_k, num_experts * g / ep) if nodes > 1 else 0.0
    intra = (g - 1) * p_rank * (1.0 + max(0.0, nodes - 1.0))
    inter = max(0.0, nodes - 1.0) * p_node
    return intra, inter

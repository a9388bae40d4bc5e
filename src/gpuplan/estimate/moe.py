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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .datafiles import rows


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


# Megatron-Core's clamped gated activation on the routed experts (gpt-oss: `activation_func_clamp_value` 7.0, from the
# Megatron-Bridge GPTOSSProvider with `bias_activation_fusion` True and quick_gelu, NVIDIA-NeMo/Megatron-Bridge@00b7660be
# src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py). TEGroupedMLP's bias_act_func calls
# `weighted_bias_quick_geglu_impl` (NVIDIA/Megatron-LM@92c8482e6, the Megatron-LM submodule of that commit,
# megatron/core/fusions/fused_bias_geglu.py), which clamps *outside* the torch.compile'd activation, as eager aten ops:
#   x_glu, x_linear = input.chunk(2, -1)
#   input = torch.cat((x_glu.clamp(min=None, max=clamp_value), x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)
# and only then applies the fused WeightedQuickGeGLUFunction (whose bytes are the fused activation region's 16 per
# element of the expert width, elementwise.region_bytes). Bytes per element of the expert width f (one of the two
# f-wide halves of a row), bf16, traced on CPU with a TorchDispatchMode (torch 2.13; views, split, slice and detach
# move nothing):
#   forward   clamp (read 2, write 2) + clamp (4) + cat of the two halves (read 4, write 4)                    16
#   backward  cat's backward slices (views); clamp_backward(max only) = le (read 2, write 1) + where (read 1 + 2,
#             write 2) 8; clamp_backward(min and max) = ge 3 + le 3 + logical_and_ 3 + where 5 = 14; the chunk's
#             backward concatenates the two halves' gradients into the 2f-wide gradient (read 4, write 4) 8        30
EXPERT_GLU_CLAMP_FORWARD_BYTES = 16.0
EXPERT_GLU_CLAMP_BACKWARD_BYTES = 30.0


def expert_glu_clamp_bytes_per_element(recompute_forward_share: float = 0.0) -> float:
    """HBM bytes per element of the expert width, per routed row, of Megatron's eager clamp + cat around its fused
    clamped GEGLU (EXPERT_GLU_CLAMP_*: 16 forward, 30 backward); a recomputed forward repeats the 16."""
    return EXPERT_GLU_CLAMP_FORWARD_BYTES * (1.0 + recompute_forward_share) + EXPERT_GLU_CLAMP_BACKWARD_BYTES


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


# SMs the flex dispatchers' kernels hold while they run: Megatron's defaults, `moe_deepep_num_sms: int = 20`
# (megatron/core/transformer/transformer_config.py at core_v0.15.0, 0d7e02bd, passed to DeepEP's
# `Buffer.set_num_sms` by `set_deepep_num_sms`, moe/fused_a2a.py) and `moe_hybridep_num_sms: int = 16` (the same file
# at core_v0.16.0, 3bec9aa9: "In pure NVL scenarios, 16 SMs can generally achieve good bandwidth"; passed to
# HybridEP as `num_sms_dispatch_api` / `num_sms_combine_api`, token_dispatcher.py). DeepEP's normal (training)
# kernels and HybridEP's run on those SMs as ordinary thread blocks for as long as they move data. The all-to-all
# dispatcher's NCCL kernels hold SMs too, one block per channel, but their channel count comes from NCCL's topology
# search at run time, not from a setting: not priced (None).
DISPATCHER_DEFAULT_SMS = {"deepep": 20, "hybridep": 16}


def dispatcher_sms(dispatcher: str, override: int | None = None) -> int | None:
    """SMs the EP dispatcher's kernels hold: the scenario's value, else Megatron's default for a flex dispatcher
    (above); None for the all-to-all dispatcher (NCCL's, not priced)."""
    if dispatcher not in DISPATCHER_DEFAULT_SMS:
        return None
    return int(override) if override else DISPATCHER_DEFAULT_SMS[dispatcher]


# HybridEP's measured dispatch and combine (data/hybridep_bandwidth.csv): DeepEP's hybrid-ep README times one call of
# `HybridEPBuffer.dispatch` / `combine` through its Python API (GPU events around the call, every kernel it launches
# included: tests/utils.py `bench`) and divides the call's "algorithm bytes" by it (deepseek-ai/DeepEP@7febc6e2
# docs/README_Hybrid-EP.md, tests/test_hybrid_ep.py). Across nodes those bytes are the rows the token goes to per
# node, its own node included (`count_rdma_send_from_routing_map`: "we do not set the local node map to zeros");
# inside one NVLink domain the rows this rank receives (`dispatched_hidden.numel() * 2`). Megatron's HybridEP
# dispatch and combine are these calls (`dispatch_with_permute` / `combine_with_unpermute`, fused_a2a.py at
# NVIDIA/Megatron-LM@6513e3e2), each backward the other (`HybridEPDispatch.backward` combines,
# `HybridEPCombine.backward` dispatches), and Megatron refuses FP8 dispatch ("HybridEP dispatcher does not support
# fp8 dispatch now"): the payload is 16-bit.
HYBRIDEP_TABLE = "hybridep_bandwidth.csv"


def hybridep_bytes(tokens: float, hidden: float, num_experts: int, top_k: int, ep: int, per_node: int,
                   elem_bytes: float = 2.0) -> tuple[str, float]:
    """(domain, algorithm bytes) of one HybridEP dispatch (or combine) by a rank with `tokens` tokens, the way DeepEP's
    benchmark counts them (above): "ib" when the EP group spans nodes (`per_node` ranks each): tokens x the expected
    number of nodes a token's k experts fall on, its own included, n·p_n with p_n = token_reaches(E, k, E·g/ep);
    "nvl" within one node: the rows this rank receives from the ep ranks, itself included, ep·T·p_r."""
    g = max(1, min(per_node, ep))
    if ep > g:
        nodes = ep / g
        return "ib", tokens * nodes * token_reaches(num_experts, top_k, num_experts * g / ep) * hidden * elem_bytes
    return "nvl", tokens * ep * token_reaches(num_experts, top_k, num_experts / ep) * hidden * elem_bytes


def hybridep_rates(gpu_id: str, domain: str, ranks: int, sms: int, per_node: int | None = None
                   ) -> tuple[float, float] | None:
    """(dispatch, combine) algorithm bandwidth in bytes/s of HybridEP's BF16 calls measured for this GPU, domain and
    EP size (and, across nodes, ranks per node: the H100 rows ran 8-GPU nodes), at the largest measured SM count not
    above `sms` (the dispatch saturates: 16 ranks on H100 move 57.7 GB/s at 8 SMs and 54.5 at 16); None where nothing
    was measured (the link model prices the exchange)."""
    best = None
    for r in rows(HYBRIDEP_TABLE):
        if r["gpu"] != gpu_id or r["domain"] != domain or int(r["ranks"]) != int(ranks) or int(r["sms"]) > sms:
            continue
        if domain == "ib" and per_node is not None and int(r["ranks_per_node"]) != int(per_node):
            continue
        if best is None or int(r["sms"]) > int(best["sms"]):
            best = r
    if best is None:
        return None
    return float(best["dispatch_bf16_gb_per_s"]) * 1e9, float(best["combine_gb_per_s"]) * 1e9


def overlap_unpaired_share(pp: int, vpp: int, microbatches: int) -> float:
    """Share of a step's micro-batch chunks whose EP exchange has no partner under Megatron's combined 1F1B
    (`overlap_moe_expert_parallel_comm`): the forward-only warm-up chunks and, as many, the backward-only cool-down
    chunks run alone; only the steady-state steps pair one chunk's forward with another's backward.

    Without pipelining `combined_1f1b_schedule_for_no_pipelining` runs "the forward step for the first microbatch
    ... alone" and the last backward alone: 1 of m (megatron/core/pipeline_parallel/combined_1f1b.py, core_v0.15.0).
    With the interleaved schedule (Megatron refuses the overlap with pp > 1 without virtual stages),
    `get_pp_rank_microbatches` (schedules.py, core_v0.15.0) gives rank r of p, with v chunks per rank,
    W = 2(p − r − 1) + (v − 1)·g + 1 warm-up chunks (g = `microbatch_group_size_per_vp_stage`, default p; "+ 1":
    "we schedule one extra micro-batch forward step before the 1f1b stages" under the overlap), capped at the m·v
    chunks of the step, and the cool-down runs the last W backwards (`convert_schedule_table_to_order`). Rank 0
    has the most; the share is its W/(m·v), the first stage gating the pipeline's fill and drain."""
    m = max(1, int(microbatches))
    if pp <= 1:
        return 1.0 / m
    v = max(1, int(vpp))
    total = m * v
    warmup = 2 * (pp - 1) + (v - 1) * pp + 1
    return min(warmup, total) / total


def overlapped_exposed(t_comm: float, t_compute: float, sm_share: float, unpaired_share: float) -> float:
    """Time one micro-batch (on average) adds to its compute when its EP exchange runs beside another micro-batch's
    compute (Megatron's combined 1F1B, `overlap_moe_expert_parallel_comm`), the exchange's kernels holding
    `sm_share` of the GPU's SMs while they run, `unpaired_share` of the chunks running alone
    (`overlap_unpaired_share`).

    Paired: during the t_comm seconds of the exchange the partner's compute runs on the other (1 − s) of the SMs;
    the compute, t_compute at the whole GPU, then ends at t_compute + s·t_comm if it outlasts the exchange
    (t_compute > (1 − s)·t_comm), otherwise the exchange ends last at t_comm: max(t_comm − t_compute, s·t_comm)
    added. Unpaired: the whole exchange is exposed (nothing to share SMs with). Per micro-batch:
    (1 − u)·max(t_comm − t_compute, s·t_comm) + u·t_comm. Compute is taken to slow in proportion to the SMs it
    loses (GEMMs; a memory-bound kernel on fewer SMs loses less: an upper bound there)."""
    s = min(max(sm_share, 0.0), 1.0)
    u = min(max(unpaired_share, 0.0), 1.0)
    return (1.0 - u) * max(0.0, t_comm - t_compute, s * t_comm) + u * t_comm


# ---------------------------------------------------------------------------------------------
# Serving: the fused MoE step of an inference engine (what one MoE layer of a forward does around and
# inside its two grouped expert GEMMs)


@dataclass(frozen=True)
class ServingMoeKernel:
    """How an engine runs one MoE layer of a serving forward.

    tile_rows: the smallest M tile of the grouped GEMMs, where the engine's kernels fix it. Each expert's rows form
    their own GEMM problem, computed in whole tiles, so an expert with x rows costs ceil(x / tile) tiles.
    The memory-bound kernels around the GEMMs are `fused_moe_pass_bytes`."""
    name: str
    tile_rows: dict[tuple[str, str], int]   # (GPU kernel family, GEMM input dtype class) -> smallest M tile
    # how the MoE step exchanges tokens under attention data parallelism (None: the generic all-to-all of
    # k 16-bit copies per token, speed._Serving._ep_comm); "allgather_reducescatter": attention_dp_exchange_bytes
    dp_exchange: str | None = None

    def tile_for(self, kernel_family: str, act_dtype: str) -> int | None:
        """The smallest M tile of the grouped GEMMs on this GPU for this activation format; None where the engine
        may pick kernels with smaller tiles (or other code), so no padding is priced."""
        return self.tile_rows.get((kernel_family, act_dtype))


# TensorRT-LLM's PyTorch backend, CUTLASS fused MoE (the default `moe_backend` on Hopper and Blackwell):
#   `CutlassFusedMoE.forward_chunk` (tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py
#   @000a01de66f0eab4ab05640711f0253f50f5209c): "dynamic quant + routing(topK, etc.) [+ fp4_allgather] +
#   scatter + gemm1 + swiglu + gemm2 + finalizeMoeRoute"; `CutlassMoeFCRunner::runMoe`, `gemm1`, `gemm2`
#   (cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu @000dea273b339cd5074b3e9b03d5c2c1b10171ba):
#   expandInputRowsKernel, the TMA warp-specialized grouped GEMM1 into a 16-bit intermediate, doActivation
#   (SwiGLU + quantization of the GEMM2 input), GEMM2 into a 16-bit intermediate, finalizeMoeRoutingKernel.
#   Grouped-GEMM tiles (cpp/tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.cpp
#   @0b53e94719f4bd566e9c75a7df32639a306dfec6): every SM90 grouped candidate has M = 128 or 256
#   (`get_candidate_tiles_sm90`, GROUPED_GEMM), every SM100 FP4 grouped candidate too
#   (`get_candidate_configs_sm100`, FP4_ONLY; the other SM100 grouped candidates have M >= 64 only with 2-SM
#   clusters, M 64 1-SM tiles being among them: FP8 on SM100 is left unpadded). `MoeGemmRunner::dispatchToArch`
#   (moe_gemm_template_dispatch.h @000a01de66f0eab4ab05640711f0253f50f5209c) runs FP8 on SM90 with those TMA
#   warp-specialized kernels only ("No fallback FP8 implementation available"), while 16-bit experts may fall back to
#   the SM80 kernels "because for some cases with small numbers of tokens SM80 is faster" (M tiles from 16), and
#   W4A16 / W4A8 experts run mixed-input kernels of their own: only FP8 on Hopper and NVFP4 on data-centre Blackwell
#   have 128 rows as the smallest tile an expert's rows fill.
# Under attention DP (`enable_attention_dp`, the perf-overview's MoE runs) `CutlassFusedMoE.forward_chunk`
# (@000a01de66f0eab4ab05640711f0253f50f5209c) quantizes its tokens first and then all-gathers them
# (`run_post_quant_allgather = self.use_dp and self.parallel_size > 1`: `allgather([x, x_sf,
# token_selected_experts, token_final_scales], self.mapping, dim=0)`), every rank runs its local experts over every
# gathered token, and `reducescatter_or_allreduce` reduce-scatters the 16-bit outputs (`reducescatter(inputs,
# self.mapping, dim=0)`): one all-gather and one reduce-scatter a MoE layer, not an all-to-all of k copies
# (attention_dp_exchange_bytes).
TRTLLM_CUTLASS_MOE = ServingMoeKernel("TensorRT-LLM CUTLASS fused MoE",
                                      {("hopper", "fp8"): 128, ("blackwell-dc", "fp4"): 128},
                                      dp_exchange="allgather_reducescatter")

SERVING_MOE_KERNELS = {"trtllm": TRTLLM_CUTLASS_MOE}


def serving_moe_kernel(engine: str) -> ServingMoeKernel | None:
    """The fused-MoE step `engine` runs, where gpuplan prices its kernels; None: the grouped GEMMs alone."""
    return SERVING_MOE_KERNELS.get(engine)


# vLLM's and SGLang's fused MoE (Triton): `fused_experts_impl` sorts the step's (token, expert) pairs by expert and
# pads each expert's count up to a multiple of BLOCK_SIZE_M (`moe_align_block_size`), then runs one Triton GEMM over
# the padded rows, tile by tile, for GEMM1 and again for GEMM2 (vllm/model_executor/layers/fused_moe/fused_moe.py
# @000d1458098ebf47491dad470d164d443ab18a9c; SGLang's python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py
# @006fc20223af95669cb7284d2a210d412443a2b4, "Adapted from" vLLM's). BLOCK_SIZE_M comes from
# `try_get_optimal_moe_config(..., M)`, M the tokens of the call (capped at the fused-MoE chunk): a tuned config file
# for (E, N = the expert intermediate size on this rank, device, dtype) if one ships with the engine, its entry at the
# key nearest M (`min(configs.keys(), key=lambda x: abs(x - M))`); else `get_default_config`: 16-bit experts
# BLOCK_SIZE_M 16 if M <= E else 64 in both engines; per-tensor FP8 (`fp8_w8a8`) the same in vLLM, 64 / 128 in
# SGLang. The tiles' time is the padded rows' FLOPs at the dense GEMM efficiency (no fitted row constant: the tile
# is the engine's own). Other expert formats (Marlin / MXFP4 / block-quantized FP8 kernels) are not read here.
TRITON_MOE_ENGINES = ("vllm", "sglang")


@lru_cache(maxsize=1)
def _triton_moe_configs() -> dict[tuple, dict[int, int]]:
    """(engine, E, N, gpu id, config dtype) -> {M key: BLOCK_SIZE_M} of the tuned configs gpuplan ships
    (data/triton_moe_configs.csv, each row the engine's own config file at a pinned commit)."""
    out: dict[tuple, dict[int, int]] = {}
    for r in rows("triton_moe_configs.csv"):
        key = (r["engine"], int(r["experts"]), int(r["n_per_shard"]), r["gpu"], r["config_dtype"])
        out.setdefault(key, {})[int(r["m_tokens"])] = int(r["block_size_m"])
    return out


def triton_moe_block_m(engine: str, tokens: float, num_experts: int, n_per_shard: int, gpu_id: str,
                       dtype_class: str) -> int | None:
    """BLOCK_SIZE_M of vLLM's / SGLang's Triton fused MoE for a call over `tokens` tokens (sources above); None for
    an engine or expert format this rule does not describe."""
    if engine not in TRITON_MOE_ENGINES:
        return None
    cfg = "bf16" if dtype_class in ("fp16", "bf16") else ("fp8_w8a8" if dtype_class == "fp8" else None)
    if cfg is None:
        return None
    m = max(1, int(round(tokens)))
    tuned = _triton_moe_configs().get((engine, int(num_experts), int(n_per_shard), gpu_id, cfg))
    if tuned:
        return tuned[min(tuned, key=lambda x: abs(x - m))]
    small = m <= num_experts
    if engine == "sglang" and cfg == "fp8_w8a8":
        return 64 if small else 128
    return 16 if small else 64


@lru_cache(maxsize=8192)
def padded_rows_per_expert(tokens: int, top_k: int, num_experts: int, tile: int) -> float:
    """E[ceil(X / tile) · tile]: the rows one expert's grouped-GEMM problem computes, padding included, when
    `tokens` tokens each pick `top_k` distinct experts of `num_experts` uniformly at random, so one expert's
    row count X is Binomial(tokens, k/E). Summed over the pmf within 12 standard deviations of the mean
    (log-pmf by lgamma); the rest of the mass is below 1e-30."""
    n = int(tokens)
    if n <= 0 or top_k <= 0 or num_experts <= 0 or tile <= 0:
        return 0.0
    p = min(1.0, top_k / num_experts)
    if p >= 1.0:
        return float(math.ceil(n / tile) * tile)
    mean = n * p
    sd = math.sqrt(n * p * (1.0 - p))
    lo = max(0, int(math.floor(mean - 12.0 * sd - 1.0)))
    hi = min(n, int(math.ceil(mean + 12.0 * sd + 1.0)))
    log_p, log_q, log_nf = math.log(p), math.log1p(-p), math.lgamma(n + 1.0)
    total = 0.0
    for x in range(lo, hi + 1):
        w = math.exp(log_nf - math.lgamma(x + 1.0) - math.lgamma(n - x + 1.0) + x * log_p + (n - x) * log_q)
        total += w * math.ceil(x / tile)
    return tile * total


def gemm_input_bytes(dtype_class: str) -> float:
    """Bytes per element of a quantized GEMM input as TensorRT-LLM's fused MoE moves it (§3.17): NVFP4 0.5 + one
    E4M3 scale per 16 = 0.5625, FP8 1, 16-bit 2."""
    return {"fp4": 0.5 + 1.0 / 16.0, "fp8": 1.0}.get(dtype_class, 2.0)


def fused_moe_pass_bytes(tokens: float, routed_rows: float, hidden: float, gemm1_n: float, inter: float,
                         in_bytes: float, out_bytes: float = 2.0, quantize_input: bool = True,
                         output_tokens: float | None = None) -> float:
    """HBM bytes of the memory-bound work of one MoE layer of TensorRT-LLM's CUTLASS fused MoE (sources at
    TRTLLM_CUTLASS_MOE) for `tokens` tokens whose `routed_rows` (token, expert) pairs run on this GPU.
    `in_bytes`: bytes per element of a GEMM input (NVFP4 0.5 + one FP8 scale per 16 elements; FP8 1;
    16-bit 2), `out_bytes`: the 16-bit GEMM outputs; `gemm1_n`: GEMM1's width (2 x inter when gated).

      dynamic quant   read each token's 16-bit hidden row, write it quantized         tokens x h x (2 + a)
                      (FP8 / NVFP4 checkpoints only: `static_quantize_e4m3_per_tensor`, `fp4_quantize`)
      expand (scatter) read a token's row once per routed copy, write the copy         rows x h x 2a
      GEMM1           read its input rows, write the 16-bit intermediate                rows x (h·a + n1·o)
      activation      read the intermediate, write the quantized GEMM2 input            rows x (n1·o + I·a)
      GEMM2           read its input rows, write the 16-bit per-copy output             rows x (I·a + h·o)
      finalize        read every copy's output, write one weighted sum per token        rows x h·o + tokens x h·o
    Under attention DP the quantized tokens of every rank are gathered first (`fp4_allgather`) and the
    finalize writes a row for each gathered token (`output_tokens`, before the reduce-scatter).
    The GEMMs' weight reads are priced with the weights (touched experts); padding rows are computed but
    neither read nor written (TMA bounds the problem at the expert's real rows)."""
    a, o = in_bytes, out_bytes
    out_tokens = tokens if output_tokens is None else output_tokens
    per_token = hidden * ((2.0 + a) if quantize_input else 0.0)
    per_row = hidden * 2.0 * a + (hidden * a + gemm1_n * o) + (gemm1_n * o + inter * a) + (inter * a + hidden * o) \
        + hidden * o
    return tokens * per_token + routed_rows * per_row + out_tokens * hidden * o


def attention_dp_exchange_bytes(tokens_per_rank: float, ranks: int, hidden: float, top_k: int, in_bytes: float,
                                out_bytes: float = 2.0) -> tuple[float, float]:
    """(all-gather, reduce-scatter) full-array bytes of one MoE layer of TensorRT-LLM's CUTLASS fused MoE under
    attention data parallelism over `ranks` ranks of `tokens_per_rank` tokens each (sources at TRTLLM_CUTLASS_MOE).
    The all-gather carries, per token, the quantized hidden row (`in_bytes` per element: NVFP4 0.5 + one FP8 scale
    per 16 elements, FP8 1, 16-bit 2), its k expert ids (int32) and k routing weights (float32: `token_final_scales`
    is asserted float32); the reduce-scatter the `out_bytes` (16-bit) output row of every gathered token. The
    collective's time takes these as the whole gathered array (comm.all_gather_time: each rank moves (n − 1)/n of
    it)."""
    gathered = tokens_per_rank * ranks
    return gathered * (hidden * in_bytes + top_k * (4.0 + 4.0)), gathered * hidden * out_bytes


DEEPGEMM_LAYOUTS = ("contiguous", "masked")


@lru_cache(maxsize=1)
def measured_rows_half() -> float:
    """d0_M of a grouped expert GEMM as its kernel measures it: DeepGEMM's README (@a6d97a1) times FP8 grouped
    GEMMs on an H800 at one shape for 256 ... 8192 rows per group (data/grouped_gemm_rows.csv). The row factor
    is M / (M + d0_M) times a rate of its own, so d0_M minimises the squared log error, that rate taken in
    closed form (the mean log ratio) at each d0_M of a fine logarithmic grid: about 112 rows. Every M there is a
    multiple of the 128-row tile, so padding is not in it (padded_rows_per_expert prices it apart)."""
    import numpy as np
    table = [r for r in rows("grouped_gemm_rows.csv") if r["layout"] in DEEPGEMM_LAYOUTS]
    m = np.array([float(r["m_per_group"]) for r in table])
    return _half_rows(m, np.log([float(r["tflops_per_s"]) for r in table]), 1e5)


def _half_rows(m: Any, log_rate: Any, upper: float) -> float:
    """The D of a rate form A·M/(M + D) that best fits `log_rate` at row counts `m` (numpy arrays): at each D of
    a fine logarithmic grid from 1 to `upper`, A in closed form (the mean log ratio), the D of least squared log
    error."""
    import numpy as np
    grid = np.exp(np.linspace(np.log(1.0), np.log(upper), 20001))
    resid = log_rate[None, :] - np.log(m[None, :] / (m[None, :] + grid[:, None]))
    sse = ((resid - resid.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(sse))])


# Seconds the lent H200's (virtualised) host took to enqueue one small CUDA op while the GPU was busy
# (validation/device/h200-2026-12-04-expert_gemm.csv, host_enqueue_small_op): a grouped GEMM shorter than twice this
# was timed by the host, not the GPU, and is left out of the fit below.
LENT_HOST_ENQUEUE_S = 29e-6


def _kernel_seconds(r: dict[str, str]) -> float:
    return 2.0 * float(r["groups"]) * float(r["m_per_group"]) * float(r["k"]) * float(r["n"]) / (
        float(r["tflops_per_s"]) * 1e12)


@lru_cache(maxsize=8)
def measured_total_rows_half(d0: float) -> float:
    """D of a training grouped expert GEMM's row factor M_tot/(M_tot + D), M_tot = the rows of every local expert in
    the one grouped call, as gpuplan's lent H200 measured it (data/grouped_gemm_rows.csv, layout torch_grouped_mm:
    torch._grouped_mm, CUTLASS grouped GEMMs, bf16, 4 and 16 experts of Qwen3-30B-A3B and gpt-oss-120b shapes at
    128 ... 8192 rows each). The factor is on the total, not the rows per expert: 16 experts of M rows run like 4
    of 4M (4,096 rows in all: 433.4 and 431.7 TFLOP/s; 8,192: 619.0 and 610.8): the call fills the GPU's SMs with
    the tiles of all groups. About 1,180 rows once the host-timed points (kernels under 58 µs) are left out.
    Fitted as measured_rows_half is (`_half_rows`), with the size factor K/(K + d0)·N/(N + d0) of each shape taken
    out."""
    import numpy as np
    table = [r for r in rows("grouped_gemm_rows.csv") if r["layout"] == "torch_grouped_mm"
             and _kernel_seconds(r) >= 2 * LENT_HOST_ENQUEUE_S]
    m_tot = np.array([float(r["m_per_group"]) * float(r["groups"]) for r in table])
    k, n = (np.array([float(r[c]) for r in table]) for c in ("k", "n"))
    log_rate = np.log([float(r["tflops_per_s"]) for r in table]) - np.log(k / (k + d0) * n / (n + d0))
    return _half_rows(m_tot, log_rate, 1e6)


# Megatron's router dtype (TransformerConfig.moe_router_dtype; docs/speed.md §2.16). Bytes of the float formats.
ROUTER_DTYPE_BYTES = {"fp32": 4, "fp64": 8}


def router_cast_bytes_per_element(router_dtype: str, act_bytes: float, recompute_forward_share: float = 0.0) -> float:
    """HBM bytes per element of the router's input (tokens of this rank x hidden), forward + backward, that a
    router dtype above the activations' adds over the 16-bit router: `RouterGatingLinearFunction`
    (megatron/core/transformer/moe/moe_utils.py L944-1002 at NVIDIA/Megatron-LM@76065f17, the Megatron-LM of NeMo
    RL @06beed91 = v0.4's table), a = activation bytes, p = the router dtype's:
      fp64  forward  `inp.to(router_dtype)` (read a, write p), then `torch.mm` reads the p-wide copy instead of
            the a-wide input (p - a): 2p; backward `torch.mm(grad_output, weight.to(fp64))` writes the input
            gradient in p (p - a), `.to(ctx.input_dtype)` (read p, write a), `inp.to(fp64)` for the weight
            gradient (read a, write p) and its `torch.mm` reading that copy (p - a): 4p. 48 B at bf16.
      fp32  forward  `te_general_gemm(weight, inp, fp32)` on the 16-bit operands: nothing; backward as fp64
            (the TE GEMMs take the fp32 copies): 4p = 16 B.
    A recomputed forward repeats its forward. The fp64 GEMMs' arithmetic (2·T·h·E FLOPs each, one forward and two
    backward) is not priced: the GPU catalog carries no FP64 rate (H100 SXM: 67 TFLOP/s FP64 tensor, datasheet),
    and at Qwen3-30B-A3B's T/tp = 1,800 tokens they are ~45 us a layer and micro-batch (docs/speed.md §2.16)."""
    p = ROUTER_DTYPE_BYTES.get(router_dtype)
    if p is None or p <= act_bytes:
        return 0.0
    fwd = 2.0 * p if router_dtype == "fp64" else 0.0
    return fwd * (1.0 + recompute_forward_share) + 4.0 * p


def unfused_probs_weighting_bytes_per_element(router_dtype: str, act_bytes: float,
                                              recompute_forward_share: float = 0.0) -> float:
    """HBM bytes per element of the expert width (f / etp), per routed row, of TEGroupedMLP's routing-probability
    weighting when Megatron runs the gated activation unfused (bias_activation_fusion off): `intermediate_parallel =
    intermediate_parallel * permuted_probs` then `.to(original_dtype)` (megatron/core/transformer/moe/experts.py
    L809-811 at terrykong/Megatron-LM@2ff0f099, NeMo RL v0.3.0's pin). The product takes the probabilities' dtype
    r = max(a, p) (PyTorch type promotion; p = a for the model-dtype router, whose softmax is `.type_as(logits)`):
      forward   mul: read a, write r; the cast back (r != a): read r, write a
      backward  the cast's backward (r != a): read a, write r; grad·probs: read r, write r, and the engine's cast
                to the bf16 input (r != a): read r, write a; grad·input for the probs' gradient: read r + a,
                write r, summed over the width: read r
    bf16 16 B, fp32 46 B, fp64 82 B. The fused kernel (`weighted_bias_swiglu_impl`) weights inside the activation
    region and adds nothing. A recomputed forward repeats its forward."""
    a = float(act_bytes)
    r = max(a, float(ROUTER_DTYPE_BYTES.get(router_dtype, a)))
    cast = 1.0 if r != a else 0.0
    fwd = (a + r) + cast * (r + a)
    bwd = cast * (a + r) + 2 * r + cast * (r + a) + (2 * r + a) + r
    return fwd * (1.0 + recompute_forward_share) + bwd

"""Host time a Megatron-Core dropless MoE step exposes at its per-layer host synchronisation (docs/speed.md §2.7,
"Dropless dispatch: the per-layer host sync, priced").

What the code does (NVIDIA/Megatron-LM at core_v0.15.0 = 0d7e02bd, the Megatron-Core of the NeMo 25.11 container;
line numbers of megatron/core/transformer/moe/token_dispatcher.py at that tag):

* all-to-all dispatcher, dropless (`MoEAlltoAllTokenDispatcher.preprocess`): the split sizes of the EP all-to-all
  are computed on the GPU and must reach the host before the exchange, so the sync point is `before_ep_alltoall`
  (:524; `before_finish` without EP or TP, :533); `_maybe_dtoh_and_synchronize` copies them on a side stream at
  `before_permutation_1` and blocks the host on that copy's event at the sync point (`self.d2h_event.synchronize()`,
  :859). Once per MoE layer forward. With `moe_expert_capacity_factor` + `moe_pad_expert_input_to_capacity`
  (drop-and-pad, `train.moe_capacity_factor`) the counts are host constants (`torch.full(... capacity ...)`, :446-466)
  and `cuda_sync_point` stays "no_sync" (:415): no sync. A capacity factor without padding (or
  `moe_router_padding_for_fp8`) still syncs, earlier (`before_permutation_1`, :480).
* all-gather dispatcher: `tokens_per_expert = self.local_map.sum(dim=0).long().cpu()` (:280), once per forward.
* flex dispatcher over DeepEP: the dispatch busy-waits on the host for the received counts ("the CPU will wait for
  GPU's signal to arrive", megatron/core/transformer/moe/fused_a2a.py:103 at the same tag); over HybridEP without a
  static rank capacity the dispatch copies the tokens per expert to the host (`_HybridEPManager`, token_dispatcher.py
  at NVIDIA/Megatron-LM@6513e3e2, docs/speed.md §2.7). Once per forward.
* backward: none of them syncs. The all-to-all's backward takes the saved host split lists (`_AllToAll`), Transformer
  Engine's GroupedLinear keeps `ctx.m_splits` (a host list) for its backward GEMMs, and `TEGroupedMLP.forward`'s
  `tokens_per_expert.tolist()` (experts.py) reads the tensor the dispatcher already moved to the host.
* a recomputed MoE layer (full activation recompute) runs the dispatcher again: one more sync, inside the backward.

Between two syncs the host issues the rest of one MoE layer's forward and the next layer's forward up to its own
sync: one decoder layer of forward ops. The GPU cannot finish that segment before the host has issued it, nor before
it has run it, so a segment lasts at least max(host issue time, GPU time) (the lower bound; at most their sum). The
host runs ahead again only where a segment holds backward work (the autograd engine issues it while the GPU runs): the
last segment of each forward chunk of the pipeline schedule (its remainder, the chunk's backward under 1F1B, the next
chunk's forward head), and every segment under EP overlap (the combined 1F1B schedule pairs each layer's forward with
another micro-batch's backward). Forward-only passes (log-prob) hide nothing.

Host seconds per op: gpuplan's per-op unit of eager PyTorch (estimate/host_issue.py: 18.33 us per Python-issued op on
the reference host, 12.33 us per autograd-engine op), and the bare-op cost (host_issue.BARE_OP_CPU_S, 2.6 us: one op
from a Python loop) for the kernels Transformer Engine's GroupedLinear launches per local expert from C++ loops.
Nothing here is read from a training row.
"""
from __future__ import annotations

from dataclasses import dataclass

# forward syncs per MoE layer, dropless, by dispatcher (module docstring); drop-and-pad has none
FORWARD_SYNCS_PER_MOE_LAYER = {"alltoall": 1, "allgather": 1, "deepep": 1, "hybridep": 1}
BACKWARD_SYNCS_PER_MOE_LAYER = 0

# Python-level device calls of the dispatcher beyond the layer's router/permutation ops, per MoE layer forward
# (token_dispatcher.py at core_v0.15.0). All-to-all: the all-gather of the per-expert counts
# (`gather_from_sequence_parallel_region`), the DtoH copies of input_splits, output_splits and the tokens per local
# expert (`_maybe_dtoh_and_synchronize`), the two dispatch all-to-alls (tokens, probs), the sort by local expert
# (`sort_chunks_by_idxs`), its inverse before the combine, the combine all-to-all: 1 + 3 + 2 + 1 + 1 + 1 = 9.
# Flex (DeepEP / HybridEP): dispatch, combine, the routing-map/probs conversion and the host count read: 4.
DISPATCH_EXTRA_OPS = {"alltoall": 9, "allgather": 9, "deepep": 4, "hybridep": 4}

# `moe_permute_fusion` off (train.moe_permute_fusion false; NeMo RL v0.4's grpo_math_1B.yaml L111 @06beed91): the
# all-to-all dispatcher's permutations as torch ops instead of Transformer Engine's fused ones (moe_utils.py `permute`,
# `unpermute`, `sort_chunks_by_idxs` and token_dispatcher.py L566-760 at NVIDIA/Megatron-LM@76065f17, the pin of NeMo
# RL @06beed91), Python-level device calls per MoE layer forward, each less the one fused call it replaces:
#   permute with probs: routing_map.T.contiguous, arange, masked_select (indices), probs.T.contiguous,
#     masked_select (probs), index_select (tokens) = 6 for 1 fused                                              +5
#   sort by local expert after the dispatch (tokens and probs): split + cat, split + cat = 4 for 1               +3
#   unsort before the combine: split + cat = 2 for 1                                                            +1
#   unpermute (probs already applied in the experts): zeros, scatter_add_ = 2 for 1                             +1
# = 10; and autograd-engine nodes per layer backward: TransposeBackward + CloneBackward + MaskedSelectBackward of
# the probs, IndexSelectBackward of the tokens, Split/CatBackward of the three sorts (2 + 2 + 2) and
# ScatterAddBackward = 11 for the 4 fused functions' backward: +7. (`masked_select` also synchronises the host
# itself, at the layer's existing sync point, before the all-to-all: no extra segment is priced.)
UNFUSED_PERMUTE_EXTRA_OPS = (10, 7)

# Kernels Transformer Engine's GroupedLinear launches per local expert and forward, from C++ loops
# (transformer_engine/pytorch/module/grouped_linear.py, _GroupedLinear.forward): one GEMM per split
# (`general_grouped_gemm` -> per-expert cuBLAS on a stream pool, cublaslt_gemm.cu at NVIDIA/TransformerEngine@d0067d0d);
# under FP8 also one quantize per split (`tex.split_quantize(inp_view, m_splits, input_quantizers)`) and the per-expert
# weight-workspace lookup (`module.get_weight_workspace` in a Python loop over num_gemms).
EXPERT_LAUNCHES_PER_LINEAR = {False: 1, True: 3}
# and per backward (_GroupedLinear.backward, same file): the dgrad and the wgrad GEMM per split, under FP8 also the
# grad-output quantize per split (`tex.split_quantize(grad_output_view, ctx.m_splits, ctx.grad_output_quantizers)`)
EXPERT_BACKWARD_LAUNCHES_PER_LINEAR = {False: 2, True: 3}
GROUPED_LINEARS_PER_EXPERT_MLP = 2     # linear_fc1 (gate+up), linear_fc2 (TEGroupedMLP, experts.py)


@dataclass(frozen=True)
class SyncExposure:
    """Host-sync exposure of one micro-batch on the bottleneck stage."""
    seconds: float             # host time the GPU waits for, per micro-batch
    syncs: float               # host syncs per micro-batch (MoE layers x forward passes)
    host_layer_fwd_s: float    # host seconds to issue one layer's forward
    gpu_layer_fwd_s: float     # GPU seconds of one layer's forward
    forward_segments: float    # segments holding only forward work (exposed)
    host_layer_bwd_s: float = 0.0
    gpu_layer_bwd_s: float = 0.0


def forward_syncs(dispatcher: str, drop_and_pad: bool) -> int:
    """Host syncs per MoE layer forward (module docstring); 0 under drop-and-pad (all-to-all only)."""
    if drop_and_pad and dispatcher == "alltoall":
        return 0
    return FORWARD_SYNCS_PER_MOE_LAYER[dispatcher]


def layer_forward_host_seconds(python_ops: float, dispatcher: str, local_experts: float, fp8: bool,
                               python_op_s: float, launch_s: float) -> float:
    """Host seconds to issue one MoE decoder layer's forward: its Python-level ops (`python_ops`, the counted layer
    forward), the dispatcher's collectives and copies, and Transformer Engine's per-expert launches."""
    per_expert = GROUPED_LINEARS_PER_EXPERT_MLP * EXPERT_LAUNCHES_PER_LINEAR[bool(fp8)]
    return (python_ops + DISPATCH_EXTRA_OPS[dispatcher]) * python_op_s + local_experts * per_expert * launch_s


def layer_backward_host_seconds(engine_ops: float, local_experts: float, fp8: bool, engine_op_s: float,
                                launch_s: float) -> float:
    """Host seconds to issue one MoE decoder layer's backward: its autograd-engine ops and Transformer Engine's
    per-expert backward launches."""
    per_expert = GROUPED_LINEARS_PER_EXPERT_MLP * EXPERT_BACKWARD_LAUNCHES_PER_LINEAR[bool(fp8)]
    return engine_ops * engine_op_s + local_experts * per_expert * launch_s


def exposure(moe_layers: float, syncs_per_layer: int, chunks: float, host_fwd_s: float, host_bwd_s: float,
             gpu_fwd_s: float, gpu_bwd_s: float, *, forward_only: bool = False, paired: bool = False,
             recompute: bool = False) -> SyncExposure:
    """Exposed host seconds per micro-batch. `moe_layers` MoE layers on the stage in `chunks` forward chunks (virtual
    pipeline stages, 1 without); per-layer host/GPU seconds of the forward and the backward. A forward-only segment
    costs max(host, GPU); the GPU time is already in the step, so max(host - GPU, 0) is added. The last segment of a
    chunk holds that chunk's backward (1F1B: moe_layers/chunks layers of it), every segment holds one backward layer
    under EP overlap (`paired`), none does in a forward-only pass. A recomputed forward (`recompute`) syncs again inside the backward, with that layer's backward in the same
    segment."""
    syncs = moe_layers * syncs_per_layer
    if syncs <= 0:
        return SyncExposure(0.0, 0.0, host_fwd_s, gpu_fwd_s, 0.0, host_bwd_s, gpu_bwd_s)
    fwd_only = syncs if forward_only else (0.0 if paired else max(syncs - chunks, 0.0))
    mixed = syncs - fwd_only
    # a mixed segment holds one backward layer under EP overlap, a whole chunk's backward under 1F1B
    bwd_layers = 1.0 if paired else moe_layers / max(chunks, 1.0)
    t = fwd_only * max(host_fwd_s - gpu_fwd_s, 0.0)
    t += mixed * max(host_fwd_s + bwd_layers * (host_bwd_s - gpu_bwd_s) - gpu_fwd_s, 0.0)
    if recompute and not forward_only:
        t += syncs * max(host_fwd_s + host_bwd_s - gpu_fwd_s - gpu_bwd_s, 0.0)
    return SyncExposure(t, syncs * (2 if recompute and not forward_only else 1), host_fwd_s, gpu_fwd_s, fwd_only,
                        host_bwd_s, gpu_bwd_s)

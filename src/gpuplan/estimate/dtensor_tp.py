"""Tensor-parallel collectives of NeMo RL v0.3.0's DTensor plan for Llama with sequence parallelism (docs/speed.md
§2.20).

NeMo RL's DTensor worker parallelises transformers' LlamaForCausalLM with `parallelize_module` and the plan of
`_parallelize_llama` (nemo_rl/models/dtensor/parallelize.py L144-179, NVIDIA-NeMo/RL@b1c86a8 = v0.3.0): with
`sequence_parallel` the norms are `SequenceParallel()` (their output stays a DTensor sharded on the sequence,
`use_local_output=False`), q/k/v and gate/up are plain `ColwiseParallel()` (default `input_layouts=Replicate()`), and
o_proj/down_proj `RowwiseParallel(output_layouts=Shard(1))`. There is no `PrepareModuleInput` around the attention or
the MLP, so the sequence-sharded norm output reaches each column-parallel linear as a DTensor, and since its declared
input layout equals the desired one the style's hook does not redistribute it (torch/distributed/tensor/parallel/
style.py `ColwiseParallel._prepare_input_fn`, torch 2.7.0 = NeMo RL's pin and 2.13.0); sharding propagation of the
`mm` (Shard(0) input x Shard(1) weight: no strategy without a redistribution) all-gathers the input inside each linear:
five all-gathers of the layer's [tokens, h] activation in the forward where Megatron's sequence parallelism (and
torchtitan's plan, which puts `PrepareModuleInput(desired_input_layouts=Replicate())` on attention and feed_forward)
runs two. The backward re-gathers the saved sequence-sharded input for each weight gradient and gathers the row-
parallel outputs' gradients once per matmul.

Counted, not assumed: scripts/time_dtensor_tp.py runs that plan on transformers' Llama (torch 2.13.0+cpu, transformers
5.25.0, a fake process group of 8 ranks) and counts every placement change DTensor makes (torch's
`redistribute_local_tensor`: the hooks' explicit ones and sharding propagation's implicit ones) per decoder layer, by
the difference of two layer counts. Each is an all-gather (Shard -> Replicate) or a reduce-scatter (Partial -> Shard)
of the [tokens, h] activation (or its gradient) in the activation dtype.
"""
from __future__ import annotations

# per decoder layer (scripts/time_dtensor_tp.py, tp 8, sequence parallel; 4 vs 8 layers)
FORWARD_ALL_GATHERS = 5        # q, k, v, gate, up: each all-gathers the norm's sequence-sharded output
FORWARD_REDUCE_SCATTERS = 2    # o_proj, down_proj: RowwiseParallel(output_layouts=Shard(1))
BACKWARD_ALL_GATHERS = 9       # 5 re-gathers of the saved inputs (weight gradients), 4 of the row outputs' gradients
BACKWARD_REDUCE_SCATTERS = 6   # the column-parallel input gradients (Partial) back to the sequence shard

# Which models NeMo RL parallelizes with this plan is model knowledge: models/hf_ops.nemo_rl_llama_tp_plan


def collectives_per_layer(forward_only: bool, recompute_forward_share: float = 0.0) -> tuple[float, float]:
    """(all-gathers, reduce-scatters) of the [tokens, h] activation per decoder layer and micro-batch: the forward's
    for a no-grad pass, else forward + backward, plus `recompute_forward_share` of the forward's for a recomputed
    forward (NeMo RL's activation_checkpointing wraps only the MLP, parallelize.py L460-462, whose re-run forward
    gathers twice and reduce-scatters once: not distinguished here)."""
    ag, rs = float(FORWARD_ALL_GATHERS), float(FORWARD_REDUCE_SCATTERS)
    if forward_only:
        return ag, rs
    share = 1.0 + recompute_forward_share
    return share * ag + BACKWARD_ALL_GATHERS, share * rs + BACKWARD_REDUCE_SCATTERS

"""Activation checkpointing as each framework implements it: what a layer keeps, what it recomputes.

Three mechanisms, selected by `train.recompute` and the framework:

* **full** — a checkpointed layer keeps only its input; its forward runs again inside its backward
  (HF `gradient_checkpointing`, torchtitan `full`, Megatron `--recompute-granularity full`).
  `train.recompute_layers` limits it to the first N layers of each pipeline stage, the rest keeping
  everything (Megatron `--recompute-method block --recompute-num-layers N`; torchtitan v0.2's
  layer-selective option "every k-th layer" is N = stage layers / k).
  `train.recompute_group` checkpoints groups of N consecutive layers (Megatron `--recompute-method
  uniform --recompute-num-layers N`): one saved input per group, a whole group recomputed at once.
* **selective, per op** (torchtitan): every layer is wrapped in PyTorch's selective checkpoint
  context with a save list. torchtitan/distributed/activation_checkpoint.py @b5bcd76 (2026-08-21;
  the same policy as v0.2.2 @73a0e69 `_apply_op_sac`): the outputs of compute-intensive ops (matmuls,
  attention kernels) and of reduce-scatter / all-to-all are saved, except that every second matmul
  of the layer is recomputed (`meta[mm_count_key] % 2 == 0`), the MoE router's matmul is always
  recomputed (`force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]`); norms, activations,
  rotary and every element-wise op are recomputed. The checkpoint wrapper also keeps the layer input.
* **selective, core attention** (Megatron `--recompute-granularity selective`, default
  `--recompute-modules core_attn`; Korthikanti et al. 2022 §5): the attention core (QK^T, softmax,
  dropout, attention over V) is recomputed. Under flash attention the core saves no S x S tensor,
  so only eager attention's scores are dropped. Other frameworks have no selective mode of their
  own; gpuplan applies this one to them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..models.spec import ModelSpec
from .activations import LSE_BYTES


@dataclass(frozen=True)
class RecomputePlan:
    """How a stage's layers are checkpointed, and the share of forward work done again."""
    kind: str                 # none | full | selective-op | selective-core | selective-modules
    full_fraction: float      # share of the stage's layers checkpointed whole (keep only their input)
    group: int                # consecutive layers sharing one checkpoint (Megatron uniform)
    linear_share: float       # share of the layers' linear forward FLOPs recomputed in backward
    attention_share: float    # share of the attention core's forward recomputed
    elementwise_share: float  # share of element-wise forward passes recomputed
    tp_forward_share: float   # share of the forward's TP collectives repeated
    modules: tuple[str, ...] = ()   # Megatron selective: the --recompute-modules beyond core_attn (layernorm,
                                    # moe_act), each recomputing its own forward in backward (speed._module_recompute)


def recompute_plan(framework: str, recompute: str, model: ModelSpec, stage_layers: float,
                   recompute_layers: int | None = None, recompute_group: int = 1,
                   modules: list[str] | tuple[str, ...] | None = None) -> RecomputePlan:
    """The checkpointing a framework applies for `train.recompute` on one pipeline stage. `modules`: Megatron's
    --recompute-modules under selective granularity (None: its default, core_attn alone); without core_attn the
    attention core is not recomputed ("selective-modules")."""
    if recompute == "full":
        layers = max(stage_layers, 1.0)
        f = 1.0 if recompute_layers is None else min(float(recompute_layers), layers) / layers
        return RecomputePlan("full", f, max(1, recompute_group), f, f, f, f)
    if recompute == "selective" and framework == "torchtitan":
        return RecomputePlan("selective-op", 0.0, 1, op_sac_recomputed_linear_share(model), 0.0, 1.0, 0.5)
    if recompute == "selective" and modules is not None:
        others = tuple(m for m in modules if m != "core_attn")
        if "core_attn" in modules:
            return RecomputePlan("selective-core", 0.0, 1, 0.0, 1.0, 0.0, 0.0, others)
        return RecomputePlan("selective-modules", 0.0, 1, 0.0, 0.0, 0.0, 0.0, others)
    if recompute == "selective":
        return RecomputePlan("selective-core", 0.0, 1, 0.0, 1.0, 0.0, 0.0)
    return RecomputePlan("none", 0.0, 1, 0.0, 0.0, 0.0, 0.0)


def _layer_matmuls(model: ModelSpec) -> list[tuple[str, int, int, float, bool]]:
    """(kind, in, out, per-token count per layer, row-parallel) of each matmul of a decoder layer, in
    forward order (the model spec lists a layer's blocks in the order its forward calls them). The
    last matmul of each group (o_proj after q/k/v, down_proj after gate/up) is the row-parallel one."""
    blocks = [b for b in model.blocks if b.linear is not None and b.layer_scope == "layer"]
    out = []
    for i, b in enumerate(blocks):
        last_of_kind = i + 1 == len(blocks) or blocks[i + 1].kind != b.kind
        row = last_of_kind and b.kind in ("attn", "mlp", "expert", "shared_expert")
        out.append((b.kind, b.linear[0], b.linear[1], b.count * b.active_fraction / max(model.num_layers, 1), row))
    return out


def _op_sac_split(model: ModelSpec) -> tuple[list, list, list]:
    """(saved, recomputed, always-saved) matmuls under torchtitan's per-op policy. Routed experts run
    as grouped GEMMs outside the mm count; they are counted as saved (the OOM-safe side: their
    save/recompute status depends on the torch release's compute-intensive op list)."""
    saved, recomputed, always = [], [], []
    n = 0
    for mm in _layer_matmuls(model):
        kind = mm[0]
        if kind == "router":
            recomputed.append(mm)          # force-recomputed by shape, outside the count
            continue
        if kind == "expert":
            always.append(mm)
            continue
        n += 1
        (recomputed if n % 2 == 0 else saved).append(mm)
    return saved, recomputed, always


def op_sac_recomputed_linear_share(model: ModelSpec) -> float:
    """Share of a layer's linear forward FLOPs that torchtitan's per-op policy recomputes."""
    saved, recomputed, always = _op_sac_split(model)

    def flops(mms):
        return sum(k * n * share for _, k, n, share, _row in mms)
    total = flops(saved) + flops(recomputed) + flops(always)
    return flops(recomputed) / total if total else 0.0


def op_sac_layer_bytes(model: ModelSpec, compute_bytes: int, residual_bytes: int,
                       ep: int = 1) -> tuple[float, float, float]:
    """(replicated, sharded, per-rank) bytes per token per layer torchtitan's per-op policy keeps.
    Replicated (divided by sequence parallelism): the checkpointed layer's input and, under expert
    parallelism, the all-to-all outputs (dispatch and combine). Sharded (divided by TP): the saved
    outputs of column-parallel matmuls, the attention kernel's output and fp32 log-sum-exp. Per rank
    (not divided): the saved outputs of row-parallel matmuls, h-wide partial sums on every TP rank."""
    saved, _, always = _op_sac_split(model)
    b = compute_bytes
    rep = float(residual_bytes * model.hidden_size)
    shard = b * model.num_heads * model.v_head_dim + LSE_BYTES * model.num_heads
    per_rank = 0.0
    for _, _k, n_out, share, row in saved + always:
        if row:
            per_rank += share * b * n_out
        else:
            shard += share * b * n_out
    if model.is_moe and ep > 1:
        moe_frac = (model.num_moe_layers or model.num_layers) / max(model.num_layers, 1)
        rep += moe_frac * 2 * model.experts_per_tok * b * model.hidden_size
    return rep, shard, per_rank

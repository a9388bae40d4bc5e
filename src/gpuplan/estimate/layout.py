"""How a model's parameters land on one GPU under TP/PP/EP (the most loaded rank of a stage).

Tensor parallel splits attention and MLP matrices and the (vocab-parallel) embedding and lm_head;
norms and routers stay replicated (Megatron-LM; Shoeybi et al. 2019). Expert parallel splits the
routed experts over `ep` ranks and each expert's matrices over `etp` ranks (Megatron's expert grid,
MoE parallel folding; default: 1 under EP, tp without it). Pipeline stages take
ceil(L/pp) layers; the first stage also holds the embedding, the last the final norm and lm_head
(a tied embedding is held by both, as Megatron does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InputError
from ..models.spec import ModelSpec


@dataclass(frozen=True)
class RankParams:
    """Parameter counts on one rank, split by role (elements, not bytes)."""
    layers: float          # decoder-layer params on this stage and rank
    embedding: float
    lm_head: float
    model_norm: float
    vision: float
    other: float           # outside the decoder layers and none of the above: an MLM head's transform, a second
                           # stack the layer list does not name (HRM's H module), an lm_head bias
    linear: float          # of `layers`+lm_head: elements inside matmul weights (quantizable)
    layer_max: float       # largest single decoder layer on this rank (FSDP unit)
    stage_layers: int      # decoder layers on this stage
    expert: float = 0.0    # of `layers`: the routed experts' matrices

    @property
    def total(self) -> float:
        return self.layers + self.embedding + self.lm_head + self.model_norm + self.vision + self.other


def expert_tp(tp: int, ep: int, etp: int | None = None) -> int:
    """Ranks one routed expert's matrices are split over: etp, defaulting to 1 under expert parallelism (whole
    experts per rank) and to tp without it (the experts split like the dense MLP); scenario.Parallel.expert_tp
    resolves a scenario's the same way."""
    return etp if etp is not None else (1 if ep > 1 else tp)


def expert_split(tp: int, ep: int, etp: int | None = None) -> int:
    """Ranks one layer's routed experts are spread over: ep x expert_tp."""
    return ep * expert_tp(tp, ep, etp)


def _tp_divisor(kind: str, tp: int, ep: int, vocab_parallel: bool = True, etp: int | None = None) -> int:
    if kind in ("embedding", "lm_head"):
        return tp if vocab_parallel else 1
    if kind in ("attn", "mlp", "shared_expert", "ssm"):
        return tp
    if kind == "expert":
        return expert_split(tp, ep, etp)
    if kind == "bias":
        return tp
    return 1  # norms, routers, other


def rank_params(model: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, stage: str = "first",
                vocab_parallel: bool = True, etp: int | None = None) -> RankParams:
    """Parameters held by one rank of pipeline `stage` ('first', 'last' or 'only').

    `vocab_parallel`: Megatron/torchtitan split the embedding and lm_head over TP ranks; HF's
    tensor-parallel plan replicates them (traced)."""
    L = model.num_layers
    stage_layers = math.ceil(L / pp)
    layer_frac = stage_layers / L
    layers = linear = expert = 0.0
    emb = head = norm = vision = other = 0.0
    for b in model.blocks:
        share = b.total / _tp_divisor(b.kind, tp, ep, vocab_parallel, etp)
        if b.layer_scope == "vision":
            vision += b.total if stage in ("first", "only") else 0
        elif b.layer_scope == "layer":
            layers += share * layer_frac
            if b.linear is not None:
                linear += share * layer_frac
            if b.kind == "expert":
                expert += share * layer_frac
        elif b.kind == "embedding":
            emb += share if stage in ("first", "only") or pp == 1 else 0
        elif b.kind == "lm_head":
            if stage in ("last", "only") or pp == 1:
                head += share
                linear += share
        elif b.kind == "norm":
            norm += share if stage in ("last", "only") or pp == 1 else 0
        else:
            # model-scope parameters of no other role are still resident, trained weights; held with the head
            # (where an MLM head's transform and an lm_head bias sit)
            other += share if stage in ("last", "only") or pp == 1 else 0
    if model.tie_embeddings and pp > 1 and stage == "last":
        # the tied matrix is replicated on the last stage (Megatron keeps a copy there)
        head += sum(b.total for b in model.blocks if b.kind == "embedding" and "positions" not in b.name) / (
            tp if vocab_parallel else 1)
        linear += head
    layer_max = layers / max(stage_layers, 1)
    if model.is_encoder_decoder:
        # one FSDP unit is one T5 block: the largest is a decoder block (self + cross attention + MLP)
        def per_block(streams, n):
            return sum(b.total / _tp_divisor(b.kind, tp, ep, vocab_parallel, etp) for b in model.blocks
                       if b.layer_scope == "layer" and b.stream in streams and b.kind != "other") / max(n, 1)
        layer_max = max(per_block(("encoder",), model.encoder_layers),
                        per_block(("decoder", "cross_kv"), model.num_layers))
    return RankParams(layers=layers, embedding=emb, lm_head=head, model_norm=norm, vision=vision, other=other,
                      linear=linear, layer_max=layer_max, stage_layers=stage_layers, expert=expert)


def stages(pp: int) -> tuple[str, ...]:
    return ("only",) if pp == 1 else ("first", "last")


def grad_accum_steps(global_batch: int, micro_batch: int, dp: int, *, strict: bool = False) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step (gradient-accumulation steps).

    A step covers global_batch sequences, micro_batch × dp at a time. When the division is not exact,
    `strict=False` rounds up (the step then trains up to micro_batch × dp − 1 extra sequences, as the
    memory and speed estimates assume) and `strict=True` raises InputError (the search proposes only
    exact layouts, and launch files must reproduce the global batch exactly)."""
    if not (global_batch >= 1 and micro_batch >= 1 and dp >= 1):
        name, v = next((n, x) for n, x in (("train.global_batch", global_batch), ("train.micro_batch", micro_batch),
                                           ("parallel.dp", dp)) if not x >= 1)
        raise InputError(name, f"must be a whole number of at least 1, got {v!r}.", f"set {name} to 1 or more.")
    per_step = micro_batch * dp
    if strict and global_batch % per_step:
        lower = max(per_step, global_batch // per_step * per_step)
        raise InputError("train.global_batch", f"{global_batch} is not a multiple of micro_batch × dp = "
                         f"{micro_batch} × {dp} = {per_step}, so no whole number of gradient-accumulation "
                         "steps gives it.", f"set train.global_batch to a multiple of {per_step} (e.g. {lower}).")
    return max(1, -(-global_batch // per_step))

"""FLOPs accounting for training and inference (DESIGN §5; docs/speed.md §1).

Conventions
- A matmul of an [M, K] activation by a [K, N] weight costs 2·M·K·N FLOPs (multiply + add).
- Forward FLOPs per token = 2 × active matmul parameters (lm_head included, embedding lookup
  excluded) + causal attention core 2·a·(d_qk + d_v)·ctx per layer, where ctx is the average
  number of keys a query sees (half the sequence for causal full attention, window-capped for
  sliding-window layers) — Kaplan et al. 2020 §2.1, Korthikanti et al. 2022 §5.
- Backward = 2 × forward (data gradient + weight gradient, Narayanan et al. 2021 §3.5).
  A frozen base (LoRA/QLoRA) has no weight gradient: base matmuls cost 2·fwd instead of 3·fwd
  in total (≈ 4N instead of 6N per token); attention keeps its full backward.
- Model FLOPs (for MFU) exclude recomputation; hardware FLOPs (for HFU) include it:
  full recompute adds one forward, selective recompute adds the attention core forward
  (Korthikanti et al. 2022 §5, Chowdhery et al. 2022 App. B).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..models import ModelSpec


class TrainingFlops(NamedTuple):
    """FLOPs per trained token; the first two items are (model, hardware)."""
    model: float             # what MFU divides by (no recompute)
    hardware: float          # what the GPU actually executes (HFU)
    matmul_forward: float    # 2 × active matmul params
    attention_forward: float  # causal attention core, forward


def matmul_params_active(model: ModelSpec) -> float:
    """Active matmul parameters per token (routed experts weighted by top-k/E), vision excluded.
    Counted from the matrix shapes, so a tied lm_head (0 own parameters) still costs its matmul."""
    return float(sum(b.linear[0] * b.linear[1] * b.count * b.active_fraction for b in model.blocks
                     if b.linear is not None and b.layer_scope != "vision"))


def _head_params(model: ModelSpec) -> float:
    """Matmul parameters outside the decoder layers (the lm_head): never recomputed."""
    return float(sum(b.linear[0] * b.linear[1] * b.count * b.active_fraction for b in model.blocks
                     if b.linear is not None and b.layer_scope == "model"))


def lora_adapter_params(model: ModelSpec, rank: int) -> float:
    """Adapter parameters touched per token with all-linear targets: r·(in+out) per decoder linear."""
    return float(sum(rank * (b.linear[0] + b.linear[1]) * b.count * b.active_fraction
                     for b in model.linear_blocks))


def row_len(train: Any) -> int:
    """Tokens of one row through the model (scenario.Train.row_len: 2 x seq_len for a pair joined on the sequence
    axis); a stand-in train object without the field is one seq_len row."""
    return train.row_len if hasattr(train, "row_len") else train.seq_len


def attention_span(train: Any) -> int:
    """Tokens a training sequence's attention spans: the row (train.seq_len), or, for rows packed with documents
    that attend only to themselves (train.document_len), the document, where the kernel computes each document's
    own causal triangle and skips the rest: flash-attention's varlen kernels on cu_seqlens (transformers'
    padding-free path, open-instruct's and TRL's collators, Axolotl's multipack), flex attention's block mask
    (torchtitan's document masking) and Transformer Engine's THD packed format (Megatron). The row of s tokens
    then costs s/d documents x d(d+1)/2 query-key pairs, i.e. s(d+1)/2 instead of s(s+1)/2, as RL's packed passes
    are priced (rl.py `_packed`: attention at the packed sequences' length, the linears on all the tokens).
    Stacks that only mask compute the whole row: transformers' sdpa and eager paths get a block-diagonal
    [s, s] mask from the position_ids (masking_utils.py `find_packed_sequence_indices`,
    `packed_sequence_mask_function`, huggingface/transformers@00c4411c) and eager_attention_forward adds it to
    the full Q·K^T, so they stay at the row (attention sdpa / eager).
    The row is `row_len`: a pair joined on the sequence axis attends across both sides (2 x seq_len) unless
    document_len separates the documents (open-instruct passes doc_lens since #1670, 7aa1712f: each side's
    documents, so the span is then the document, as for any packed row)."""
    d, row = getattr(train, "document_len", None), row_len(train)
    return min(d, row) if d and train.attention == "flash" else row


def attention_flops_per_token_forward(model: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """QK^T and PV: 2·(d_qk + d_v) FLOPs per head per (query, key) pair, summed over layers."""
    return 2.0 * model.num_heads * (model.head_dim + model.v_head_dim) * model.attention_context(seq_len, causal)


def training_flops_per_token(model: ModelSpec, seq_len: int, recompute: str = "none",
                             method: str = "full", lora_rank: int = 16,
                             shares: tuple[float, float] | None = None) -> TrainingFlops:
    """Model and hardware FLOPs per trained token (forward + backward [+ recompute]).

    full:        model = 3·(2N + A)             (6N + 3A)
    lora/qlora:  model = 2·2N + 3A + 6·N_adapter (frozen base: no weight-gradient matmuls)
    recompute:   full adds 2N + A, selective adds A (attention core only); `shares` (linear, attention)
                 overrides that with the shares a framework's checkpointing really recomputes
                 (estimate/recompute.py: e.g. torchtitan's per-op policy redoes every second matmul,
                 not attention).
    """
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none|selective|full, got {recompute!r}")
    mm = 2.0 * matmul_params_active(model)
    attn = attention_flops_per_token_forward(model, seq_len)
    if method == "full":
        model_flops = 3.0 * (mm + attn)
    else:
        model_flops = 2.0 * mm + 3.0 * attn + 6.0 * lora_adapter_params(model, lora_rank)
    if shares is None:
        extra = {"none": 0.0, "selective": attn, "full": mm + attn}[recompute]
    else:
        extra = shares[0] * (mm - 2.0 * _head_params(model)) + shares[1] * attn
    return TrainingFlops(model_flops, model_flops + extra, mm, attn)


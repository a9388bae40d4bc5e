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
    if not (d and train.attention == "flash"):
        return row
    fill = getattr(train, "pack_tokens", None)
    # a policy pass's row that already joins the pair (posttrain.policy_scenario) holds two seq_len/2 sides
    joined = getattr(train, "_joined_pair", False)
    side = train.seq_len // 2 if joined else train.seq_len
    if fill is None or fill >= side:
        return min(d, row)
    layout = "sequence" if joined else getattr(train, "pair_concat", "batch")
    return SegmentedSpan(padded_pack_segments(side, d, fill, layout))


class SegmentedSpan(int):
    """A row whose attention runs over causal segments of unequal length: `segments` is ((length, count), ...),
    count possibly fractional (a mean pack holds fill/d documents). ModelSpec.attention_context prices each
    segment's own causal triangle (window-capped per layer); the int value, the token-weighted mean segment length
    sum(c·L²)/sum(c·L), is the length the attention kernel's speed is looked up at."""
    segments: tuple[tuple[int, float], ...]

    def __new__(cls, segments):
        segs = tuple((int(L), float(c)) for L, c in segments if L > 0 and c > 0)
        mean = sum(c * L * L for L, c in segs) / sum(c * L for L, c in segs)
        obj = super().__new__(cls, max(1, round(mean)))
        obj.segments = segs
        return obj


def padded_pack_segments(seq_len: int, d: int, fill: int, pair_concat: str = "batch"):
    """The attention segments of a packed row padded to seq_len whose document boundaries cover the padding: fill
    tokens of documents of mean length d, then seq_len - fill tokens of padding attended as one more segment.
    OLMo-core's varlen attention takes doc_lens that must sum to the row, and open-instruct emits the trailing pad
    span as its own segment (olmo_core_utils.doc_lens_from_cu_seq_lens, allenai/open-instruct@93a5b3c5, the code
    of its backend comparison's runs, unchanged at 77919e50); its packed collator pads each side to max_seq_length
    (padding_free_collator.TensorDataCollatorWithFlattening, pad_to_length). A pair joined on the sequence axis
    (pair_concat: sequence) offsets the rejected side's cu_seq_lens by the padded chosen length and drops their
    leading 0 (padding_free_collator.concatenated_inputs @93a5b3c5), so the chosen side's padding runs into the
    first rejected document: chosen documents, (padding + d), the other rejected documents, the trailing padding.
    Returns ((length, count), ...) for one row."""
    pad, n = seq_len - fill, fill / d
    if pair_concat == "sequence":
        return ((d, n), (pad + d, 1.0), (d, n - 1.0), (pad, 1.0))
    return ((d, n), (pad, 1.0))


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


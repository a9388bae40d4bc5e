"""Speculative decoding: tokens per verification step, the drafter's memory and its time.

A drafter proposes k tokens; the target runs one forward over k + 1 positions per sequence and keeps
the longest accepted prefix plus one token of its own. With each proposed token accepted
independently with probability a, the expected tokens per step is

    E = (1 - a^(k+1)) / (1 - a)          (= k + 1 when a = 1)

(Leviathan, Kalman, Matias, *Fast Inference from Transformers via Speculative Decoding*, ICML 2023,
eq. 1). A step then costs the target's verification forward (one decode step over batch x (k + 1)
positions: weights read once, linears, attention and TP/EP collectives over all rows, each sequence's
KV read once — speed.py `decode_step(query_rows=...)`) plus the drafter's k proposal steps:

* draft: k decode steps of the draft model at the same batch and context (its own serving model on
  the same GPUs and tensor-parallel degree);
* eagle / mtp: k passes through one decoder layer plus the target's lm_head (EAGLE: Li et al., ICML
  2024, a single decoder layer over the target's features; DeepSeek-V3 MTP: one transformer block and a
  2h -> h projection sharing embedding and output head, DeepSeek-V3 technical report §2.2), priced as that
  share of the target's decode step (its bytes and FLOPs scale with the parameters read);
* ngram: the proposal is a host-side lookup in the prompt; no GPU time, no memory.

Default acceptance rates (per proposed token), used when the scenario gives none:

* mtp 0.85: DeepSeek-V3 technical report §5.4.3 — the second token's acceptance rate is 85-90 %;
* eagle 0.7: between two published per-position measurements — EAGLE-3 in llama.cpp, positions 1-3
  accepted 0.805 / 0.632 / 0.483 cumulatively, i.e. about 0.78 per token (ggml-org/llama.cpp PR 24536),
  and an EAGLE-3 head for gpt-oss-120b in vLLM at temperature 1, 0.58 at position 1 (aimosprite
  inference-bench-results, eagle3_tree_validate) — our choice inside that range, not a fit;
* draft 0.6: Leviathan et al. 2023, Table 3 reports a between about 0.6 and 0.8 for drafts about 100x
  smaller than the target (T5-small for T5-XXL, LaMDA 100M for 137B); 0.6 is the low end;
* ngram: none — prompt lookup accepts what the output copies from the prompt, so the scenario must give it.

Approximations (docs/serving-load.md): acceptance is i.i.d. per token (real rates fall with the
position); the load simulator advances every decoding sequence by E tokens per step (the mean, not a
draw); tree drafting (EAGLE-2/3 top-k trees) is priced as a chain of k tokens.
"""
from __future__ import annotations

from typing import Any

DEFAULT_ACCEPTANCE = {"mtp": 0.85, "eagle": 0.7, "draft": 0.6}


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification step yields per sequence: (1 - a^(k+1)) / (1 - a) (Leviathan et al. eq. 1)."""
    a = float(acceptance)
    if k < 0 or not 0.0 <= a <= 1.0:
        raise ValueError(f"acceptance rate {a} must lie in [0, 1] and k {k} must be >= 0")
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def acceptance_rate(spec: Any) -> float:
    if spec.acceptance_rate is not None:
        return float(spec.acceptance_rate)
    return DEFAULT_ACCEPTANCE[spec.method]


def layer_share(model: Any) -> float:
    """Share of the target's decode-step weight traffic that one EAGLE / MTP pass reads: one decoder
    layer (active parameters) plus the 2h -> h fusion projection plus the lm_head."""
    L = max(1, model.num_layers)
    h = model.hidden_size
    emb = model.params_embedding
    head = model.params_lm_head or emb       # a tied head is the embedding table
    body = max(0.0, model.params_active - emb - model.params_lm_head)
    one = body / L + 2 * h * h + head
    return min(1.0, one / max(1.0, body + head))


def draft_model(spec: Any) -> Any:
    """The draft ModelSpec of method draft (looked up like the target), else None."""
    if spec is None or spec.method != "draft":
        return None
    from ..models import get_model
    return get_model(spec.draft_model)


def draft_rank_bytes(scn: Any, model: Any) -> tuple[float, float]:
    """(weight bytes, KV bytes per token) the drafter adds on one GPU of the serving group (tensor
    parallel like the target; pipeline stages: the drafter sits with the last stage, counted whole)."""
    inf = scn.infer
    spec = getattr(inf, "speculative", None) if inf is not None else None
    if spec is None or spec.method == "ngram":
        return 0.0, 0.0
    from ..dtypes import weight_format
    from .memory import _kv_per_token_rank, inference_weight_bytes
    tp = scn.parallel.tp
    if spec.method == "draft":
        d = draft_model(spec)
        return inference_weight_bytes(d, inf.weights, tp=tp), _kv_per_token_rank(d, inf.kv_cache, tp, 1)
    # eagle / mtp: one decoder layer (an MoE layer holds all its experts) + the 2h -> h projection, in
    # the target's weight format; embedding and lm_head are the target's. KV: one more layer.
    L = max(1, model.num_layers)
    body = max(0.0, model.params_total - model.params_embedding - model.params_lm_head)
    params = body / L + 2 * model.hidden_size * model.hidden_size
    bits = weight_format(inf.weights).bits
    kv_layer = _kv_per_token_rank(model, inf.kv_cache, tp, 1) / L
    return params * bits / 8 / tp, kv_layer

"""Encoder-decoder (T5) memory and FLOPs: the encoder runs over the input, the decoder over the target.

Activation bytes are derived tensor by tensor from transformers' T5 code (models/t5/modeling_t5.py and
integrations/sdpa_attention.py, transformers 5.24) and checked against fake-tensor traces
(tests/test_encdec.py, docs/encoder-decoder.md):

* T5LayerNorm (RMS, no mean): `x.to(fp32).pow(2)` keeps an fp32 copy of x (or x itself when the residual is
  fp32), the product x * rsqrt keeps x, and `weight * normalized` keeps the normalized value: 8h bytes + a
  per-token fp32 rsqrt in both pure 16-bit and autocast runs.
* Attention runs through SDPA with the relative position bias as an additive float mask that takes a
  gradient; CUDA's flash kernel takes no mask, so the memory-efficient kernel runs: q, k, v, the output
  (already in the layout o reads) and an fp32 log-sum-exp per head are saved, plus the bias. The encoder's
  bias (1, heads, S, S) is computed once, but each layer's mask step makes its own 16-bit copy; the decoder's causal bias is a new `torch.where` per
  layer (and its bool causal mask); the cross-attention bias is one shared 16-bit zeros tensor. The bucket
  indices (int64, S x S and T x T) are saved by the bias embedding. A key length that is not a multiple of
  16 makes the kernel pad (and so materialise) the bias per sequence.
* Dropout (dropout_rate 0.1 in every released config): a 1-byte mask after the embedding, after each
  sub-block, inside the MLP (i-sized) and after each stack's final norm.
* MLP: `wo` runs in its weight's dtype (`hidden.to(wo.weight.dtype)`, for int8 flan-t5-xxl), so under fp32
  master weights the MLP output goes to fp32 and autocast casts it back: wo keeps a new 16-bit copy.
* Cross-attention k and v run over the encoder output once per decoder layer: per input token and decoder
  layer their inputs (one autocast cast each) and outputs are saved.
"""
from __future__ import annotations

import math

from ..models.spec import ModelSpec
from .activations import DROPOUT_MASK_BYTES, LSE_BYTES, PLAIN_MLP_SAVES, PLAIN_MLP_SAVES_DEFAULT, ActivationSetup

T5_NORM_BYTES_PER_H = 8.0      # see the module docstring: fp32 copy (or fp32 x) + x / normalized
RSQRT_BYTES = 4.0              # fp32 rsqrt per token per norm
BUCKET_INDEX_BYTES = 8         # int64 relative-position bucket per (query, key) pair, saved by the embedding
BIAS_ALIGN = 16                # CUDA memory-efficient attention pads an unaligned bias to 16 columns


def _mask(model: ModelSpec, width: float) -> float:
    return DROPOUT_MASK_BYTES * width if model.traits.dropout.residual > 0 else 0.0


def _norm(model: ModelSpec) -> float:
    return T5_NORM_BYTES_PER_H * model.hidden_size + RSQRT_BYTES


def _linear_inputs(s: ActivationSetup, consumers: int, h: int) -> float:
    """Saved inputs of `consumers` linears reading one h-wide tensor: each casts its own 16-bit copy
    under autocast; in pure 16-bit they share the tensor."""
    return (consumers if s.autocast else 1) * s.compute_bytes * h


def _mlp(model: ModelSpec, s: ActivationSetup, tp: int) -> float:
    """MLP bytes per token (wi's input excluded): the activation's saved tensors (its output included),
    the gated branch's linear output, wo's input copy and the dropout mask."""
    i, b = model.intermediate_size / tp, s.compute_bytes
    act = model.traits.activation
    saves = 1 if act == "relu" else PLAIN_MLP_SAVES.get(act, PLAIN_MLP_SAVES_DEFAULT)
    dropout = model.traits.dropout.residual > 0
    # the gated product is always new; a plain MLP's wo reads a new tensor after dropout or a dtype round trip
    wo_new = 1 if (model.gated_mlp or dropout or s.autocast) else 0
    return b * i * (saves + (1 if model.gated_mlp else 0) + wo_new) + _mask(model, i)


def _attention_core(model: ModelSpec, s: ActivationSetup, tp: int, saved_heads_tensors: int) -> float:
    """q/k/v/output tensors kept by the memory-efficient kernel (`saved_heads_tensors` of a·d each) + lse."""
    a = model.num_heads / tp
    return s.compute_bytes * saved_heads_tensors * a * model.head_dim + LSE_BYTES * a


def encoder_token_bytes(model: ModelSpec, s: ActivationSetup, tp: int = 1) -> float:
    """Bytes per input token saved for backward: the encoder layers, the embedding and final norm, and what
    the decoder's cross-attention keeps of every input token (k/v inputs and outputs per decoder layer)."""
    h, b = model.hidden_size, s.compute_bytes
    ffn_in = 2 if model.gated_mlp else 1
    layer = (2 * _norm(model) + _linear_inputs(s, 3, h) + _attention_core(model, s, tp, 4) + 2 * _mask(model, h)
             + _linear_inputs(s, ffn_in, h) + _mlp(model, s, tp))
    # cross-attention k/v: inputs (an autocast cast each per decoder layer; in 16-bit one shared tensor)
    cross_in = 2 * model.num_layers * b * h if s.autocast else b * h
    cross_kv = model.num_layers * b * 2 * model.num_heads / tp * model.head_dim      # k and v outputs
    ends = 2 * _mask(model, h) + _norm(model)      # embedding dropout, final norm, final dropout
    return model.encoder_layers * layer + cross_in + cross_kv + ends


def decoder_token_bytes(model: ModelSpec, s: ActivationSetup, tp: int = 1) -> float:
    """Bytes per target token saved for backward: self-attention, cross-attention (q, output, lse), MLP,
    the embedding dropout, final norm and dropout, and lm_head's 16-bit input."""
    h, b = model.hidden_size, s.compute_bytes
    ffn_in = 2 if model.gated_mlp else 1
    layer = (3 * _norm(model) + _linear_inputs(s, 3, h) + _attention_core(model, s, tp, 4)
             + _linear_inputs(s, 1, h) + _attention_core(model, s, tp, 2) + 3 * _mask(model, h)
             + _linear_inputs(s, ffn_in, h) + _mlp(model, s, tp))
    ends = 2 * _mask(model, h) + _norm(model) + b * h
    return model.num_layers * layer + ends


# ---- BART-style stacks (models/generic.py: BART, mBART, Pegasus, Marian, Blenderbot, PLBART, MVP) ----------------
# transformers 5.24 models/bart/modeling_bart.py (BartAttention, BartEncoderLayer, BartDecoderLayer, BartEncoder,
# BartDecoder); the mBART / Pegasus / Blenderbot layers are the same ops with the LayerNorm before each sub-block.
# Per token, traced (tests/test_generic_hybrids.py):
# * nn.LayerNorm saves its input (the residual sum: a new tensor, fp32 under fp32-master autocast, where
#   layer_norm is on autocast's fp32 list) and fp32 mean and rstd: rb·h + 8; its output is saved by whatever
#   reads it (q/k/v, fc1, cross q, lm_head), never by the norm;
# * attention (SDPA, no mask: the encoder's bidirectional and the decoder's causal masks are None without
#   padding, so the flash kernel runs): q, k, v, the output (in the layout out_proj reads) and an fp32 lse;
# * dropout: a 1-byte mask after each sub-block (config `dropout`), inside the MLP on the activation's output
#   (`activation_dropout`), and after the embedding; attention dropout lives in the kernel;
# * post-LN (BART) and pre-LN (mBART) keep the same tensors per layer: one norm input per sub-block, one
#   input per linear; only the stack ends differ (layernorm_embedding and/or a final layer_norm).
LAYERNORM_STAT_BYTES = 8.0     # fp32 mean + rstd per token per nn.LayerNorm


def is_bart_style(model: ModelSpec) -> bool:
    """An encoder-decoder whose layers run BART's ops (models/generic.py BART_LAYER_TYPES)."""
    return model.is_encoder_decoder and model.traits.encdec_layer == "bart"


def bart_ffn_width(model: ModelSpec, stream: str) -> float:
    """fc1's width in one stack (BART's encoder_ffn_dim and decoder_ffn_dim may differ)."""
    widths = [b.linear[1] for b in model.blocks if b.kind == "mlp" and b.linear and b.stream == stream
              and b.linear[0] == model.hidden_size and b.layer_scope == "layer"]
    return float(max(widths, default=model.intermediate_size))


def stack_norms(model: ModelSpec, stream: str) -> int:
    """LayerNorms outside the layers of one stack (layernorm_embedding, the final layer_norm)."""
    return sum(1 for b in model.blocks if b.kind == "norm" and b.layer_scope == "model" and b.stream == stream
               and b.name.endswith("weight"))


def _ln(model: ModelSpec, s: ActivationSetup) -> float:
    return s.residual_bytes * model.hidden_size + LAYERNORM_STAT_BYTES


def _bart_mlp(model: ModelSpec, s: ActivationSetup, i: float) -> float:
    """fc1's output path to fc2 (fc1's input excluded): the activation's saved tensors and fc2's input, or with
    activation dropout the activation's own saves, the dropout output and its mask."""
    saves = PLAIN_MLP_SAVES.get(model.traits.activation, PLAIN_MLP_SAVES_DEFAULT)
    if model.traits.dropout.activation > 0:
        own = 1 if model.traits.activation == "relu" else saves - 1      # relu keeps its output, others the input
        return s.compute_bytes * i * (own + 1) + DROPOUT_MASK_BYTES * i
    return s.compute_bytes * i * saves


def bart_encoder_token_bytes(model: ModelSpec, s: ActivationSetup, tp: int = 1) -> float:
    """Bytes per input token: the encoder layers, the stack's norms and embedding dropout, and the decoder's
    cross-attention k/v over the encoder output (inputs and outputs per decoder layer)."""
    h, b = model.hidden_size, s.compute_bytes
    i = bart_ffn_width(model, "encoder") / tp
    layer = (_linear_inputs(s, 3, h) + _attention_core(model, s, tp, 4) + _mask(model, h) + _ln(model, s)
             + _linear_inputs(s, 1, h) + _bart_mlp(model, s, i) + _mask(model, h) + _ln(model, s))
    cross_in = 2 * model.num_layers * b * h if s.autocast else b * h
    cross_kv = model.num_layers * b * 2 * model.num_heads / tp * model.head_dim
    ends = stack_norms(model, "encoder") * _ln(model, s) + _mask(model, h)
    return model.encoder_layers * layer + cross_in + cross_kv + ends


def speech_front_end_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Per sequence, what a speech encoder's Conv1d front end (traits.speech_frames: Whisper's
    `gelu(conv1(features))`, `gelu(conv2(.))`, WhisperEncoder.forward, transformers 5.25) saves for backward: the
    log-mel features conv1 reads (under autocast an fp32 input and the 16-bit copy conv1 casts), each conv's output
    (gelu's input) and each gelu's output but the last (the next conv's input; the last one's permuted sum with the
    positions is the first layer's norm input, counted there). 0 for a token encoder."""
    if not model.traits.speech_frames:
        return 0.0
    mels, frames, convs = model.traits.speech_frames
    b = s.compute_bytes
    total = (b + (4.0 if s.autocast else 0.0)) * mels * frames
    for j, (channels, stride) in enumerate(convs):
        frames //= stride
        total += b * channels * frames * (1 if j == len(convs) - 1 else 2)
    return total


def eager_encoder_scores(model: ModelSpec, s: ActivationSetup, src: int, tp: int = 1) -> float:
    """Per sequence and encoder layer, what an eager encoder attention (traits.encoder_eager_up_to: BigBird-
    Pegasus' matmul, softmax, matmul) saves beyond SDPA's kernel: the softmax output, kept by softmax's and the
    second matmul's backward (heads x src x src in the compute dtype), less the kernel's fp32 log-sum-exp."""
    if not model.traits.encoder_eager_up_to:
        return 0.0
    a = model.num_heads / tp
    return s.compute_bytes * a * src * src - 4.0 * a * src


def bart_decoder_token_bytes(model: ModelSpec, s: ActivationSetup, tp: int = 1) -> float:
    """Bytes per target token: self-attention, cross-attention (q, output, lse), MLP, three norms and masks per
    layer; the stack's norms, embedding dropout and lm_head's input."""
    h, b = model.hidden_size, s.compute_bytes
    i = bart_ffn_width(model, "decoder") / tp
    layer = (_linear_inputs(s, 3, h) + _attention_core(model, s, tp, 4) + _linear_inputs(s, 1, h)
             + _attention_core(model, s, tp, 2) + _linear_inputs(s, 1, h) + _bart_mlp(model, s, i)
             + 3 * (_mask(model, h) + _ln(model, s)))
    ends = stack_norms(model, "decoder") * _ln(model, s) + _mask(model, h) + b * h
    return model.num_layers * layer + ends


# ---- n-gram decoders (traits.ngram_streams; models/generic.py) -----------------------------------------------------
# transformers 5.25 models/prophetnet/modeling_prophetnet.py. The layers are BART's post-LN layers (the terms above)
# with every attention eager, and a decoder that runs the main stream and n predicting streams, (1 + n) x T tokens:
# * ProphetNetAttention (encoder self-attention, decoder cross-attention): einsum(q, k^T) saves q and a contiguous
#   k^T, `nn.functional.softmax` (the input's dtype) saves its output, attention dropout its 1-byte mask and the
#   einsum with v its output and v: per (head, query, key) pair the probabilities twice and the mask, in place of the
#   fused kernel's log-sum-exp;
# * ProphetNetNgramSelfAttention: q, k, v over all (1 + n) T tokens; the main stream attends its own T keys, each
#   predicting stream the main keys and its own (2T). Per layer it saves the layer input (shared by q, k, v and the
#   main stream's relative_pos_embeddings), all of q (the streams are chunks of one tensor), the main stream's k^T,
#   v and out_proj input, the predicting streams' stacked q, stacked keys and values (each 2T: main + own), stacked
#   hidden states (relative_pos_embeddings' input) and out_proj input; per pair the int64 bucket index
#   `torch.gather` keeps (`.repeat(...).long()` per layer), the fp32 softmax (`softmax(..., dtype=torch.float32)`),
#   the dropout mask and the 16-bit probabilities (`.type_as`, dropped out) the second einsum keeps; per token and
#   stream gather's input, the (heads x num_buckets) relative-position logits;
# * ProphetNetForConditionalGeneration: lm_head runs over the n predicting streams only (`outputs[1]`, a slice of
#   the last layer's output, whose whole (1 + n) T storage it keeps) and `_compute_loss` takes log_softmax in fp32
#   over all n x T logits.
GATHER_INDEX_BYTES = 8         # int64 bucket index per (head, query, key) pair kept by torch.gather


def is_ngram(model: ModelSpec) -> bool:
    """An encoder-decoder with an n-gram decoder (traits.ngram_streams)."""
    return model.is_encoder_decoder and model.traits.encdec_layer == "ngram"


def _eager_pair_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Bytes per (head, query, key) pair an eager ProphetNetAttention saves: softmax's output, and with attention
    dropout its mask and the dropped-out probabilities the second einsum keeps (without dropout the einsum keeps
    softmax's own output). Under autocast softmax runs in fp32 (autocast's fp32 list) and the einsum casts the
    probabilities back to 16-bit."""
    soft = 4.0 if s.autocast else s.compute_bytes
    if model.traits.dropout.attention > 0:
        return soft + DROPOUT_MASK_BYTES + soft + (s.compute_bytes if s.autocast else 0.0)
    return soft + (s.compute_bytes if s.autocast else 0.0)


def _ngram_pair_bytes(model: ModelSpec, s: ActivationSetup) -> float:
    """Bytes per (head, query, key) pair of the n-gram self-attention: the int64 gather index, the fp32 softmax,
    the dropout mask (with attention dropout) and the 16-bit probabilities (`.type_as(weights)`)."""
    mask = DROPOUT_MASK_BYTES if model.traits.dropout.attention > 0 else 0.0
    return GATHER_INDEX_BYTES + 4.0 + mask + s.compute_bytes


def ngram_encoder_bytes(model: ModelSpec, s: ActivationSetup, batch: int, src: int, tp: int = 1) -> float:
    """Encoder bytes of one micro-batch: BART's per-token terms (with the cross-attention k/v over the encoder
    output) with the eager attention's pairs in place of the kernel's log-sum-exp."""
    a = model.num_heads / tp
    eager = _eager_pair_bytes(model, s) * a * src * src - LSE_BYTES * a * src
    return batch * (src * bart_encoder_token_bytes(model, s, tp) + model.encoder_layers * eager)


def ngram_decoder_token_bytes(model: ModelSpec, s: ActivationSetup, tp: int = 1) -> float:
    """Decoder bytes per target token that do not grow with a length: per layer the n-gram self-attention's tensors,
    the cross-attention's and the MLP's over (1 + n) streams; the stack's embedding norm and dropout over the
    streams; lm_head's input (the last layer's whole output)."""
    h, b, n = model.hidden_size, s.compute_bytes, model.traits.ngram_streams
    streams, a = 1 + n, model.num_heads / tp
    i = bart_ffn_width(model, "decoder") / tp
    rel = b * a * model.traits.relative_attention_buckets           # gather's input per token and stream
    # layer input + all q (1 + n each); main k^T, v, out_proj input (1 each); predicting q, hidden, out_proj input
    # (n each) and stacked keys and values (2n each)
    self_attn = b * h * (2 * streams + 3 + 7 * n) + rel * streams + streams * (_mask(model, h) + _ln(model, s))
    cross = streams * (_linear_inputs(s, 1, h) + 2 * b * h + _mask(model, h) + _ln(model, s))   # q in, q, out in
    mlp = streams * (_linear_inputs(s, 1, h) + _bart_mlp(model, s, i) + _mask(model, h) + _ln(model, s))
    ends = streams * (stack_norms(model, "decoder") * _ln(model, s) + _mask(model, h) + b * h)
    return model.num_layers * (self_attn + cross + mlp) + ends


def ngram_decoder_bytes(model: ModelSpec, s: ActivationSetup, batch: int, src: int, tgt: int, tp: int = 1) -> float:
    """Decoder bytes of one micro-batch: the per-token terms plus the attention pairs: the n-gram self-attention's
    main (T x T) and predicting (n x T x 2T) pairs and the cross-attention's (1 + n) T x S pairs, per layer."""
    n, a = model.traits.ngram_streams, model.num_heads / tp
    pairs = (_ngram_pair_bytes(model, s) * a * (tgt * tgt + n * tgt * 2 * tgt)
             + _eager_pair_bytes(model, s) * a * (1 + n) * tgt * src)
    return batch * (tgt * ngram_decoder_token_bytes(model, s, tp) + model.num_layers * pairs)


def ngram_loss_bytes_per_token(model: ModelSpec, s: ActivationSetup, batch: int) -> float:
    """Loss block per target token at the start of backward: per predicting stream and vocabulary entry the 16-bit
    logits, the fp32 log-softmax (`dtype=torch.float32`), its fp32 gradient and the logits' 16-bit gradient. With
    more than one sequence and stream, `logits = predict_logits[:, 0]` is not contiguous and `.contiguous()` makes
    the first stream's copy, held by the model output."""
    n, b, v = model.traits.ngram_streams, s.compute_bytes, model.vocab_size
    held = b * v if batch > 1 and n > 1 else 0.0
    return (2 * b + 8.0) * n * v + held


def _bias(model: ModelSpec, batch: int, q_len: int, kv_len: int, tp: int) -> float:
    """One layer's attention bias as the kernel keeps it: (1, heads, q, kv) in 16-bit, or per sequence when
    kv_len is not a multiple of 16 (padded, so materialised per sequence)."""
    a = model.num_heads / tp
    if kv_len % BIAS_ALIGN:
        return 2.0 * batch * a * q_len * math.ceil(kv_len / BIAS_ALIGN) * BIAS_ALIGN
    return 2.0 * a * q_len * kv_len


def sequence_bytes(model: ModelSpec, s: ActivationSetup, batch: int, src: int, tgt: int, tp: int = 1) -> float:
    """Bytes that grow with the square of the lengths (position biases, bucket indices, causal masks)."""
    # each encoder layer keeps its own copy of the shared bias: the mask step (`torch.where` with the
    # bidirectional mask, and under autocast the cast of the fp32 embedding output) makes a new tensor (traced)
    enc = model.encoder_layers * _bias(model, batch, src, src, tp) + BUCKET_INDEX_BYTES * src * src
    dec = model.num_layers * (_bias(model, batch, tgt, tgt, tp) + tgt * tgt) + BUCKET_INDEX_BYTES * tgt * tgt
    cross = _bias(model, batch, tgt, src, tp)
    return enc + dec + cross


def loss_bytes_per_token(model: ModelSpec, s: ActivationSetup) -> float:
    """T5ForConditionalGeneration's loss: CrossEntropyLoss on the 16-bit logits as they are (no upcast, unlike
    the causal-LM loss): the log-softmax output, its gradient and the logits' gradient, 3 x 2 bytes x V;
    under autocast log_softmax runs in fp32 (autocast's fp32 list): 12 bytes x V (traced)."""
    return (12.0 if s.autocast else 3.0 * s.compute_bytes) * model.vocab_size


def forward_logits_per_token(model: ModelSpec, s: ActivationSetup) -> float:
    """Bytes per target token of the loss at the end of forward: the 16-bit logits plus, under autocast, their
    fp32 cast and the fp32 log-softmax (traced); in 16-bit the log-softmax output."""
    return (2.0 + 4.0 + 4.0 if s.autocast else 2.0 * s.compute_bytes) * model.vocab_size


def saved_activations(model: ModelSpec, s: ActivationSetup, batch: int, src: int, tgt: int, tp: int = 1) -> float:
    """All activation bytes saved for backward by one micro-batch of `batch` sequences (src input tokens,
    tgt target tokens each), lm_head's input included, the loss block excluded."""
    if is_ngram(model):
        return ngram_encoder_bytes(model, s, batch, src, tp) + ngram_decoder_bytes(model, s, batch, src, tgt, tp)
    if is_bart_style(model):      # no position-bias or mask tensors: nothing grows with the square of a length
        return batch * (src * bart_encoder_token_bytes(model, s, tp) + tgt * bart_decoder_token_bytes(model, s, tp)
                        + model.encoder_layers * eager_encoder_scores(model, s, src, tp)
                        + speech_front_end_bytes(model, s))
    return (batch * (src * encoder_token_bytes(model, s, tp) + tgt * decoder_token_bytes(model, s, tp))
            + sequence_bytes(model, s, batch, src, tgt, tp))


def checkpointed_activations(model: ModelSpec, s: ActivationSetup, batch: int, src: int, tgt: int,
                             tp: int = 1) -> tuple[float, float]:
    """Full recompute (HF gradient checkpointing per T5Block): (kept, working). Each block keeps its input
    (the residual stream); the decoder blocks also keep the encoder output they read; backward recomputes
    one block at a time (the largest: a decoder block)."""
    rb, b = s.residual_bytes, s.compute_bytes
    h = model.hidden_size
    kept = batch * (src * model.encoder_layers * rb * h + tgt * model.num_layers * rb * h)
    # outside the checkpointed blocks: the embedding dropout, the final norms and dropouts, the encoder
    # output the decoder blocks read, lm_head's input (traced)
    enc_ends = 2 * _mask(model, h) + _norm(model) + rb * h
    dec_ends = 2 * _mask(model, h) + _norm(model) + b * h
    kept += batch * (src * enc_ends + tgt * dec_ends) + BUCKET_INDEX_BYTES * (src * src + tgt * tgt)
    dec_layer = (decoder_token_bytes(model, s, tp) - (2 * _mask(model, h) + _norm(model) + s.compute_bytes * h)) \
        / max(model.num_layers, 1)
    enc_layer = encoder_token_bytes(model, s, tp) / max(model.encoder_layers, 1)
    working = batch * max(src * enc_layer, tgt * dec_layer + src * 2 * s.compute_bytes * h)
    return kept, working


# ---- FLOPs -------------------------------------------------------------------------------------------------
def stream_tokens(stream: str, src: float, tgt: float) -> float:
    """Tokens a linear of `stream` runs over: the input for the encoder and the cross-attention k/v, the
    target for the decoder."""
    return src if stream in ("encoder", "cross_kv") else tgt


def matmul_flops_forward(model: ModelSpec, src: float, tgt: float) -> float:
    """2 x rows x weight elements of every linear, rows by stream (one sequence)."""
    return 2.0 * sum(b.linear[0] * b.linear[1] * b.count * stream_tokens(b.stream, src, tgt)
                     for b in model.blocks if b.linear is not None)


def attention_flops_forward(model: ModelSpec, src: float, tgt: float) -> float:
    """QK^T and PV for one sequence: encoder self-attention (src x src, bidirectional), decoder causal
    self-attention (tgt (tgt+1)/2 pairs) and cross-attention (tgt x src), 2 (d_qk + d_v) per head and pair."""
    per_pair = 2.0 * model.num_heads * (model.head_dim + model.v_head_dim)
    pairs = model.encoder_layers * src * src + model.num_layers * (tgt * (tgt + 1) / 2 + tgt * src)
    return per_pair * pairs

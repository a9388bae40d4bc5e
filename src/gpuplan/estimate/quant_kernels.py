"""bitsandbytes weight-only kernels at serving time: which path a step takes, what it moves through
HBM, and what the host spends issuing it.

bitsandbytes (bitsandbytes/autograd/_functions.py `matmul_4bit`, @95f9af3) runs a 4-bit linear in one of
two ways:

* one row (a batch-1 decode step, no gradient): `F.gemv_4bit`, a fused kernel that reads the packed
  4-bit weight and its absmax scales and dequantizes in registers — the weight bytes of the format;
* more rows (batched decode, any prefill): `MatMul4Bit`, which first materialises the whole weight in
  16-bit (`F.dequantize_4bit(B, quant_state).to(A.dtype)`) and then runs a 16-bit GEMM: the packed read,
  a 16-bit write and a 16-bit read — 4 bytes per parameter more than the 4-bit path, so batched NF4
  decodes *slower* than 16-bit weights (the bitsandbytes benchmark tables show it on every GPU).

LLM.int8() (`MatMul8bitLt`) reads int8 weights, quantizes the activations row-wise and, with the
default outlier threshold 6.0 (transformers' `llm_int8_threshold`), multiplies the outlier columns in
16-bit: about one byte per parameter from HBM, and several extra kernels per linear.

In HF transformers' eager loop the host issues every kernel; the GPU runs them asynchronously, so a step
takes max(GPU time, host issue time). Host costs below are seconds per call on the host of bitsandbytes'
own H100 benchmark (benchmarking/README.md @95f9af3, transformers 4.46.3, torch 2.5.1, bitsandbytes
0.45.0.dev), where batch-1 decode is host-bound: per decoder layer of a Llama-style model, and the extra
per quantized linear, read off the differences between its BF16, NF4, NF4+DQ and INT8 rows for Llama 3.1
8B and Qwen 2.5 32B (they agree within 15 %). They describe that host: the speed engine divides them by the
scenario's host CPU speed relative to it (hardware/hosts.py; docs/speed.md).
"""
from __future__ import annotations

from ..dtypes import WeightFormat

HF_HOST_ISSUE_PER_LAYER_S = 7.7e-4     # 24.4 ms / 32 layers (8B), 50.8 ms / 64 layers (32B): BF16, batch 1
BNB_4BIT_GEMV_ISSUE_S = 4.0e-5         # NF4 - BF16 at batch 1: 8.7 ms / 224 linears, 19.9 ms / 448
BNB_4BIT_DEQUANT_ISSUE_S = 1.0e-4      # NF4 - BF16 at batch 8 and 32: 22.1-22.5 ms / 224 linears
BNB_DOUBLE_QUANT_ISSUE_S = 3.8e-5      # NF4+DQ - NF4 (nested absmax dequantized per call): 8.0-9.1 ms / 224
BNB_INT8_ISSUE_S = 2.7e-4              # INT8 with outlier decomposition - BF16: 57-60 ms / 224, 131 ms / 448
DEQUANT_EXTRA_BYTES_PER_PARAM = 4.0    # 16-bit copy written by dequantize_4bit and read by the GEMM
# HF transformers' default DynamicCache grows each layer's K and V with `torch.cat([cache, new], dim=-2)`
# every decode step (src/transformers/cache_utils.py `DynamicCache.update` @67dd552, the 4.46 line): the
# past cache is read and written to a new tensor, then read again by attention — three passes over the
# KV bytes where a paged or static cache makes one.
HF_DYNAMIC_CACHE_KV_PASSES = 3.0


def is_bitsandbytes(fmt: WeightFormat) -> bool:
    return fmt.family == "nf4" or fmt.name == "int8"


def dequant_extra_bytes(fmt: WeightFormat, rows: float, linear_params: float) -> float:
    """HBM bytes a step moves beyond the packed weights: the 16-bit copy of every 4-bit weight when
    more than one row goes through the linear."""
    if fmt.family == "nf4" and rows > 1:
        return DEQUANT_EXTRA_BYTES_PER_PARAM * linear_params
    return 0.0


def host_issue_per_linear(fmt: WeightFormat, rows: float) -> float:
    """Extra host seconds per quantized linear call in HF eager mode."""
    if fmt.family == "nf4":
        base = BNB_4BIT_GEMV_ISSUE_S if rows <= 1 else BNB_4BIT_DEQUANT_ISSUE_S
        return base + (BNB_DOUBLE_QUANT_ISSUE_S if fmt.name == "nf4-dq" else 0.0)
    if fmt.name == "int8":
        return BNB_INT8_ISSUE_S
    return 0.0

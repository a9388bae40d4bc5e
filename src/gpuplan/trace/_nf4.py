"""NF4 (QLoRA) storage, modelled honestly on CPU where bitsandbytes cannot run.

Each quantized linear keeps its weight as packed uint8 (two 4-bit codes per byte) plus block scales:
without double quantization one fp32 absmax per 64 weights (4.5 bits/weight); with it, one uint8
absmax per 64 weights plus one fp32 scale per 256 absmax values (4.127 bits/weight) — the layout
of bitsandbytes `Params4bit`. Forward and backward dequantize the weight into a 16-bit temporary
(bitsandbytes' MatMul4Bit does the same) and free it right after the matmul; only the packed
weight is saved for backward.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class _NF4MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, packed, out_features, in_features, dtype):
        w = torch.empty(out_features, in_features, dtype=dtype, device=x.device)   # dequantized
        y = torch.nn.functional.linear(x, w)
        del w
        ctx.shape = (out_features, in_features, dtype)
        return y

    @staticmethod
    def backward(ctx, gy):
        out_f, in_f, dtype = ctx.shape
        w = torch.empty(out_f, in_f, dtype=dtype, device=gy.device)
        gx = gy @ w
        return gx, None, None, None, None


class NF4Linear(nn.Module):
    def __init__(self, base: nn.Linear, double_quant: bool, compute_dtype):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        n = base.in_features * base.out_features
        dev = base.weight.device
        self.packed = nn.Parameter(torch.empty(math.ceil(n / 2), dtype=torch.uint8, device=dev), requires_grad=False)
        blocks = math.ceil(n / 64)
        if double_quant:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=dev))
            self.register_buffer("absmax2", torch.empty(math.ceil(blocks / 256), dtype=torch.float32, device=dev))
        else:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32, device=dev))
        self.bias = base.bias
        self.compute_dtype = compute_dtype
        self.weight = None  # peft reads .weight on the base layer only when merging

    def forward(self, x):
        y = _NF4MatMul.apply(x.to(self.compute_dtype), self.packed, self.out_features, self.in_features,
                             self.compute_dtype)
        return y if self.bias is None else y + self.bias


class PackedLinear(nn.Module):
    """A linear whose weight is stored in `bits` per element (scales included), for inference
    formats (GPTQ/AWQ int4, int8, fp8, ...): one uint8 buffer of ceil(n*bits/8) bytes; the matmul
    dequantizes into a 16-bit temporary as the weight-only kernels' reference path does (fused
    kernels such as Marlin dequantize in registers: then the temporary is an over-count of one
    layer's weight)."""

    def __init__(self, base: nn.Linear, bits: float, compute_dtype):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        n = base.in_features * base.out_features
        self.register_buffer("packed", torch.empty(math.ceil(n * bits / 8), dtype=torch.uint8,
                                                   device=base.weight.device))
        self.bias = base.bias
        self.compute_dtype = compute_dtype

    def forward(self, x):
        w = torch.empty(self.out_features, self.in_features, dtype=self.compute_dtype, device=x.device)
        y = torch.nn.functional.linear(x.to(self.compute_dtype), w, self.bias)
        del w
        return y


def decoder_linears(model):
    """(parent, attribute name, module) for every nn.Linear inside the decoder layers."""
    out = []
    for name, mod in model.named_modules():
        for child_name, child in mod.named_children():
            if isinstance(child, nn.Linear) and ".layers." in f".{name}.":
                out.append((mod, child_name, child))
    return out

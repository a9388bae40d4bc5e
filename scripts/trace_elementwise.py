"""Measure the HBM bytes of a decoder layer's element-wise kernels in eager PyTorch.

Eager PyTorch launches one kernel per aten op, and each kernel reads its inputs from HBM and writes
its outputs there. Under a TorchDispatchMode this script sees every aten op of one layer's forward and
backward and sums the bytes of its tensor inputs and outputs, leaving out the matmuls (counted as
GEMMs by the speed model), the attention kernel (counted by the attention model) and ops that only make
a view (no data moves). The total per token is a linear function of the layer's widths,
    bytes/token = a·h + b·i + c·kv + d       (h hidden, i MLP width, kv = key/value heads × head dim)
solved by least squares from five small layers of different widths (real bf16 CPU tensors; only shapes matter).

Layers traced, each written from the op sequence of the named source (not imported):
  torchtitan  Llama block, torchtitan models/llama/model.py @ 9dec370 (RMSNorm on x.float() then
              type_as and * weight, complex-number RoPE on q and k, repeat_kv copies, SwiGLU, two
              residual adds); the layer of validation/gathered TT01/TT04.
  hf          transformers' LlamaDecoderLayer itself (imported: its real ops; rotate_half RoPE).
  layernorm_gelu LayerNorm (one native kernel) + GELU MLP without biases, residual adds: llm-foundry's
              MPT layer, the calibration source of `elementwise_passes` (no RoPE: ALiBi in the kernel).
  hf_lora     the hf layer with peft LoRA (r 16) on its seven linears, base frozen, fp32 adapters, under bf16
              autocast (an HF Trainer LoRA step): its excess over hf is the adapters' element-wise work.
  gemma2, qwen3, olmo2, phi3
              transformers' Gemma2/Qwen3/Olmo2/Phi3DecoderLayer (imported, the same widths as hf): their excess
              over hf is what their traits add (sandwich fp32 norms; q/k norms; post fp32 norms with full q/k
              norms; fused qkv and gate_up splits). Also traced: one RMSNorm module of each norm_dtype per
              element, and Gemma-2's final logit softcap per logit (the constants of elementwise.py
              EAGER_NORM_BYTES, EAGER_FUSED_SPLIT_BYTES and SOFTCAP_BYTES_PER_LOGIT).

Run:  PYTHONPATH=$PWD/src python3 scripts/trace_elementwise.py
The printed coefficients are the constants of src/gpuplan/estimate/elementwise.py (EAGER_MEASURED).
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# GEMMs and attention are timed elsewhere; everything else that moves data is element-wise work
def _is_skipped(name: str) -> bool:
    base = name.split(".")[0]
    return base in ("mm", "bmm", "addmm", "matmul", "linear") or "scaled_dot_product" in base or "attention" in base


class ByteCounter(TorchDispatchMode):
    """Sums input + output bytes of every data-moving, non-GEMM, non-attention aten op."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__ if hasattr(func, "__name__") else str(func)
        if _is_skipped(name):
            return out
        ins = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        in_ptrs = {t.untyped_storage().data_ptr() for t in ins}
        fresh = [t for t in outs if t.untyped_storage().data_ptr() not in in_ptrs]
        inplace = [t for t in outs if t.untyped_storage().data_ptr() in in_ptrs]
        if not fresh and not inplace:
            return out
        if not fresh and func._schema.is_mutable is False:
            return out           # a view: the output aliases an input, no kernel moves data
        n = sum(t.numel() * t.element_size() for t in ins) + sum(t.numel() * t.element_size() for t in outs)
        self.total += n
        self.by_op[name] = self.by_op.get(name, 0) + n
        return out


def _rms(x, w, eps=1e-5):
    """torchtitan RMSNorm (norm_type 'rmsnorm'): _norm(x.float()).type_as(x) * weight."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


def _rope_complex(xq, xk, freqs):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq), torch.view_as_real(xk_ * f).flatten(3).type_as(xk))


def _repeat_kv(x, n):
    if n == 1:
        return x
    b, s, kv, d = x.shape
    return x[:, :, :, None, :].expand(b, s, kv, n, d).reshape(b, s, kv * n, d)


class TitanBlock(torch.nn.Module):
    def __init__(self, h, i, heads, kv_heads):
        super().__init__()
        self.heads, self.kv, self.d = heads, kv_heads, h // heads
        lin = lambda a, b: torch.nn.Linear(a, b, bias=False, dtype=torch.bfloat16)   # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(h, h), lin(h, kv_heads * self.d), lin(h, kv_heads * self.d), lin(h, h)
        self.w1, self.w2, self.w3 = lin(h, i), lin(i, h), lin(h, i)
        self.n1 = torch.nn.Parameter(torch.ones(h, dtype=torch.bfloat16))
        self.n2 = torch.nn.Parameter(torch.ones(h, dtype=torch.bfloat16))

    def attn(self, x, freqs):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.d)
        k = self.wk(x).view(b, s, -1, self.d)
        v = self.wv(x).view(b, s, -1, self.d)
        q, k = _rope_complex(q, k, freqs)
        rep = self.heads // self.kv
        k, v = _repeat_kv(k, rep), _repeat_kv(v, rep)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))

    def forward(self, x, freqs):
        hdn = x + self.attn(_rms(x, self.n1), freqs)
        y = _rms(hdn, self.n2)
        return hdn + self.w2(F.silu(self.w1(y)) * self.w3(y))


class GptBlock(torch.nn.Module):
    """MPT-style: LayerNorm (no bias), attention, GELU MLP (4h), no biases, no dropout."""

    def __init__(self, h, i, heads, kv_heads):
        super().__init__()
        self.heads, self.d = heads, h // heads
        lin = lambda a, b: torch.nn.Linear(a, b, bias=False, dtype=torch.bfloat16)   # noqa: E731
        self.wqkv, self.wo, self.up, self.down = lin(h, 3 * h), lin(h, h), lin(h, i), lin(i, h)
        self.n1 = torch.nn.LayerNorm(h, bias=False, dtype=torch.bfloat16)
        self.n2 = torch.nn.LayerNorm(h, bias=False, dtype=torch.bfloat16)

    def forward(self, x, freqs=None):
        b, s, h = x.shape
        q, k, v = self.wqkv(self.n1(x)).view(b, s, 3, self.heads, self.d).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        hdn = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
        return hdn + self.down(F.gelu(self.up(self.n2(hdn))))


# transformers decoder layers traced as imported (transformers 5.25): (config class, layer class, rotary class) by
# family, and the config keys that make the small layer the family's (head_dim = h / heads as Llama's; Gemma-2's
# attention softcap off: HF's sdpa path does not take it, and HK05 ran sdpa)
HF_FAMILIES = {
    "hf": ("llama", "Llama", {}),
    "gemma2": ("gemma2", "Gemma2", {"hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": None,
                                     "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 64}),
    "qwen3": ("qwen3", "Qwen3", {}),
    "olmo2": ("olmo2", "Olmo2", {}),
    "phi3": ("phi3", "Phi3", {}),
}


def _hf_block(h, i, heads, kv_heads, family: str = "hf"):
    import importlib
    mod_name, prefix, extra = HF_FAMILIES[family]
    mod = importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}")
    conf = importlib.import_module(f"transformers.models.{mod_name}.configuration_{mod_name}")
    cfg = getattr(conf, f"{prefix}Config")(hidden_size=h, intermediate_size=i, num_attention_heads=heads,
                                          num_key_value_heads=kv_heads, head_dim=h // heads, num_hidden_layers=1,
                                          torch_dtype="bfloat16", **extra)
    cfg._attn_implementation = "sdpa"
    layer = getattr(mod, f"{prefix}DecoderLayer")(cfg, 0).to(torch.bfloat16)
    rot = getattr(mod, f"{prefix}RotaryEmbedding")(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x, pe):
            out = self.layer(x, position_embeddings=pe, attention_mask=None)
            return out[0] if isinstance(out, tuple) else out
    return Wrap(), rot


def _lora(blk, rank: int = 16):
    """peft LoRA on every linear of the layer (target_modules all-linear's set for a decoder layer), base frozen in
    bf16; peft keeps the adapters in fp32 (get_peft_model autocast_adapter_dtype=True) and the step runs under bf16
    autocast (HF Trainer bf16=True)."""
    import peft
    cfg = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return peft.get_peft_model(blk, cfg)


def build_layer(kind: str, h: int, i: int, heads: int, kv_heads: int, b: int, s: int, device: str = "cpu"):
    """(layer, its bf16 input [b, s, h] that requires grad, the extra forward arguments: RoPE's position
    embeddings or frequencies) of one layer of `kind` (torchtitan | hf | hf_lora | layernorm_gelu) on `device`."""
    x = torch.randn(b, s, h, dtype=torch.bfloat16, device=device, requires_grad=True)
    d = h // heads
    if kind in HF_FAMILIES or kind == "hf_lora":
        blk, rot = _hf_block(h, i, heads, kv_heads, "hf" if kind == "hf_lora" else kind)
        if kind == "hf_lora":
            blk = _lora(blk)
        blk, rot = blk.to(device), rot.to(device)
        with torch.no_grad():
            pe = rot(x, torch.arange(s, device=device)[None])
        return blk, x, (tuple(p.to(torch.bfloat16) for p in pe),)
    blk = (TitanBlock if kind == "torchtitan" else GptBlock)(h, i, heads, kv_heads).to(device)
    ang = torch.outer(torch.arange(s, dtype=torch.float32), torch.ones(d // 2))
    return blk, x, (torch.polar(torch.ones_like(ang), ang).to(device),)


def layer_bytes(kind: str, h: int, i: int, heads: int, kv_heads: int, b: int = 1, s: int = 64) -> tuple[float, dict]:
    """Eager element-wise bytes per token of one layer's forward + backward, and the bytes by aten op."""
    torch.manual_seed(0)
    blk, x, extra = build_layer(kind, h, i, heads, kv_heads, b, s)
    autocast = kind == "hf_lora"
    grad = torch.randn(b, s, h, dtype=torch.bfloat16)
    with ByteCounter() as bc:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = blk(x, *extra)
        out.backward(grad)
    return bc.total / (b * s), bc.by_op


# widths (h, i, heads, kv_heads): independent columns for h, i, kv·d and a constant
SHAPES = [(256, 512, 4, 4), (256, 1024, 4, 2), (512, 512, 8, 2), (512, 1536, 8, 8), (384, 768, 6, 3)]


def coefficients(kind: str) -> tuple[float, float, float, float]:
    rows, ys = [], []
    for h, i, nh, nkv in SHAPES:
        rows.append([h, i, nkv * (h // nh), 1.0])
        ys.append(layer_bytes(kind, h, i, nh, nkv)[0])
    sol = torch.linalg.lstsq(torch.tensor(rows, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)[:, None])
    return tuple(round(float(v), 3) for v in sol.solution[:, 0])


# the RMSNorm modules of the families above, by the norm_dtype trait their models get (models/spec.py)
NORM_CLASSES = {"fp32_upcast": ("llama", "LlamaRMSNorm"), "fp32": ("gemma2", "Gemma2RMSNorm")}


def norm_bytes_per_element(norm_dtype: str) -> float:
    """Eager bytes per normed element of one RMSNorm module (transformers' own class), forward + backward with the
    weight gradient, bf16 input: the per-element term α of α·n·h + β·h + γ·n solved from three (n tokens, h) traces
    (β: the weight's own casts and gradient, γ: the per-row mean and rsqrt; both vanish per element at real sizes)."""
    import importlib
    mod_name, cls_name = NORM_CLASSES[norm_dtype]
    cls = getattr(importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}"), cls_name)
    rows, ys = [], []
    for n, h in ((64, 256), (64, 512), (128, 512)):
        mod = cls(h).to(torch.bfloat16)
        x = torch.randn(1, n, h, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(1, n, h, dtype=torch.bfloat16)
        with ByteCounter() as bc:
            mod(x).backward(grad)
        rows.append([n * h, h, n])
        ys.append(bc.total)
    sol = torch.linalg.solve(torch.tensor(rows, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64))
    return round(float(sol[0]), 3)


def softcap_bytes_per_logit(cap: float = 30.0, n: int = 4096) -> float:
    """Gemma-2's final logit softcap as transformers writes it (models/gemma2/modeling_gemma2.py
    Gemma2ForCausalLM.forward: logits / cap, tanh, * cap) on bf16 logits (the lm_head's output under bf16 autocast
    or bf16 weights), forward + backward, bytes per logit."""
    logits = torch.randn(n, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(n, dtype=torch.bfloat16)
    with ByteCounter() as bc:
        out = torch.tanh(logits / cap) * cap
        out.backward(grad)
    return bc.total / n


def increments() -> dict[str, tuple[float, ...]]:
    """Each traced family layer's (a, b, c) less the Llama layer's: what its traits add."""
    base = coefficients("hf")
    return {fam: tuple(round(f - b, 3) for f, b in zip(coefficients(fam)[:3], base[:3]))
            for fam in ("gemma2", "qwen3", "olmo2", "phi3")}


def main() -> int:
    for kind in ("torchtitan", "hf", "layernorm_gelu", "hf_lora", "gemma2", "qwen3", "olmo2", "phi3"):
        a, b, c, d = coefficients(kind)
        print(f"{kind:10s} bytes/token/layer (fwd+bwd, bf16) = {a}·h + {b}·i + {c}·kv + {d}")
    for nd in NORM_CLASSES:
        print(f"RMSNorm ({nd}, {NORM_CLASSES[nd][1]}) bytes per element = {norm_bytes_per_element(nd)}")
    print(f"final logit softcap bytes per logit = {softcap_bytes_per_logit()}")
    if "-v" in sys.argv:
        for kind in ("torchtitan", "hf", "layernorm_gelu", "gemma2"):
            _, ops = layer_bytes(kind, 256, 512, 4, 2)
            print(kind, sorted(ops.items(), key=lambda kv: -kv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

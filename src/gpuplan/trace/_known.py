"""Fake tensors that know the values the harness itself chose.

A fake tensor has a shape and a dtype but no values, so a model that reads a value to pick a shape
(`.item()`, `.tolist()`, boolean-mask indexing, `unique()`, `nonzero()`) stops the trace. Many such
reads ask about values that are fixed before the model runs: the token ids the harness drew (XLM's
`lengths.max().item()` over `input_ids != pad_index`, ProphetNet's `_shift_right` check), a constant the
model builds itself (X-MOD's `lang_ids = default_lang_id * torch.ones(batch)`), or the causal mask built
from `arange` (Kolibri's indexed-attention query groups: `starts.unique().tolist()`).

`KnownValuesMode` answers exactly those. It is PyTorch's own fake-tensor constant propagation
(`FakeTensor.constant`: an op whose inputs all carry a real value is also run on the real values,
torch/_subclasses/fake_tensor.py `_dispatch_impl`, torch 2.13) with two additions:
* the values may be tensors of up to `KNOWN_NUMEL` elements, not just scalars (torch's
  `CONSTANT_NUMEL_LIMIT` is 1), so an id tensor, a length vector or a sequence mask keeps its values;
* deterministic factories (`arange`, `zeros`, `ones`, `full` and their `_like` / `new_` forms) carry
  their values, as a real run would have them.
The harness's own inputs enter through `harness_tokens` (a seeded draw, the same values a real run
would be fed). A value computed from the weights (an attention score, a router's scores) stays unknown,
so a shape picked from it still stops the trace, with one exception whose memory does not depend on it:
* the indices of a top-k over the last dimension of value-less scores (a router picking each token's k
  experts) carry the balanced assignment, token t's j-th choice = (t·k + j) mod E. A model that sizes its
  per-expert pieces from the counts (JetMoE: `expert_size.tolist()` then `split`, modeling_jetmoe.py
  JetMoeTopKGating / JetMoeParallelExperts) allocates pieces that add up to tokens x k rows whatever the
  assignment, so the traced totals are those of any routing; only the split between experts (and each piece's
  rounding to an allocator block) is the balanced one. The top-k values stay unknown. The memory count is unchanged:
every op still returns a fake tensor the allocation tracker registers; the real values live on the
side, outside the count, as a host-side copy would.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._mode_utils import no_dispatch

# Largest tensor whose values are kept: a [4, 1024, 1024] mask, 4M elements (the values live in host
# memory, outside the traced count). Larger results stay value-less fake tensors.
KNOWN_NUMEL = 1 << 22

_aten = torch.ops.aten
# Factories whose values follow from their arguments alone (never `empty`: its values are whatever memory held).
_FACTORIES = {_aten.arange, _aten.full, _aten.ones, _aten.zeros, _aten.scalar_tensor, _aten.eye,
              _aten.full_like, _aten.ones_like, _aten.zeros_like, _aten.new_full, _aten.new_ones, _aten.new_zeros}

_SEED = 0


class KnownValuesMode(FakeTensorMode):
    """A FakeTensorMode whose tensors carry their real values where the harness or the code fixed them."""

    def __init__(self, **kwargs):
        super().__init__(allow_non_fake_inputs=True, **kwargs)
        self.generator = torch.Generator().manual_seed(_SEED)
        self.dropped_large = False      # an op on known values gave over KNOWN_NUMEL elements: values let go

    def may_turn_const(self, t: torch.Tensor) -> bool:
        if t.numel() > KNOWN_NUMEL:
            self.dropped_large = True
            return False
        return not t.is_sparse and not self.is_our_fake(t) and t.device.type != "meta"

    def dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = super().dispatch(func, types, args, kwargs)
        if getattr(func, "overloadpacket", None) is _aten.topk:
            _balanced_topk(self, args, kwargs, out)
        if getattr(func, "overloadpacket", None) in _FACTORIES and isinstance(out, FakeTensor) \
                and out.constant is None and out.device.type == "cpu":
            if out.numel() <= KNOWN_NUMEL:       # (a large buffer, a KV cache's zeros, stays value-less)
                out.constant = _real_factory(func, args, kwargs)
                self.fake_tensor_converter.add_constant_storage_mapping(out)
        return out

    def known(self, real: torch.Tensor) -> FakeTensor:
        """A fake tensor for `real` (a CPU tensor) that carries its values."""
        return self.fake_tensor_converter.from_real_tensor(self, real, make_constant=True)


def _balanced_topk(mode: "KnownValuesMode", args, kwargs, out) -> None:
    """Give a value-less top-k's indices the balanced assignment (see the module docstring): only a top-k over the
    last dimension, k <= its size, on CPU fake tensors small enough to keep."""
    x, k = args[0], args[1]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    idx = out[1] if isinstance(out, (tuple, list)) and len(out) == 2 else None
    if not isinstance(idx, FakeTensor) or idx.constant is not None or idx.device.type != "cpu" \
            or dim not in (-1, x.dim() - 1) or not 0 < k <= x.shape[-1] or idx.numel() > KNOWN_NUMEL:
        return
    with no_dispatch():
        rows = idx.numel() // k
        real = (torch.arange(rows)[:, None] * k + torch.arange(k)[None, :]) % x.shape[-1]
        real = real.reshape(idx.shape).to(idx.dtype)
    idx.constant = real
    mode.fake_tensor_converter.add_constant_storage_mapping(idx)


def _real_factory(func, args, kwargs) -> torch.Tensor:
    """Run a factory on real tensors: a fake input (the `self` of `zeros_like` / `new_zeros`) only gives the
    output's shape, dtype and strides, so a real empty tensor with the same layout stands in for it."""
    def real(a):
        if isinstance(a, FakeTensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
        return a
    with no_dispatch():
        return func(*[real(a) for a in args], **{k: real(v) for k, v in kwargs.items()})


def harness_tokens(high: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Token ids in [0, high) for the model's input. Under a KnownValuesMode they are drawn from the mode's
    seeded generator and carry their values; otherwise a plain `torch.randint` (values unknown on fake
    tensors, real on a real run)."""
    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if not isinstance(mode, KnownValuesMode):
        return torch.randint(0, high, shape)
    with no_dispatch():
        real = torch.randint(0, high, shape, generator=mode.generator)
    return mode.known(real)

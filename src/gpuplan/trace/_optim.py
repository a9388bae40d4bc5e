"""Optimizers for the trace: torch's own where they exist, faithful memory models where not.

* AdamW foreach / fused and SGD are torch's (HF Trainer `optim="sgd"`: plain SGD, no momentum).
* Adafactor is transformers' (HF Trainer `optim="adafactor"`: factored second moment, no first moment).
* Lion (not in torch) keeps one momentum buffer per parameter; implemented here with the same
  per-parameter in-place update the reference implementation does.
* 8-bit AdamW needs bitsandbytes' CUDA kernels. Modelled: per parameter of >= 4096 elements two
  uint8 state tensors plus one fp32 absmax per 256-element block (bnb blockwise 8-bit), smaller
  parameters keep fp32 states (bnb's min_8bit_size); the update is in place (bnb's fused kernel
  makes no parameter-sized temporaries).
"""
from __future__ import annotations

import math

import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = m.mul(b1).add_(p.grad, alpha=1 - b1).sign_()
                p.add_(update, alpha=-group["lr"])
                del update
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


class Adam8bitModel(torch.optim.Optimizer):
    """Memory model of bitsandbytes AdamW8bit (blockwise, block 256, min_8bit_size 4096)."""

    BLOCK = 256
    MIN_8BIT = 4096

    def __init__(self, params, lr=1e-4):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    if p.numel() >= self.MIN_8BIT:
                        blocks = math.ceil(p.numel() / self.BLOCK)
                        state["state1"] = torch.zeros(p.shape, dtype=torch.uint8, device=p.device)
                        state["state2"] = torch.zeros(p.shape, dtype=torch.uint8, device=p.device)
                        state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                    else:
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                p.add_(p.grad, alpha=-group["lr"])      # in-place, like the fused kernel


def make_optimizer(name: str, impl: str, params, notes: list[str]):
    params = [p for p in params if p.requires_grad]
    if name == "adamw":
        if impl == "fused":
            notes.append("AdamW fused=True (no parameter-sized temporary at the step).")
            return torch.optim.AdamW(params, lr=1e-5, fused=True)
        notes.append("AdamW foreach=True (the CUDA default; one parameter-sized temporary at the step).")
        return torch.optim.AdamW(params, lr=1e-5, foreach=True)
    if name == "sgd":
        notes.append("SGD as HF Trainer optim='sgd' (no momentum, no state).")
        return torch.optim.SGD(params, lr=1e-3, foreach=True)
    if name == "adafactor":
        from transformers.optimization import Adafactor
        notes.append("Adafactor as HF Trainer optim='adafactor' (factored second moment, no first moment).")
        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)
    if name == "lion":
        notes.append("Lion: one fp32-or-param-dtype momentum buffer per parameter (gpuplan's implementation).")
        return Lion(params)
    if name == "adamw-8bit":
        notes.append("AdamW 8-bit MODELLED (bitsandbytes needs CUDA): uint8 states + fp32 absmax per "
                     "256-element block, fp32 states for tensors under 4096 elements, in-place update.")
        return Adam8bitModel(params)
    raise ValueError(name)


class OptimizerGroup:
    """Several optimizers stepped together (foreach kernels cannot mix DTensor and plain tensors,
    so with tensor parallel the sharded and the replicated parameters get one optimizer each)."""

    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self):
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    @property
    def state(self):
        merged = {}
        for o in self.optimizers:
            merged.update(o.state)
        return merged


def _muon(named, impl: str, notes: list[str]):
    """torch.optim.Muon on the hidden 2-D matrices, AdamW on the embedding, the output head and every vector
    (torch 2.13 `torch/optim/_muon.py` accepts only 2-D parameters; KellerJordan/Muon keeps embeddings and the
    head on AdamW)."""
    named = [(n, p) for n, p in named if p.requires_grad]
    hidden = [p for n, p in named if p.ndim == 2 and "embed" not in n and "lm_head" not in n]
    ids = {id(p) for p in hidden}
    rest = [p for _, p in named if id(p) not in ids]
    notes.append("Muon (torch.optim.Muon, 5 Newton-Schulz steps, nesterov) on hidden matrices; AdamW "
                 f"({'fused' if impl == 'fused' else 'foreach'}) on embeddings, head and vectors.")
    return OptimizerGroup([torch.optim.Muon(hidden, lr=0.02),
                           torch.optim.AdamW(rest, lr=1e-5, foreach=impl != "fused", fused=impl == "fused")])


def make_optimizers(name: str, impl: str, params, notes: list[str]):
    if name == "muon":
        return _muon(params, impl, notes)
    params = [p for p in params if p.requires_grad]
    dtensor = [p for p in params if hasattr(p, "_local_tensor") or type(p).__name__ == "DTensor"]
    plain = [p for p in params if not (hasattr(p, "_local_tensor") or type(p).__name__ == "DTensor")]
    if dtensor and plain:
        notes.append("DTensor and plain parameters get separate optimizers (foreach kernels cannot mix them); "
                     "the foreach temporary is then per group, not for all parameters at once.")
        scratch: list[str] = []
        return OptimizerGroup([make_optimizer(name, impl, dtensor, notes), make_optimizer(name, impl, plain, scratch)])
    return make_optimizer(name, impl, params, notes)

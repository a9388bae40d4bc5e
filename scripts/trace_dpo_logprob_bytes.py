"""HBM bytes per logit of TRL's DPO log-prob block beyond HF's supervised loss, counted op by op.

The policy pass of a DPO step is priced as an SFT step (estimate/posttrain.py policy_scenario), whose loss block
is HF's cross-entropy (`ForCausalLMLoss`: the logits' fp32 copy, log_softmax, nll and their backward). TRL's
DPOTrainer (v1.9.0, commit 35def3ee, trl/trainer/dpo_trainer.py `_compute_loss` L1329-1625) instead runs, over
the same [chosen; rejected] logits: selective_log_softmax's fp32 branch (a per-row logsumexp and a gather,
trl/trainer/utils.py L479-523) with its backward; the reference forward's logits, their fp32 copy and the same
log-probs under no_grad; and the logged metrics (entropy over a flattened copy, 128-row chunks; the chosen and
rejected logits picked by boolean masks and averaged; the chosen argmax). This script runs both blocks on real
CPU tensors (gpuplan.trace._posttrain.dpo_loss, the code `gpuplan trace` and `gpuplan measure` run) under the
element-wise trace's byte counter (scripts/trace_elementwise.py: every non-GEMM aten op's input + output bytes)
and prints the difference per policy logit (one token of the 2B rows x one vocabulary entry), with a reference
forward and with precomputed reference log-probs.

One correction: `logsumexp` is one aten op to the counter but four kernels on the GPU (pytorch/pytorch
@52881c80 aten/src/ATen/native/ReduceOps.cpp `logsumexp_out_impl`: amax, `self - maxes` into a new tensor, its
`exp_` in place, `sum_out`): 4 + 8 + 8 + 4 = 24 bytes per fp32 element, where the counter saw 4.

    PYTHONPATH=$PWD/src python3 scripts/trace_dpo_logprob_bytes.py      (seconds on a CPU)

torch 2.13 CPU prints 145.4 (reference forward) and 111.8 (precomputed) beyond HF's 44.0; estimate/posttrain.py
TRL_DPO_LOGPROB_EXTRA counts them by hand from the same code, 144 and 114.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "src"))

B, S, V, H = 2, 64, 4096, 32          # pairs, tokens, vocabulary, hidden: the logits dwarf everything else


def _counter():
    import torch
    from trace_elementwise import ByteCounter
    from torch.utils._pytree import tree_leaves

    class LogsumexpAsKernels(ByteCounter):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if func.__name__.split(".")[0] == "logsumexp":
                src = next(t for t in tree_leaves(args) if isinstance(t, torch.Tensor))
                extra = 5 * src.numel() * src.element_size()     # 24 bytes per element in all, 4 counted
                self.total += extra
                self.by_op["logsumexp"] = self.by_op.get("logsumexp", 0) + extra
            return out
    return LogsumexpAsKernels()


def _tensors():
    import torch
    torch.manual_seed(0)
    w = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
    h = torch.randn(2 * B, S, H, dtype=torch.bfloat16, requires_grad=True)
    ids = torch.randint(0, V, (2 * B, S))
    return w, h, ids


def sft_block_bytes() -> float:
    """HF's ForCausalLMLoss over 2B rows (transformers loss_utils: logits.float(), labels padded and shifted,
    cross_entropy over the flattened logits) and its backward, per logit."""
    import torch.nn.functional as F
    w, h, ids = _tensors()
    c = _counter()
    with c:
        logits = (h @ w.t()).float()
        labels = F.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
        loss.backward()
    return c.total / (2 * B * S * V)


class _Out:
    def __init__(self, logits):
        self.logits = logits


def dpo_block_bytes(reference: str) -> float:
    """TRL's `_compute_loss` (trace/_posttrain.dpo_loss) over the same logits and its backward, per logit. The
    'model' is the lm_head GEMM alone (not counted: a GEMM), the reference a frozen copy of it."""
    import torch
    from gpuplan.trace import _posttrain as pt
    w, h, ids = _tensors()

    class Policy(torch.nn.Module):
        def forward(self, input_ids, use_cache=False):
            return _Out(h @ w.t())

    class Reference(torch.nn.Module):
        def forward(self, input_ids, use_cache=False):
            return _Out(h.detach() @ w.detach().t())

    class NoPhases:
        def set_phase(self, name):
            pass
    pre = (torch.zeros(B), torch.zeros(B)) if reference == "precomputed" else None
    c = _counter()
    with c:
        loss = pt.dpo_loss(Policy(), Reference(), ids, contextlib.nullcontext, NoPhases(), reference=reference,
                           fp32_outputs=True, precomputed=pre)
        loss.backward()
    return c.total / (2 * B * S * V)


def extra_bytes_per_logit() -> dict[str, float]:
    sft = sft_block_bytes()
    return {"reference": dpo_block_bytes("copy") - sft, "precomputed": dpo_block_bytes("precomputed") - sft}


if __name__ == "__main__":
    print(f"HF SFT loss block: {sft_block_bytes():.1f} bytes per logit")
    for k, v in extra_bytes_per_logit().items():
        print(f"TRL DPO log-prob block beyond it, {k}: {v:.1f} bytes per logit")

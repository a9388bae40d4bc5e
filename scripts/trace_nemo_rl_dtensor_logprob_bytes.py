"""HBM bytes per logit of NeMo RL's DTensor (FSDP2) worker's log-prob block at tensor parallel 1, counted op by op.

NeMo RL v0.3.0 (b1c86a8, the code of the v0.3 blog's DTensor rows; transformers 4.52.4 in its uv.lock):

- the HF model runs under `torch.autocast(bf16)` (dtensor_policy_worker.py `train` / `get_logprobs`), so
  LlamaForCausalLM's `lm_head` returns bf16 logits (transformers 4.52 no longer upcasts them), and the root FSDP2
  module casts the model's outputs to `output_dtype=torch.float32` (`MixedPrecisionPolicy(param_dtype, reduce_dtype=
  float32, output_dtype=float32)`, nemo_rl/models/dtensor/parallelize.py L464-468; torch's FSDPState `_post_forward`,
  "FSDP::cast_forward_outputs"): one fp32 copy of the logits;
- `_apply_temperature_scaling` divides only without vLLM's V1 engine (`NRL_VLLM_USE_V1` defaults to 1,
  nemo_rl/models/policy/utils.py L25-31): no op;
- training with sequence packing: `SequencePackingLossWrapper` (nemo_rl/algorithms/loss_functions.py L621-700) calls
  `ClippedPGLossFn` once per packed sequence on the slice `next_token_logits[:, start:end, :]`; at tp 1 the loss
  takes its plain branch (L160-170): `.to(torch.float32)` (a no-op on fp32), `[:, :-1]`, `log_softmax`, `gather`;
- no-grad passes (`get_logprobs`, dtensor_policy_worker.py L1006-1018): `log_softmax(outputs.logits.to(float32))`
  over the whole pack, `[:, :-1]`, `gather`.

This script runs those ops on CPU tensors under the element-wise trace's byte counter (scripts/trace_elementwise.py:
every non-GEMM aten op's input + output bytes; the lm_head GEMM is not counted) and prints bytes per logit of a
pack of k sequences of L tokens, training and no-grad, raw and as the GPU moves them. Three ops the counter reads
differently from the GPU: `gather` reads only the chosen entries (the counter adds its whole input), gather's
backward scatters into its zero tensor in place (`scatter_add_`; under the dispatch mode autograd takes the
out-of-place variant, which the counter sees as a copy of the zeros), and `slice_backward` writes the zero tensor and
then copies the slice's gradient in (read and written; the counter sees its input once and its output once). The
per-token loss arithmetic (advantages, ratios, KL on [T] vectors) is left out: it is not vocabulary-wide.

    PYTHONPATH=$PWD/src python3 scripts/trace_nemo_rl_dtensor_logprob_bytes.py      (seconds on a CPU)

torch 2.13 CPU, L = 64: training raw 55.4, 79.4, 111.4, 175.4 for k = 1, 2, 4, 8, as the GPU moves them 47.5, 75.5,
107.5, 171.5 (48 + 16 k - 4 for k >= 2 and 48 for k = 1, less what the [:, :-1] slice drops: 20 x 1/L); no-grad
raw 17.9, GPU 14.0. estimate/rl.py LOGPROB_BYTES["nemo-rl-dtensor-0.3"] = (48, 14) and packed_slice_bytes(k) count
the same by hand. A pack of one sequence is sliced whole (an alias: no slice_backward), hence 48 at k = 1.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

L, V, H = 64, 4096, 32          # tokens a sequence, vocabulary, hidden: the logits dwarf everything else


def _counter():
    import torch
    from trace_elementwise import ByteCounter
    from torch.utils._pytree import tree_leaves

    class GpuBytes(ByteCounter):
        """The byte counter, plus what the GPU moves differently (module docstring) kept apart in `gpu_delta`."""
        gpu_delta = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = self.total
            out = super().__torch_dispatch__(func, types, args, kwargs)
            name = func.__name__.split(".")[0]
            if name in ("gather", "scatter_add"):
                self.gpu_delta -= self.total - before        # only the chosen entries move
            elif name == "slice_backward":
                src = next(t for t in tree_leaves(args) if isinstance(t, torch.Tensor))
                self.gpu_delta += src.numel() * src.element_size()     # the copy also writes the slice
            return out
    return GpuBytes()


def block_bytes(k: int, grad: bool, gpu: bool = True) -> float:
    import torch
    torch.manual_seed(0)
    T = k * L
    w = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=grad)
    h = torch.randn(1, T, H, dtype=torch.bfloat16, requires_grad=grad)
    ids = torch.randint(0, V, (1, T))
    c = _counter()
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx, c:
        logits = (h @ w.t()).to(torch.float32)          # bf16 lm_head output, FSDP2's fp32 output cast
        if grad:
            loss = torch.zeros((), dtype=torch.float32)
            for s in range(k):                          # SequencePackingLossWrapper: one loss call a sequence
                sl = logits[:, s * L:(s + 1) * L, :].to(torch.float32)
                lp = torch.nn.functional.log_softmax(sl[:, :-1], dim=-1)
                tok = lp.gather(dim=-1, index=ids[:, s * L + 1:(s + 1) * L].unsqueeze(-1)).squeeze(-1)
                loss = loss + tok.sum()
            loss.backward()
        else:
            lp = torch.nn.functional.log_softmax(logits.to(torch.float32), dim=-1)[:, :-1]
            lp.gather(dim=-1, index=ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (c.total + (c.gpu_delta if gpu else 0)) / (T * V)


if __name__ == "__main__":
    for k in (1, 2, 4, 8):
        print(f"k = {k}: training {block_bytes(k, True, False):.1f} raw, {block_bytes(k, True):.1f} on the GPU; "
              f"no-grad {block_bytes(k, False, False):.1f} raw, {block_bytes(k, False):.1f} on the GPU (bytes per logit)")

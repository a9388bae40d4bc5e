"""The memory-bound work Transformer Engine's ring (P2P) context-parallel attention adds to an attention layer.

Megatron-Core 0.9 (NeMo 24.09; NeMo's software-component table lists Megatron Core 0.9.0 and Transformer Engine 1.10)
has no `cp_comm_type`: TEDotProductAttention passes cp_group / cp_global_ranks / cp_stream only
(NVIDIA/Megatron-LM@1afee592, core_v0.9.0, megatron/core/extensions/transformer_engine.py L483-489), so TE's default
`cp_comm_type="p2p"` runs: `attn_forward_func_with_cp` -> `AttnFuncWithCPAndKVP2P` (NVIDIA/TransformerEngine v1.10
@08a85d3b transformer_engine/pytorch/attention.py L3295-3405, L1302; the same class and branches at v1.13 @e5edd6cc,
L1644). Core 0.10 adds `cp_comm_type` with "p2p" the default (core_v0.10.0 extensions/transformer_engine.py L568).

For a causal mask the local sequence is two chunks (r, 2·cp−1−r: load balancing) and the ring runs cp steps: step 0
the causal diagonal over the local L = s/cp tokens; steps 1..r the whole local Q against the first half of the
received KV; steps r+1..cp−1 the second half of Q against the whole received KV (no mask). Each step's FLOPs equal
the diagonal's, so the attention kernels' FLOPs are the unsplit run's / cp (what speed prices at the kernel's causal
rate at s/cp). What the ring adds, per rank and attention layer, in the 16-bit path (bf16 attention; out, dq and dkv
are allocated in q's dtype at both tags: `out = torch.zeros_like(q)`, `dq = torch.empty_like(q)`):

forward (v1.10 L1459, L1625, L1737, L1949, L1976-2022)
  - `torch.cat((k.unsqueeze(-3), v.unsqueeze(-3)), dim=-3)`: the P2P send buffer: read + write KV       2·KV
  - `q[:, 1].contiguous()` (steps > r) / `kv[:, 0].contiguous()` (steps 1..r): half of Q or KV; a copy only
    when the micro-batch holds more than one sequence (bshd, Megatron's layout under apply_rope_fusion,
    core_v0.9.0 transformer_engine.py L541-545: with b = 1 the half is already contiguous)   Q or KV each
  - `out = torch.zeros_like(q)`                                                                          Q
  - `flash_attn_fwd_out_correction` per step, a torch.compile'd kernel (transformer_engine/pytorch/jit.py:
    `jit_fuser = torch.compile`): `out.add_(out_per_step * exp(lse_step − lse))` reads the step's output and
    out, writes out: the whole of out for steps <= r, its second half for the others                  3·Q or 1.5·Q
backward (v1.10 L2192-2198, L2215-2753)
  - the two (2, *kv.shape) KV/dKV ring buffers and `p2p_comm_buffers[0][0].copy_(kv)`                    2·KV
  - q/out/dout halves `.contiguous()` on the half-Q steps, kv's first half on the half-KV steps (b > 1)
  - dq: `dq.add_(dq_)` 3·Q, `dq.copy_(dq_)` 2·Q, half copies/adds by branch (L2627-2655)
  - `dkv_ = torch.cat((dk_.unsqueeze(0), dv_.unsqueeze(0)))` of the step's dK, dV                       2·KV or KV
  - dkv accumulation into the ring buffer: add / copy, whole or half by branch (L2717-2748)

Q and KV are the local q and k+v bytes (L·heads/tp·d·2 and 2·L·kv_heads/tp·d·2). The softmax-LSE buffers
(fp64 clone, corrections) are per head and token, < 2 % of Q at head dim 128, and are left out.

The P2P exchange itself (KV forward, KV then dKV backward) is issued before each step's attention kernel on another
stream and waited on after it (forward: two streams, `flash_attn_streams`; backward: `req.wait()` after the step's
kernels), so it is hidden behind the step as speed's `comm_cp_s` already prices it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RingBytes:
    """HBM bytes one CP rank's ring adds per attention layer and micro-batch (forward + backward)."""
    copies: float            # aten copies, cats, fills and in-place adds: contiguous vectorised kernels
    corrections: float       # flash_attn_fwd_out_correction: torch.compile'd broadcast multiply-add
    forward: float           # of copies + corrections, the forward's (a recomputed forward repeats it)


def te_p2p_rank_bytes(cp: int, rank: int, q: float, kv: float, halves_copied: bool = False) -> RingBytes:
    """The bytes rank `rank` of `cp` moves outside the attention kernels in AttnFuncWithCPAndKVP2P (causal mask,
    bshd/sbhd, 16-bit), following the branches of TE v1.10 / v1.13 (module docstring). `q`, `kv`: the local q and
    k+v bytes; `halves_copied`: the half-tensor selects are copies (bshd with more than one sequence a micro-batch)."""
    if cp <= 1:
        return RingBytes(0.0, 0.0, 0.0)
    n, r = cp, rank
    half = 1.0 if halves_copied else 0.0
    # forward
    copies = 2.0 * kv + q                                     # KV send buffer (cat); out = zeros_like(q)
    corrections = 0.0
    for i in range(n):
        if 1 <= i <= r:
            copies += half * kv                               # kv_inputs[:, 0].contiguous()
        elif i > r:
            copies += half * q                                # q[:, 1].contiguous()
        corrections += 3.0 * q if i <= r else 1.5 * q         # out (or its second half) += out_i · exp(Δlse)
    forward = copies + corrections
    # backward: step i redoes the forward's step n-1-i
    copies += 2.0 * kv                                        # p2p_comm_buffers[0][0].copy_(kv)
    for i in range(n):
        diagonal = i == n - 1
        half_kv = (not diagonal) and i >= n - r - 1           # full Q against the first half of KV
        half_q = (not diagonal) and not half_kv               # second half of Q against all of KV
        if half_kv:
            copies += half * kv                               # kv[:, 0].contiguous()
        elif half_q:
            copies += half * 3.0 * q                          # q, out, dout second halves .contiguous()
        # dq accumulation (L2627-2655)
        if i > n - r - 1:
            copies += 3.0 * q                                 # dq.add_(dq_)
        elif i == n - r - 1:
            copies += 2.0 * q if r == n - 1 else 2.5 * q      # dq.copy_ | dq[0].copy_ + dq[1].add_
        else:
            copies += 1.5 * q if i > 0 else 1.0 * q           # dq[1].add_ | dq[1].copy_
        # dkv_ = cat(dk_, dv_) of this step's gradients: half of KV on the half-KV steps
        copies += 1.0 * kv if half_kv else 2.0 * kv
        # dkv accumulation into the ring buffer (L2717-2748)
        if diagonal:
            copies += 2.5 * kv if r == 0 else 3.0 * kv        # dkv[0-half].add_ + dkv[1-half].copy_ | dkv.add_
        elif half_kv:
            copies += 1.0 * kv if (i == 0 and r == n - 1) else 1.5 * kv   # first half copy_ | add_
        else:
            copies += 3.0 * kv if i > 0 else 2.0 * kv         # dkv.add_ | dkv.copy_
    return RingBytes(copies, corrections, forward)


def te_p2p_ring_time(cp: int, q: float, kv: float, copy_rate: float, fused_rate: float,
                     halves_copied: bool = False, forward_repeats: float = 0.0) -> float:
    """Seconds the busiest CP rank spends on the ring's copies (at `copy_rate` B/s) and out corrections (at
    `fused_rate`) per attention layer and micro-batch; `forward_repeats` re-runs the forward's share (recompute).
    The ranks meet at every step's exchange, so the slowest sets the pace."""
    worst = 0.0
    for r in range(max(cp, 1)):
        b = te_p2p_rank_bytes(cp, r, q, kv, halves_copied)
        fwd_corr = b.corrections                    # every correction is in the forward
        fwd_copies = b.forward - b.corrections
        t = (b.copies + forward_repeats * fwd_copies) / copy_rate \
            + (b.corrections + forward_repeats * fwd_corr) / fused_rate
        worst = max(worst, t)
    return worst

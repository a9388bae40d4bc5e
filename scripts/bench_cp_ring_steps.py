"""One-GPU check of what a CP=2 rank of Transformer Engine's ring attention (AttnFuncWithCPAndKVP2P, docs/speed.md
2.14) costs beyond gpuplan's price, without NCCL: time each rank's attention-kernel sequence -- the causal diagonal
L x L plus the unmasked second-half-Q x all-KV (rank 0) or all-Q x first-half-KV (rank 1) call, forward + backward --
against twice one causal L x L call (the price: the off-diagonal call has the diagonal's FLOPs), and time the ring's
copies and output corrections as TE issues them (cat, zeros, torch.compile'd correction, dq/dkv copies and adds)
against estimate/context_parallel.py's bytes at the measured shares. torch SDPA on cuDNN stands in for TE's cuDNN
calls (same cuDNN sm90 flash kernels, other front end); K/V are expanded to the query heads (SDPA's cuDNN path takes
equal heads), which leaves the kernels compute-bound as TE's GQA calls are. b = 1, head dim 128, bf16, L = 4,096
(the DG rows' local tokens): heads 32 (Llama 3.1 8B, TP 1) and 16 (70B, TP 4).

    OUT=/tmp python3 scripts/bench_cp_ring_steps.py        # writes $OUT/cp_ring_steps.csv (about a minute)
"""
import csv, os, torch, torch.nn.functional as F

Y = torch.cuda.synchronize


def tm(fn, n=10):
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    Y(); s.record()
    for _ in range(n):
        fn()
    e.record(); Y()
    return s.elapsed_time(e) / n


def qkv(h, sq, sk, d=128):
    t = lambda s: torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    return t(sq), t(sk), t(sk), torch.randn(1, h, sq, d, device="cuda", dtype=torch.bfloat16)


def fwd_bwd(q, k, v, g, causal):
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)


@torch.compile
def correction(out, out_i, lse, lse_i):            # TE v1.10 flash_attn_fwd_out_correction (bshd, b = 1)
    out.add_(out_i * torch.exp(lse_i - lse).movedim(2, 1).unsqueeze(-1))


rows, L = [], 4096
for h, kvh in ((32, 8), (16, 2)):
    diag = fwd_bwd(*qkv(h, L, L), True)
    r0 = fwd_bwd(*qkv(h, L // 2, L), False)       # rank 0 off-diagonal: second half of Q, all of KV
    r1 = fwd_bwd(*qkv(h, L, L // 2), False)       # rank 1 off-diagonal: all of Q, first half of KV
    t_diag, t_r0, t_r1 = tm(diag), tm(r0), tm(r1)
    # the ring's memory-bound ops on rank 1 (12Q + 11KV bytes at b = 1), bshd [1, L, heads, 128]
    Q = torch.randn(1, L, h, 128, device="cuda", dtype=torch.bfloat16)
    K, V = (torch.randn(1, L, kvh, 128, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    lse = torch.randn(1, h, L, device="cuda", dtype=torch.float32)
    dkv = torch.empty(2, 1, L, kvh, 128, device="cuda", dtype=torch.bfloat16)
    dk_h = torch.randn(1, L // 2, kvh, 128, device="cuda", dtype=torch.bfloat16)

    def ring_ops():
        kvbuf = torch.cat((K.unsqueeze(-3), V.unsqueeze(-3)), dim=-3)          # forward send buffer
        out = torch.zeros_like(Q)
        correction(out, Q, lse, lse); correction(out, Q, lse, lse)            # two whole corrections
        ring = torch.empty((2, *kvbuf.shape), dtype=Q.dtype, device="cuda"); ring[0].copy_(kvbuf)
        dq = torch.empty_like(Q); dq.copy_(Q)                                 # i=0: dq.copy_
        dkv_ = torch.cat((dk_h.unsqueeze(0), dk_h.unsqueeze(0)))              # half-size dK, dV cat
        dkv[:, :, : L // 2].copy_(dkv_)                                       # first-half copy
        dq.add_(Q)                                                            # i=1: dq.add_
        dkv2 = torch.cat((K.unsqueeze(0), V.unsqueeze(0)))                    # full dK, dV cat
        dkv.add_(dkv2)                                                        # dkv.add_
    t_ring = tm(ring_ops)
    qb, kvb = L * h * 128 * 2, 2 * L * kvh * 128 * 2
    rows.append(dict(heads=h, kv_heads=kvh, local_tokens=L, diag_ms=t_diag, offdiag_rank0_ms=t_r0,
                     offdiag_rank1_ms=t_r1, rank_excess_over_2diag=max(t_r0, t_r1) / t_diag - 1.0,
                     ring_ops_ms=t_ring, ring_copy_bytes=6 * qb + 11 * kvb, ring_correction_bytes=6 * qb,
                     gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                     cudnn=torch.backends.cudnn.version()))
    print(rows[-1])
with open(os.path.join(os.environ.get("OUT", "."), "cp_ring_steps.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader(); w.writerows(rows)

"""Times the host-side Python of NeMo RL's Megatron worker (v0.3.0, or 06beed91 with --version 0.4) per packed micro-batch on this CPU (docs/posttrain.md,
*NeMo RL's host work around the passes, timed in its code*; estimate/nemo_rl_host.py, rl.host_loop_seconds): the real functions of the NeMo RL source
tree, read at v0.3.0 (b1c86a8, the blog's code), imported without installing it (Megatron, NeMo, transformers and the
DTensor module are stubbed: nothing of theirs runs on this path). With torch CPU tensors of a micro-batch's shapes:

* training (`megatron_policy_worker.train` -> `forward_step_arbitrary_loss`, nemo_rl/models/megatron/common.py):
  `next(data_iterator)` (`BatchedDataDict.make_microbatch_iterator_for_packable_sequences` -> `slice`), `.to(device)`
  of the 8 tensors of GRPO's train_data, `_pack_sequences_for_megatron`, then the loss Megatron's schedule calls on
  the model's output: `SequencePackingLossWrapper(ClippedPGLossFn)` over the k packed sequences (GRPO's
  `grpo_math_1B.yaml` loss settings: KL 0.01, clip 0.2/0.2, no dual clip, token-level loss), and its backward to the
  logits (timed apart: the autograd engine issues it while the GPU runs the earlier part);
* log-prob (`get_logprobs` -> `forward_step_fn`): the same slice and `.to` of the 6 tensors it is given, `clone()` and
  `_pack_sequences_for_megatron`, and `collection_fn` ->
  `from_parallel_logits_to_logprobs_packed_sequences(..., inference_only=True)`, the zero prepend and the
  `torch.tensor(0.0)`.

Logits are CPU tensors --vocab wide (tiny: their kernels are the GPU's, priced elsewhere); sequences --len tokens
(tiny: the per-token kernels are the GPU's). `DistributedLogprob`'s all-reduces are counted, not run (--gloo runs
them over a one-rank gloo group). The loss's and the collection's segment that runs beside the logits' kernels is
timed by the `.item()` calls around it (`ClippedPGLossFn` between its first and second `.item()`: the fp32 cast,
`DistributedLogprob`, KL, ratios, clipping, masked means; the log-prob `collection_fn` between the roll loop's last
`.item()` and the unpack loop's first) and reported apart: the rest is what the GPU waits for. A counting pass
(TorchDispatchMode) counts per micro-batch the aten ops that launch a kernel (scripts/count_train_kernels.py's rule)
and the host synchronisations (`aten._local_scalar_dense`: `.item()`, a 0-d tensor used as an index,
`bool(tensor)`; on the CPU also `one_hot`'s two range checks in the backward, which CUDA skips).

--driver N,W[,dp,train_mb_tokens,logprob_mb_tokens,gbs] times the driver's side instead (lm_policy.py: the
`shard_by_batch_size` of a training and of a log-prob pass, and a log-prob pass's `from_batches` + `reorder_data`).

    python3 scripts/bench_nemo_rl_host.py /path/to/nemo_rl-v0.3.0-tree [--seqs 1,8] [--reps 200] [--vocab 32]

The tree is `git archive b1c86a8 nemo_rl` of NVIDIA-NeMo/RL (`git archive 06beed91 nemo_rl` with --version 0.4). Prints per k (sequences a pack) the best and median
seconds of each part, the counts, and the per-sequence / per-micro-batch slopes between the two k.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from dataclasses import dataclass

from import_stubs import Stubs  # scripts/: a neighbour

_STUB_TOP = {"megatron", "nemo", "transformers", "ray"}
_STUB_PKG = ("nemo_rl.models.dtensor", "nemo_rl.data.hf_datasets", "nemo_rl.models.policy",
             "nemo_rl.data.chat_templates")


@dataclass
class PackedSeqParams:       # megatron/core/packed_seq_params.py: a plain dataclass
    qkv_format: str = None
    cu_seqlens_q: object = None
    cu_seqlens_kv: object = None
    cu_seqlens_q_padded: object = None
    cu_seqlens_kv_padded: object = None
    max_seqlen_q: object = None
    max_seqlen_kv: object = None


def _import(src: str):
    sys.meta_path.insert(0, Stubs(_STUB_TOP, _STUB_PKG))
    sys.path.insert(0, src)
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        import os
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("gloo", rank=0, world_size=1)
    import megatron.core.packed_seq_params as psp
    psp.PackedSeqParams = PackedSeqParams
    pkg = types.ModuleType("nemo_rl")        # skip nemo_rl/__init__ (paths and package info only)
    pkg.__path__ = [src + "/nemo_rl"]
    sys.modules["nemo_rl"] = pkg
    from nemo_rl.algorithms.loss_functions import ClippedPGLossFn, SequencePackingLossWrapper
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.distributed import model_utils
    from nemo_rl.models.megatron import common
    return torch, dist, ClippedPGLossFn, SequencePackingLossWrapper, BatchedDataDict, model_utils, common


_NO_KERNEL = {"empty", "empty_like", "empty_strided", "detach", "alias", "lift_fresh", "_local_scalar_dense",
              "set_", "resize_", "_unsafe_view", "view", "_reshape_alias", "as_strided", "t", "transpose",
              "permute", "expand", "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes",
              "unbind", "chunk", "narrow", "unfold", "diagonal", "view_as_real", "view_as_complex", "clone_meta"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--seqs", default="1,8")
    ap.add_argument("--len", type=int, default=32, dest="seqlen")
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--tp", type=int, default=1, help="pad factor of the packer (tp without CP)")
    ap.add_argument("--pp-pad", action="store_true", help="pad the pack to a fixed length (pipeline parallel)")
    ap.add_argument("--version", default="0.3", choices=("0.3", "0.4"),
                    help="the tree's NeMo RL: 0.3 = v0.3.0 (b1c86a8), 0.4 = 06beed91 (the v0.4 table's)")
    ap.add_argument("--gloo", action="store_true", help="run DistributedLogprob's all-reduces over gloo (else counted)")
    ap.add_argument("--driver", default="", help="N,W[,dp,train_mb_tokens,logprob_mb_tokens,gbs]: time the driver's "
                    "shard_by_batch_size / from_batches / reorder_data instead")
    a = ap.parse_args(argv)
    torch, dist, ClippedPGLossFn, Wrapper, BDD, mu, common = _import(a.src)
    if a.driver:
        return driver(torch, BDD, a)
    torch.set_num_threads(1)
    from torch.utils._python_dispatch import TorchDispatchMode
    group = dist.group.WORLD
    n_coll = {"all_reduce": 0}
    if not a.gloo:       # NCCL's host call is priced as a launched op (counted), not gloo's CPU reduction
        def _all_reduce(t, op=None, group=None, async_op=False):
            n_coll["all_reduce"] += 1
        dist.all_reduce = _all_reduce
    cfg = dict(reference_policy_kl_penalty=0.01, ratio_clip_min=0.2, ratio_clip_max=0.2, ratio_clip_c=None,
               use_on_policy_kl_approximation=False, use_importance_sampling_correction=False, token_level_loss=True)
    if a.version == "0.4":      # grpo_math_1B.yaml loss_fn @06beed91
        cfg.update(reference_policy_kl_type="k3", kl_input_clamp_value=20.0, kl_output_clamp_value=10.0,
                   truncated_importance_sampling_ratio=None, sequence_level_importance_ratios=False)
    # .item() calls a sequence in the wrapper + ClippedPGLossFn, and the one after which the logits' segment starts:
    # v0.3.0 the wrapper's 2, mult_prob_error | ..., probs_ratio, 6 more; 06beed91 the wrapper's 2, mult_prob_error,
    # gen_kl_error, policy_kl_error, js_divergence_error | ..., probs_ratio, 6 more
    cycle, before = (10, 3) if a.version == "0.3" else (13, 6)
    loss_fn = ClippedPGLossFn(cfg)
    L, V = a.seqlen, a.vocab
    width = L + 8                   # the batch's padded width (right padding beyond the longest sequence)
    results = {}
    for k in [int(x) for x in a.seqs.split(",")]:
        B = 2 * k                   # two packs in the rank's batch: the iterator slices the first
        lengths = torch.full((B,), L, dtype=torch.int64)
        train = BDD({"input_ids": torch.randint(0, V, (B, width)), "input_lengths": lengths,
                     "advantages": torch.randn(B, width), "generation_logprobs": -torch.rand(B, width),
                     "token_mask": torch.ones(B, width), "sample_mask": torch.ones(B),
                     "prev_logprobs": -torch.rand(B, width), "reference_policy_logprobs": -torch.rand(B, width)})
        lpdata = BDD({key: train[key] for key in ("input_ids", "input_lengths", "advantages", "generation_logprobs",
                                                    "token_mask", "sample_mask")})
        for d in (train, lpdata):
            d.micro_batch_indices = [[(0, k), (k, B)]]
            d.micro_batch_lengths = [[k * L, k * L]]
        pad_to = (k * L + 16) if a.pp_pad else None
        T = pad_to if pad_to else k * (-(-L // a.tp) * a.tp)
        gvs, gvt = torch.tensor(float(B)), torch.tensor(float(B * L))

        def t_fetch(d, device="cpu"):
            it = d.make_microbatch_iterator_for_packable_sequences()
            t0 = time.perf_counter()
            mb = next(it)
            t1 = time.perf_counter()
            mb.to(device)
            t2 = time.perf_counter()
            return mb, t1 - t0, t2 - t1

        def t_pack(mb, clone):
            t0 = time.perf_counter()
            ids = mb["input_ids"].clone() if clone else mb["input_ids"]
            out = common._pack_sequences_for_megatron(ids, mb["input_lengths"], pad_individual_seqs_to_multiple_of=a.tp,
                                                      pad_packed_seq_to=pad_to, cp_rank=0, cp_size=1)
            return out, time.perf_counter() - t0

        def t_loss(mb, packed):
            logits = torch.randn(1, T, V, requires_grad=True)
            psp = packed[2]
            t0 = time.perf_counter()
            wrapped = Wrapper(loss_fn=loss_fn, cu_seqlens_q=psp.cu_seqlens_q, cu_seqlens_q_padded=psp.cu_seqlens_q_padded)
            loss, metrics = wrapped(logits, data=mb, global_valid_seqs=gvs, global_valid_toks=gvt,
                                    vocab_parallel_rank=0, vocab_parallel_group=group, context_parallel_group=None)
            t1 = time.perf_counter()
            loss.backward()
            return t1 - t0, time.perf_counter() - t1

        def t_collect(mb, packed):
            logits = torch.randn(1, T, V)
            t0 = time.perf_counter()
            with torch.no_grad():
                lp = mu.from_parallel_logits_to_logprobs_packed_sequences(
                    logits, target=packed[0], cu_seqlens_padded=packed[4], unpacked_seqlen=mb["input_ids"].shape[1],
                    vocab_start_index=0, vocab_end_index=V, group=group, inference_only=True, cp_group=None)
                lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
                _ = torch.tensor(0.0, device=lp.device), {"logprobs": lp}
            return time.perf_counter() - t0

        # the segment beside the logits' kernels, timed by the .item() calls around it: in ClippedPGLossFn the 3rd
        # and 4th of each sequence's ten (the wrapper's two, then mult_prob_error | fp32 cast, DistributedLogprob,
        # KL, ratios, clipping, masked means | probs_ratio); in the packed log-prob function the (2k)th and
        # (2k+1)th (the roll loop | DistributedLogprob | the unpack loop)
        stamps = []
        real_item = torch.Tensor.item

        def item(self):
            stamps.append(time.perf_counter())
            return real_item(self)

        torch.Tensor.item = item
        hid_s = {"train_loss": [], "lp_collect": []}
        exp_s = {"train_loss": [], "lp_collect": []}
        parts = {p: [] for p in ("train_fetch", "train_to", "train_pack", "train_loss", "train_backward",
                                 "lp_fetch", "lp_to", "lp_pack", "lp_collect")}
        for r in range(a.reps + 10):
            mb, f, to = t_fetch(train)
            packed, p = t_pack(mb, False)
            stamps.clear()
            lo, bw = t_loss(mb, packed)
            st = list(stamps)
            assert len(st) == cycle * k, (len(st), cycle, k)
            h_train = sum(st[cycle * i + before] - st[cycle * i + before - 1] for i in range(k))
            mb2, f2, to2 = t_fetch(lpdata)
            packed2, p2 = t_pack(mb2, True)
            stamps.clear()
            c = t_collect(mb2, packed2)
            st = list(stamps)
            h_lp = st[2 * k] - st[2 * k - 1]
            if r >= 10:
                hid_s["train_loss"].append(h_train)
                hid_s["lp_collect"].append(h_lp)
                exp_s["train_loss"].append(lo - h_train)
                exp_s["lp_collect"].append(c - h_lp)
                for key, v in zip(parts, (f, to, p, lo, bw, f2, to2, p2, c)):
                    parts[key].append(v)

        torch.Tensor.item = real_item
        # counting pass: kernels and syncs per part, and the loss's op split around the logits segment
        class Count(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.phase, self.ops, self.syncs, self.log = "", {}, {}, []

            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                t = time.perf_counter()
                name = func.overloadpacket.__name__
                if name == "_local_scalar_dense":
                    self.syncs[self.phase] = self.syncs.get(self.phase, 0) + 1
                    self.log.append((self.phase, "sync", t))
                elif name not in _NO_KERNEL and not getattr(func, "is_view", False):
                    self.ops[self.phase] = self.ops.get(self.phase, 0) + 1
                    big = any(isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[-1] == V and x.numel() >= T * V // k
                              for x in args)
                    self.log.append((self.phase, "big" if big else "op", t))
                else:
                    self.log.append((self.phase, "view", t))
                return func(*args, **(kwargs or {}))

        def count_once():
            cm = Count()
            mb = next(train.make_microbatch_iterator_for_packable_sequences())
            with cm:
                cm.phase = "train_to"
                mb.to("cpu")
                for key in list(mb.keys()):      # on the GPU each .to is a copy; on the CPU a no-op: count them
                    cm.ops["train_to"] = cm.ops.get("train_to", 0) + 1
                cm.phase = "train_pack"
                packed = common._pack_sequences_for_megatron(mb["input_ids"], mb["input_lengths"],
                                                             pad_individual_seqs_to_multiple_of=a.tp,
                                                             pad_packed_seq_to=pad_to, cp_rank=0, cp_size=1)
                cm.phase = "setup"
                logits = torch.randn(1, T, V, requires_grad=True)
                cm.phase = "train_loss"
                wrapped = Wrapper(loss_fn=loss_fn, cu_seqlens_q=packed[2].cu_seqlens_q,
                                  cu_seqlens_q_padded=packed[2].cu_seqlens_q_padded)
                loss, _ = wrapped(logits, data=mb, global_valid_seqs=gvs, global_valid_toks=gvt, vocab_parallel_rank=0,
                                  vocab_parallel_group=group, context_parallel_group=None)
                cm.phase = "train_backward"
                loss.backward()
                mb2 = next(lpdata.make_microbatch_iterator_for_packable_sequences())
                cm.phase = "lp_to"
                for key in list(mb2.keys()):
                    cm.ops["lp_to"] = cm.ops.get("lp_to", 0) + 1
                cm.phase = "lp_pack"
                packed2 = common._pack_sequences_for_megatron(mb2["input_ids"].clone(), mb2["input_lengths"],
                                                              pad_individual_seqs_to_multiple_of=a.tp,
                                                              pad_packed_seq_to=pad_to, cp_rank=0, cp_size=1)
                cm.phase = "setup"
                t_logits = torch.randn(1, T, V)
                cm.phase = "lp_collect"
                with torch.no_grad():
                    lp = mu.from_parallel_logits_to_logprobs_packed_sequences(
                        t_logits, target=packed2[0], cu_seqlens_padded=packed2[4],
                        unpacked_seqlen=mb2["input_ids"].shape[1], vocab_start_index=0, vocab_end_index=V, group=group,
                        inference_only=True, cp_group=None)
                    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
                    _ = torch.tensor(0.0)
            return cm

        n_coll["all_reduce"] = 0
        cm = count_once()
        hidden = {}
        for phase in ("train_loss", "lp_collect"):
            ph_log = [kind for ph, kind, _t in cm.log if ph == phase]
            segs, seg = [], []
            for kind in ph_log:
                seg.append(kind)
                if kind == "sync":
                    segs.append(seg)
                    seg = []
            segs.append(seg)
            hid = sum(sum(1 for x in s_ if x in ("op", "big")) for s_ in segs if "big" in s_)
            tot = sum(sum(1 for x in s_ if x in ("op", "big")) for s_ in segs)
            hidden[phase] = (hid, tot, min(hid_s[phase]))
        best = {p: min(v) for p, v in parts.items()}
        med = {p: statistics.median(v) for p, v in parts.items()}
        exposed = {ph: min(exp_s[ph]) for ph in exp_s}
        results[k] = dict(best=best, med=med, ops=dict(cm.ops), syncs=dict(cm.syncs), hidden=hidden, exposed=exposed)
        print(f"k = {k} sequences a pack ({L} tokens each, vocab {V}, tp pad {a.tp}, pp pad {bool(pad_to)}):")
        for p in parts:
            print(f"  {p:15s} best {best[p] * 1e6:9.1f} us  median {med[p] * 1e6:9.1f} us  "
                  f"kernels {cm.ops.get(p, 0):4d}  syncs {cm.syncs.get(p, 0):3d}")
        for ph, (hid, tot, fr) in hidden.items():
            print(f"  {ph}: {hid} of {tot} kernels, {fr * 1e6:.1f} us of host time (best), in the segments that hold the "
                  f"logits' kernels")
        print(f"  DistributedLogprob all-reduces a training + a log-prob micro-batch (counted, not run): "
              f"{n_coll['all_reduce']}")
    ks = sorted(results)
    if len(ks) >= 2:
        k0, k1 = ks[0], ks[-1]
        print(f"slopes between k = {k0} and {k1} (best; us a sequence, us a micro-batch at k = 0):")
        for p in results[k0]["best"]:
            b0, b1 = results[k0]["best"][p], results[k1]["best"][p]
            s = (b1 - b0) / (k1 - k0)
            o0, o1 = results[k0]["ops"].get(p, 0), results[k1]["ops"].get(p, 0)
            y0, y1 = results[k0]["syncs"].get(p, 0), results[k1]["syncs"].get(p, 0)
            print(f"  {p:15s} {s * 1e6:8.1f} us/seq  {(b0 - s * k0) * 1e6:8.1f} us/mb   kernels "
                  f"{(o1 - o0) / (k1 - k0):6.2f}/seq {o0 - (o1 - o0) / (k1 - k0) * k0:6.1f}/mb   syncs "
                  f"{(y1 - y0) / (k1 - k0):5.2f}/seq {y0 - (y1 - y0) / (k1 - k0) * k0:5.1f}/mb")
        for ph in ("train_loss", "lp_collect"):
            h0, t0, f0 = results[k0]["hidden"][ph]
            h1, t1, f1 = results[k1]["hidden"][ph]
            print(f"  {ph}: hidden kernels {(h1 - h0) / (k1 - k0):.2f}/seq {h0 - (h1 - h0) / (k1 - k0) * k0:.1f}/mb of "
                  f"{(t1 - t0) / (k1 - k0):.2f}/seq {t0 - (t1 - t0) / (k1 - k0) * k0:.1f}/mb")
            e0 = results[k0]["exposed"][ph]
            e1 = results[k1]["exposed"][ph]
            s_ = (e1 - e0) / (k1 - k0)
            print(f"  {ph} outside those segments: {s_ * 1e6:.1f} us/seq {(e0 - s_ * k0) * 1e6:.1f} us/mb")
    return 0


def driver(torch, BDD, a) -> int:
    """The driver's side of a pass (nemo_rl/models/policy/lm_policy.py @b1c86a8: `train` and `get_logprobs`, inside
    the grpo.py timers `policy_training` and `policy_and_reference_logprobs`): `shard_by_batch_size` with the
    sequence-packing arguments (the MFFD packer over every sequence's padded length, `select_indices` per bin,
    `from_batches` per shard), and for a log-prob pass `from_batches` over the workers' results and `reorder_data`.
    N sequences of a W-wide batch (prompt ~ W/40 tokens, responses a seeded exponential of mean W/4 capped at W)."""
    import random
    vals = [int(x) for x in a.driver.split(",")]
    N, W = vals[0], vals[1]
    dp, tmb, lmb, gbs = (vals[2:] + [8, W, 2 * W, N // 4][len(vals) - 2:])[:4]
    torch.set_num_threads(1)
    rng = random.Random(0)
    prompt = max(1, W // 40)
    lens = [min(W, prompt + int(rng.expovariate(4.0 / W))) for _ in range(N)]
    lengths = torch.tensor(lens)
    train = BDD({"input_ids": torch.randint(0, 1000, (N, W)), "input_lengths": lengths,
                 "advantages": torch.randn(N, W), "generation_logprobs": -torch.rand(N, W),
                 "token_mask": torch.ones(N, W), "sample_mask": torch.ones(N),
                 "prev_logprobs": -torch.rand(N, W), "reference_policy_logprobs": -torch.rand(N, W)})
    lp = BDD({k: train[k] for k in ("input_ids", "input_lengths", "advantages", "generation_logprobs", "token_mask",
                                     "sample_mask")})
    spa = {"algorithm": "modified_first_fit_decreasing", "input_key": "input_ids", "input_lengths_key": "input_lengths",
           "sequence_length_pad_multiple": 1}
    out = {"train_shard": [], "lp_shard": [], "lp_gather": []}
    for _ in range(a.reps):
        t0 = time.perf_counter()
        train.shard_by_batch_size(dp, batch_size=gbs, sequence_packing_args=dict(spa, max_tokens_per_microbatch=tmb))
        t1 = time.perf_counter()
        shards, order = lp.shard_by_batch_size(dp, batch_size=None,
                                               sequence_packing_args=dict(spa, max_tokens_per_microbatch=lmb))
        t2 = time.perf_counter()
        res = [BDD(logprobs=torch.zeros(s_["input_ids"].shape[0], W)) for s_ in shards]   # what each worker returns
        t3 = time.perf_counter()
        got = BDD.from_batches(res)
        got.reorder_data(order)
        t4 = time.perf_counter()
        out["train_shard"].append(t1 - t0)
        out["lp_shard"].append(t2 - t1)
        out["lp_gather"].append(t4 - t3)
    print(f"driver: N {N} sequences x W {W}, dp {dp}, train_mb_tokens {tmb}, logprob_mb_tokens {lmb}, gbs {gbs}, "
          f"mean length {sum(lens) / N:.0f}")
    for k_, v in out.items():
        print(f"  {k_:12s} best {min(v) * 1e3:8.1f} ms  median {statistics.median(v) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Host time NeMo RL v0.3.0's own Python adds to its training and log-prob passes (rl.host_loop 'nemo-rl-0.3';
docs/posttrain.md, *NeMo RL's host work around the passes, timed in its code*).

Read in NVIDIA-NeMo/RL at v0.3.0 (b1c86a8, the code of the v0.3 blog's runs) and at 06beed91 (the v0.4 table's), and
timed on this project's development
machine (AMD EPYC Zen 4 Genoa, CPU family 25 model 17: the reference host's generation, hardware/hosts.py; Python
3.11.7, torch 2.13.0+cpu, one thread) by scripts/bench_nemo_rl_host.py, which imports the real functions from the
source tree with torch CPU tensors of a packed micro-batch (Megatron, NeMo and transformers stubbed: nothing of theirs
runs on this path). Figures are the best of 100 repetitions (the machine is shared with other jobs: medians run
10-50 % higher, so these are a floor), split per packed sequence and per micro-batch by timing packs of 1 and 8
sequences. Nothing here is read from a validation row.

**The driver** (nemo_rl/models/policy/lm_policy.py `train`, `get_logprobs`, `get_reference_policy_logprobs`, inside
grpo.py's timers `policy_training` and `policy_and_reference_logprobs`; the GPUs wait): `shard_by_batch_size` with the
sequence-packing arguments (MFFD over every sequence's length, `select_indices` per bin, `from_batches` per shard:
`pad_sequence` over every row of every 2-D key), and for a log-prob pass `from_batches` over the workers' results and
`reorder_data`. Timed at the v0.3 blog's shape, 2,048 sequences in a batch 4,096 tokens wide, dp 8 (4 the same),
train_mb_tokens 4,096, logprob_mb_tokens 16,384, the lowest of five runs: 245 ms (train, 8 keys), 198 ms (a log-prob
pass's shard, 6 keys) + 14 ms (its gather); at 06beed91 (the v0.4 table's code, the same functions) 235, 191 and 15 ms.
Runs while other jobs loaded the machine took up to 2.2x longer (539, 368, 30 ms): the copies are memory-bound. A
profile of a loaded train shard puts two thirds in the copies (`pad_sequence` 0.34 s, `select_indices` 0.16 s of
0.76 s, the first touch of freshly allocated pages included) and the rest in the packer and per-bin Python, so the
time is scaled by sequences x width from that shape. Ray's hand-off of the shards to the workers is not timed.

**The Megatron worker, per packed micro-batch** (megatron_policy_worker.py `train` -> common.py
`forward_step_arbitrary_loss`; `get_logprobs` -> `forward_step_fn` / `collection_fn`). What the GPU waits for is the
host work between a synchronisation and the next GPU-heavy launch:

* `next(data_iterator).to("cuda")`: a pageable host-to-device copy per tensor (8 keys in training, 6 in a log-prob
  pass), each synchronous: the first waits for the previous micro-batch's backward, the rest and everything up to the
  model's first kernel are exposed: `_pack_sequences_for_megatron` reads each sequence's length with `.item()` on the
  CUDA tensor (twice with a pad factor > 1 or a pipeline's fixed pack length), plus `max().item()`.
* training: the loss Megatron's schedule calls on the model's output. Its first `.item()` waits for the forward; then
  `SequencePackingLossWrapper` runs per sequence two `.item()`, six 0-d CUDA tensors used as slice bounds of the data
  keys and one of the logits (each a sync), and `ClippedPGLossFn` nine more (`.item()` on seven metrics, the
  `mult_prob_error`, and `if kl`): 18 a sequence. Only the segment between its first and second `.item()` (the fp32
  cast, `DistributedLogprob`, KL, ratios, clipping, masked means) runs beside GPU work (the logits' kernels, priced
  in rl.logprob_block_extra); the rest is exposed. The backward is issued by the autograd engine while the GPU runs
  the logits' and the model's backward (not counted).
* log-prob: `collection_fn` -> `from_parallel_logits_to_logprobs_packed_sequences`: its first `.item()` waits for
  the forward; the roll loop before `DistributedLogprob` and the unpack loop after it (two `.item()` a sequence each)
  are exposed, `DistributedLogprob` itself runs beside its kernels; then the next micro-batch's slice and copies.

On the GPU every exposed device op (a kernel, a host-to-device copy, the device-to-host copy of each sync) also pays
its launch, which the CPU timing lacks: gpuplan's eager per-op host cost less its CPU share (host_issue.py:
18.33 - 14.8 us on the reference host). The wait of each sync for an idle GPU's reply is not counted. The driver's and
the worker's ops were counted by the bench's TorchDispatchMode (aten ops that launch a kernel, scripts/
count_train_kernels.py's rule; syncs as `aten._local_scalar_dense`; the CPU-only `one_hot` range checks of the
backward left out: CUDA skips them).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """Exposed host work of one part of a micro-batch: CPU seconds on the reference host and device ops issued (each
    paying a launch on the GPU), per packed sequence and per micro-batch."""
    cpu_seq_s: float
    cpu_mb_s: float
    ops_seq: float
    ops_mb: float


# training micro-batch (bench: --seqs 1,8, tokens 32, vocab 32; pad factor 1 / tp 4 with a fixed pack length)
TRAIN_TO = Part(0.0, 6.3e-6, 0.0, 8.0)                  # 8 keys of GRPO's train_data, .to("cuda") each
TRAIN_PACK = Part(5.6e-6, 26.9e-6, 1.0, 5.0)            # 4 kernels, syncs 1 a sequence + max().item()
TRAIN_PACK_PADDED = Part(10.8e-6, 44.7e-6, 2.0, 7.0)    # pad factor > 1 or pipeline: 6 kernels, 2 syncs a sequence + 1
TRAIN_LOSS = Part(131.7e-6, 26.4e-6, 35.0, 2.0)         # outside the logits' segment: 17 kernels + 18 syncs a sequence
# log-prob micro-batch
LOGPROB_FETCH = Part(0.8e-6, 15.9e-6, 0.0, 0.0)         # next(iterator): BatchedDataDict.slice (exposed: queue empty)
LOGPROB_TO = Part(0.0, 5.7e-6, 0.0, 6.0)                # 6 keys
LOGPROB_PACK = Part(8.1e-6, 42.5e-6, 1.0, 6.0)          # input_ids.clone() + pack: 5 kernels, 1 sync a sequence + 1
LOGPROB_PACK_PADDED = Part(12.4e-6, 65.3e-6, 2.0, 8.0)
LOGPROB_COLLECT = Part(19.4e-6, 31.8e-6, 7.0, 2.0)      # roll and unpack loops: 3 kernels + 4 syncs a sequence;
#                                                         the zero prepend and torch.tensor(0.0)'s copy a micro-batch

# the driver at the v0.3 blog's shape (bench --driver 2048,4096,8,4096,16384,512; the lowest of five runs of 3-8
# repetitions: the copies are memory-bound, and runs while other jobs loaded the machine took up to 2.2x longer)
DRIVER_SEQS, DRIVER_WIDTH = 2048, 4096
DRIVER_TRAIN_S = 0.245            # shard_by_batch_size(dp, batch_size=gbs, sequence_packing_args), 8 keys
DRIVER_LOGPROB_S = 0.198 + 0.014  # shard_by_batch_size(dp, None, ...) on 6 keys + from_batches and reorder_data


# NeMo RL at 06beed91 (the v0.4 table's code; bench --version 0.4 on `git archive 06beed91 nemo_rl`): the same worker
# path; ClippedPGLossFn adds gen_kl_error, policy_kl_error and js_divergence_error before the logits (three more
# `.item()`: 21 syncs a sequence with the wrapper's) and k3 KL with clamps; no `one_hot` in DistributedLogprob's backward
TRAIN_TO_04 = Part(0.0, 6.4e-6, 0.0, 8.0)
TRAIN_PACK_04 = Part(5.9e-6, 26.7e-6, 1.0, 5.0)
TRAIN_PACK_PADDED_04 = Part(11.9e-6, 42.7e-6, 2.0, 7.0)
TRAIN_LOSS_04 = Part(218.4e-6, 15.2e-6, 56.0 + 21.0, 2.0)   # outside the logits' segment: 56 kernels + 21 syncs
LOGPROB_FETCH_04 = Part(0.7e-6, 16.7e-6, 0.0, 0.0)
LOGPROB_TO_04 = Part(0.0, 5.7e-6, 0.0, 6.0)
LOGPROB_PACK_04 = Part(9.5e-6, 41.3e-6, 1.0, 6.0)
LOGPROB_PACK_PADDED_04 = Part(17.3e-6, 57.1e-6, 2.0, 8.0)
LOGPROB_COLLECT_04 = Part(20.4e-6, 30.7e-6, 7.0, 2.0)
DRIVER_TRAIN_S_04 = 0.235      # the same shape and runs
DRIVER_LOGPROB_S_04 = 0.191 + 0.015


@dataclass(frozen=True)
class Loop:
    train: tuple[Part, Part, Part, Part]      # copies, pack, padded pack, loss
    logprob: tuple[Part, Part, Part, Part, Part]   # slice, copies, pack, padded pack, collection
    driver_train_s: float
    driver_logprob_s: float


LOOPS = {
    "nemo-rl-0.3": Loop((TRAIN_TO, TRAIN_PACK, TRAIN_PACK_PADDED, TRAIN_LOSS),
                        (LOGPROB_FETCH, LOGPROB_TO, LOGPROB_PACK, LOGPROB_PACK_PADDED, LOGPROB_COLLECT),
                        DRIVER_TRAIN_S, DRIVER_LOGPROB_S),
    "nemo-rl-0.4": Loop((TRAIN_TO_04, TRAIN_PACK_04, TRAIN_PACK_PADDED_04, TRAIN_LOSS_04),
                        (LOGPROB_FETCH_04, LOGPROB_TO_04, LOGPROB_PACK_04, LOGPROB_PACK_PADDED_04, LOGPROB_COLLECT_04),
                        DRIVER_TRAIN_S_04, DRIVER_LOGPROB_S_04),
}


def _part_s(p: Part, seqs: float, speed: float, launch_s: float) -> float:
    return (p.cpu_seq_s * seqs + p.cpu_mb_s) / speed + (p.ops_seq * seqs + p.ops_mb) * launch_s


def train_micro_batch_s(seqs: float, padded_pack: bool, speed: float, launch_s: float,
                        loop: str = "nemo-rl-0.3") -> float:
    """Exposed host seconds of one packed training micro-batch of `seqs` sequences (Megatron worker)."""
    to, pack, padded, loss = LOOPS[loop].train
    return sum(_part_s(p, seqs, speed, launch_s) for p in (to, padded if padded_pack else pack, loss))


def logprob_micro_batch_s(seqs: float, padded_pack: bool, speed: float, launch_s: float,
                          loop: str = "nemo-rl-0.3") -> float:
    """Exposed host seconds of one packed log-prob micro-batch of `seqs` sequences (Megatron worker)."""
    fetch, to, pack, padded, collect = LOOPS[loop].logprob
    return sum(_part_s(p, seqs, speed, launch_s) for p in (fetch, to, padded if padded_pack else pack, collect))


def driver_s(kind: str, sequences: float, width: float, speed: float, loop: str = "nemo-rl-0.3") -> float:
    """The driver's host seconds for one pass ('train' or 'logprob') over `sequences` sequences of a batch `width`
    tokens wide, scaled from the timed shape by sequences x width."""
    lp = LOOPS[loop]
    base = lp.driver_train_s if kind == "train" else lp.driver_logprob_s
    return base * (sequences * width) / (DRIVER_SEQS * DRIVER_WIDTH) / speed

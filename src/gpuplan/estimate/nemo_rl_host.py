"""Host time NeMo RL v0.3.0's own Python adds to its training and log-prob passes (rl.host_loop 'nemo-rl-0.3';
docs/posttrain.md, *NeMo RL's host work around the passes, timed in its code*).

Read in NVIDIA-NeMo/RL at v0.3.0 (b1c86a8, the code of the v0.3 blog's runs) and timed on this project's development
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
train_mb_tokens 4,096, logprob_mb_tokens 16,384: 539 ms (train, 8 keys), 368 ms (a log-prob pass's shard, 6 keys) +
30 ms (its gather). A profile of the train shard puts two thirds in the copies (`pad_sequence` 0.34 s,
`select_indices` 0.16 s of 0.76 s, the first touch of freshly allocated pages included) and the rest in the packer and
per-bin Python, so the time is scaled by sequences x width from that shape. Ray's hand-off of the shards to the
workers is not timed.

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
19.25 - 14.8 us on the reference host). The wait of each sync for an idle GPU's reply is not counted. The driver's and
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

# the driver at the v0.3 blog's shape (bench --driver 2048,4096,8,4096,16384,512 and dp 4; best of 3-5)
DRIVER_SEQS, DRIVER_WIDTH = 2048, 4096
DRIVER_TRAIN_S = 0.539          # shard_by_batch_size(dp, batch_size=gbs, sequence_packing_args), 8 keys
DRIVER_LOGPROB_S = 0.368 + 0.030  # shard_by_batch_size(dp, None, ...) on 6 keys + from_batches and reorder_data


def _part_s(p: Part, seqs: float, speed: float, launch_s: float) -> float:
    return (p.cpu_seq_s * seqs + p.cpu_mb_s) / speed + (p.ops_seq * seqs + p.ops_mb) * launch_s


def train_micro_batch_s(seqs: float, padded_pack: bool, speed: float, launch_s: float) -> float:
    """Exposed host seconds of one packed training micro-batch of `seqs` sequences (Megatron worker)."""
    pack = TRAIN_PACK_PADDED if padded_pack else TRAIN_PACK
    return sum(_part_s(p, seqs, speed, launch_s) for p in (TRAIN_TO, pack, TRAIN_LOSS))


def logprob_micro_batch_s(seqs: float, padded_pack: bool, speed: float, launch_s: float) -> float:
    """Exposed host seconds of one packed log-prob micro-batch of `seqs` sequences (Megatron worker)."""
    pack = LOGPROB_PACK_PADDED if padded_pack else LOGPROB_PACK
    return sum(_part_s(p, seqs, speed, launch_s) for p in (LOGPROB_FETCH, LOGPROB_TO, pack, LOGPROB_COLLECT))


def driver_s(kind: str, sequences: float, width: float, speed: float) -> float:
    """The driver's host seconds for one pass ('train' or 'logprob') over `sequences` sequences of a batch `width`
    tokens wide, scaled from the timed shape by sequences x width."""
    base = DRIVER_TRAIN_S if kind == "train" else DRIVER_LOGPROB_S
    return base * (sequences * width) / (DRIVER_SEQS * DRIVER_WIDTH) / speed

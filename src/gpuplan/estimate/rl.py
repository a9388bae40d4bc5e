"""One RL step (GRPO, PPO, RLOO; issue 20): rollout generation by a serving engine, the log-prob
passes of the actor and the reference, the reward, the critic (PPO), the actor's training pass and
the weight sync from trainer to rollout engine — per-phase time and memory, and which phase bounds
the step. docs/posttrain.md has the equations and sources.

The phases reuse the existing engines, so they agree with `gpuplan serve` and `gpuplan train`:
- rollout: an inference scenario (engine, rollout_tp, gpu_memory_utilization; prompts x group
  sequences spread over the rollout replicas) through the memory engine (weights, KV pool, CUDA graphs,
  profile run); the slowest replica's responses (response_lengths) served by the engine's scheduler as
  simulated in estimate/load on the serving speed engine's step cost (`speed._Serving`);
- training: the SFT step of the generated batch (prompt + max_new_tokens per sequence,
  prompts x group sequences per optimizer step) on the training GPUs;
- log-prob passes: forward-only passes of the training engine (speed.forward_only_time) in the log-prob
  micro-batches; the reward model: a no-grad forward at the training step's efficiency
  (posttrain.forward_seconds_per_token);
- weight sync: the 16-bit weights gathered from the trainer's shards into the engine (colocated: every GPU
  assembles the whole model, NeMo RL gather_params) or sent to the rollout GPUs (split: over the link between them).

Placement. Colocated (verl's hybrid engine, TRL `vllm_mode="colocate"`): every GPU holds the trainer
and a rollout engine; the engine frees its KV cache (verl rollout `free_cache_engine: true`,
verl/trainer/config/rollout/rollout.yaml @b178a3c) or sleeps (TRL `llm.sleep(level=2)`,
trl/generation/vllm_generation.py L370 @v1.9.0: weights and KV cache released) while the trainer runs,
and the trainer's states stay resident while the engine generates. The phases run one after the
other. Split (OpenRLHF / verl disaggregated): `rollout_gpus` generate while the others train; with
`async_steps` >= 1 the rollout of step k+1 overlaps the training of step k (off-policy by k), so the
step lasts as long as the slower side plus the weight sync; with 0 the two sides take turns.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from ..models.spec import ModelSpec
from ..scenario import Scenario, scenario_from_dict, truncated_responses
from .layout import stages
from .results import MemoryEstimate, PerformanceEstimate

VERL_REF = "verl @b178a3c"
TRL_REF = "TRL v1.9.0 (a785283)"
RL_MEMORY_UNVALIDATED = (
    "RL memory is built from the trainers' and the rollout engine's code and checked against a fake-tensor trace of a "
    "GRPO training pass (docs/posttrain.md); its error bar rests on only two published peaks, both of one source "
    "(verl GRPO and PPO of a 0.5B model on 8 A100s, validation/gathered/posttrain-memory.csv): read it as a lower "
    "bound")


# ---- the derived scenarios ------------------------------------------------------------------------------
def sequences_per_step(scn: Scenario) -> int:
    """Responses generated and trained on per RL step: prompts x group size."""
    rl = scn.train.rl
    return rl.prompts_per_step * rl.group_size


def gpu_groups(scn: Scenario) -> tuple[int, int]:
    """(rollout GPUs, training GPUs)."""
    rl, n = scn.train.rl, scn.hardware.count
    if rl.placement == "split":
        return rl.rollout_gpus, n - rl.rollout_gpus
    return n, n


def response_len(scn: Scenario) -> int:
    rl = scn.train.rl
    return rl.mean_response_len or rl.max_new_tokens


def optimizer_batch(scn: Scenario) -> int:
    """Sequences per optimizer step of the training pass: rl.mini_batch, or the whole step's sequences."""
    return min(scn.train.rl.mini_batch or sequences_per_step(scn), sequences_per_step(scn))


def optimizer_steps(scn: Scenario) -> int:
    """Optimizer steps per RL step: the step's sequences in mini-batches (NeMo RL: 2,048 / 512 = 4), each
    one a full training step with its own pipeline fill and drain, gradient sync and optimizer update."""
    return math.ceil(sequences_per_step(scn) / optimizer_batch(scn))


def training_scenario(scn: Scenario) -> Scenario:
    """The actor's update as an SFT step: every generated sequence padded to prompt + max_new_tokens,
    all prompts x group sequences in one optimizer step, on the training GPUs."""
    rl = scn.train.rl
    data = scn.model_dump()
    _, train_gpus = gpu_groups(scn)
    data["hardware"]["count"] = train_gpus
    data["parallel"]["dp"] = None
    data["task"] = "finetune" if scn.task == "finetune" else scn.task
    t = data["train"]
    t.update(objective="sft", rl=None, reference=None, teacher=None, seq_len=rl.prompt_len + rl.max_new_tokens,
             global_batch=optimizer_batch(scn), allow_longer_context=True, tokens=None)
    data["constraints"] = None
    return scenario_from_dict(data, "(RL training pass)")


def packed_training_scenario(scn: Scenario) -> Scenario:
    """The training pass as its compute runs when the sequences are packed (rl.packing, packing_plan) or
    dynamically batched (rl.dynamic_batching, dynamic_plan) into micro-batches of the padded micro-batch's
    tokens, micro_batch x (prompt_len + max_new_tokens) (NeMo RL `train_mb_tokens =
    max_total_sequence_length x train_micro_batch_size`, examples/configs/grpo_math_1B.yaml @00294d9b). Memory
    keeps the padded scenario: a full micro-batch holds the padded micro-batch's tokens."""
    return _packed(scn, training_scenario(scn), "(RL training pass, packed)")


def _packed(scn: Scenario, padded: Scenario, label: str) -> Scenario:
    """`padded` (sequences of prompt_len + max_new_tokens, micro_batch of them) with its sequences packed as
    NeMo RL packs them (packing_plan): the slowest data-parallel rank's micro-batches, as a scenario of
    equal micro-batches. The budget of a pack is the padded micro-batch's tokens (NeMo RL
    `train_mb_tokens` / `logprob_mb_tokens` = max_total_sequence_length x the micro-batch)."""
    pa = padded.parallel
    dp = max(1, padded.hardware.count // (pa.tp * pa.pp * pa.cp))
    budget = padded.train.micro_batch * padded.train.seq_len
    plan = (dynamic_plan(scn, budget, dp, padded.train.global_batch) if scn.train.rl.dynamic_batching
            else packing_plan(scn, budget, dp, padded.train.global_batch, pa.tp, pa.cp, pa.pp > 1))
    # the slowest rank's packs as `bins` micro-batches of `per_pack` sequences of seq_len tokens: the attention
    # runs at about the packed sequences' length (cu_seqlens), the linear layers on all the pack's tokens
    per_pack = max(1, round(plan["sequences"] / plan["bins"]))
    seq_len = max(1, round(plan["tokens"] / (plan["bins"] * per_pack)))
    data = padded.model_dump()
    data["train"].update(seq_len=seq_len, micro_batch=per_pack, global_batch=plan["bins"] * per_pack * dp)
    return scenario_from_dict(data, label)


def _mffd(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins (lists of indices into `lengths`) of Johnson & Garey's modified first-fit-decreasing, the packer
    NeMo RL's configs name (`sequence_packing.algorithm: modified_first_fit_decreasing`, grpo_math_1B.yaml
    @06beed91; nemo_rl/data/packing/algorithms.py ModifiedFirstFitDecreasingPacker, same steps at v0.3.0).
    Sizes are large (> C/2), medium (> C/3), small (> C/6) or tiny. Every large item opens a bin (longest
    first); each such bin takes the longest medium item that fits; walking those bins from the last, a bin
    without a medium item takes the shortest small item and the longest small one that fits beside it; each
    of them then takes, while any fits, the longest remaining item that fits; first-fit-decreasing packs the
    rest into new bins."""
    size = lambda i: lengths[i]
    up = sorted(range(len(lengths)), key=size)                  # stable: equal lengths keep their order
    down = sorted(range(len(lengths)), key=size, reverse=True)
    large = [i for i in down if lengths[i] > capacity / 2]
    medium = [i for i in down if capacity / 3 < lengths[i] <= capacity / 2]
    small = [i for i in up if capacity / 6 < lengths[i] <= capacity / 3]
    tiny = [i for i in up if lengths[i] <= capacity / 6]
    bins = [[i] for i in large]
    room = [capacity - lengths[i] for i in large]               # kept with the bins: each step reads it
    for k, b in enumerate(bins):
        fit = next((m for m in medium if lengths[m] <= room[k]), None)
        if fit is not None:
            medium.remove(fit)
            b.append(fit)
            room[k] -= lengths[fit]
    for k in reversed(range(len(bins))):
        b = bins[k]
        if any(capacity / 3 < lengths[j] <= capacity / 2 for j in b) or len(small) < 2:
            continue
        if lengths[small[0]] + lengths[small[1]] > room[k]:
            continue
        first = small.pop(0)
        second = next(s for s in reversed(small) if lengths[s] <= room[k] - lengths[first])
        small.remove(second)
        b += [first, second]
        room[k] -= lengths[first] + lengths[second]
    rest = sorted(medium + small + tiny, key=size, reverse=True)
    for k, b in enumerate(bins):
        while rest and lengths[rest[-1]] <= room[k]:
            pick = next(r for r in rest if lengths[r] <= room[k])
            rest.remove(pick)
            b.append(pick)
            room[k] -= lengths[pick]
    tail: list[list[int]] = []
    tail_room: list[int] = []
    for i in rest:                              # already longest first
        k = next((k for k, r in enumerate(tail_room) if lengths[i] <= r), None)
        if k is None:
            tail.append([i])
            tail_room.append(capacity - lengths[i])
        else:
            tail[k].append(i)
            tail_room[k] -= lengths[i]
    return bins + tail


def _even_bins(bins: list[list[int]], ranks: int) -> list[list[int]]:
    """NeMo RL @06beed91 makes the bin count a multiple of the data-parallel ranks (at least one each): for
    every bin it lacks, the last sequence of the bin holding the most sequences (ties: the later bin) moves
    into a bin of its own (`SequencePacker._adjust_bin_count`, min_bin_count = bin_count_multiple = shards,
    batched_data_dict.py `shard_by_batch_size`). v0.3.0 did not; its ranks ran ceil(bins / ranks) or one fewer,
    the same count on the slowest rank."""
    need = -(-max(len(bins), ranks) // ranks) * ranks - len(bins)
    if not need:
        return bins
    out = [list(b) for b in bins]
    donors = [i for _, i in sorted(((len(b), i) for i, b in enumerate(out)), reverse=True)]
    d = 0
    for _ in range(need):
        while d < len(donors) and len(out[donors[d]]) < 2:
            d += 1
        if d == len(donors):
            break                               # fewer sequences than bins: NeMo RL refuses; keep what there is
        out.append([out[donors[d]].pop()])
    return out


def packing_plan(scn: Scenario, budget: int, dp: int, chunk: int, tp: int = 1, cp: int = 1,
                 pipeline: bool = False) -> dict[str, float]:
    """The slowest data-parallel rank's share of a packed pass over the step's sequences, as NeMo RL's
    `shard_by_batch_size(..., sequence_packing_args)` deals it (batched_data_dict.py @06beed91, v0.3.0):
    the sequences (prompt_len + the response_lengths of the step, each padded to a multiple of tp, or of
    2 x cp x tp with context parallelism: `sequence_length_pad_multiple`, lm_policy.py) are cut into chunks
    of `chunk` sequences (one per optimizer step; the log-prob passes take the whole step as one), each chunk
    packed into bins of `budget` tokens (_mffd, _even_bins) and its bins dealt to the ranks in turn
    (`shard_idx = bin_idx % shards`). Every chunk ends in a collective (the gradient all-reduce, the
    gathered log-probs), so it lasts as long as its slowest rank: the one with the most tokens, or under
    pipeline parallelism, where each of a rank's packs is padded to its longest (`pad_full_seq_to =
    max(micro_batch_lengths)`, megatron_policy_worker.py `train` / `get_logprobs`), the most bins x longest
    bin. The step's response lengths are dealt to the chunks in turn from the shortest (each chunk a
    sample of the whole distribution: the order of a real batch, prompt after prompt, is not known).
    Returns the mean over chunks of the slowest rank's bins, tokens computed and sequences."""
    rl = scn.train.rl
    pad = 2 * cp * tp if cp > 1 else tp
    n = sequences_per_step(scn)
    lengths = [-(-(rl.prompt_len + r) // pad) * pad
               for r in step_response_lengths(scn)]
    return slowest_rank(lengths, budget, dp, max(1, n // max(1, chunk)), pipeline)


def slowest_rank(lengths: Sequence[int], budget: int, dp: int, chunks: int = 1,
                 pipeline: bool = False) -> dict[str, float]:
    """packing_plan on given sequence lengths (ascending): dealt to `chunks` chunks in turn, each packed
    (_mffd, _even_bins) into bins of `budget` tokens dealt to `dp` ranks in turn; the mean over chunks of the
    slowest rank's bins, tokens computed (pipeline: bins x its longest bin) and sequences."""
    budget = max(budget, max(lengths))          # NeMo RL refuses a sequence past the budget; it never is
    bins_sum = tokens_sum = seqs_sum = 0.0
    for c in range(chunks):
        ls = list(lengths[c::chunks])
        bins = _even_bins(_mffd(ls, budget), dp)
        worst = (-1.0, 0, 0)
        for r in range(dp):
            mine = bins[r::dp]
            toks = [sum(ls[i] for i in b) for b in mine]
            cost = len(mine) * max(toks, default=0) if pipeline else float(sum(toks))
            if cost > worst[0]:
                worst = (cost, len(mine), sum(len(b) for b in mine))
        bins_sum += worst[1]
        tokens_sum += worst[0]
        seqs_sum += worst[2]
    return {"bins": max(1, round(bins_sum / chunks)), "tokens": tokens_sum / chunks,
            "sequences": max(1.0, seqs_sum / chunks)}


def dynamic_plan(scn: Scenario, budget: int, dp: int, chunk: int, round_to: int = 64) -> dict[str, float]:
    """A rank's share of a dynamically batched pass (rl.dynamic_batching), as NeMo RL's
    `shard_by_batch_size(..., dynamic_batching_args)` makes it (batched_data_dict.py v0.3.0, same at @06beed91):
    each chunk of `chunk` sequences (one per optimizer step; the log-prob passes: the whole step) is sorted by
    length and strided over the ranks (rank r holds the r-th, (r + dp)-th, ... shortest); micro-batches are cut
    on the ranks' common positions, the same on every rank: position i joins the open micro-batch while (its
    size + 1) x the longest sequence at any rank's position so far, rounded up to `round_to`
    (`sequence_length_round`, 64 in the configs) but not past the batch's width, stays within `budget`
    (`train_mb_tokens` / `logprob_mb_tokens`); each micro-batch is computed padded to that length. Response
    lengths are dealt to the chunks as in packing_plan. Returns the mean over chunks of the micro-batches,
    tokens computed (padding included) and sequences of one rank."""
    rl = scn.train.rl
    n = sequences_per_step(scn)
    lengths = [rl.prompt_len + r for r in step_response_lengths(scn)]
    width = max(lengths)
    chunks = max(1, n // max(1, chunk))
    mbs_sum = tokens_sum = seqs_sum = 0.0
    for c in range(chunks):
        ls = lengths[c::chunks]
        mbs = _dynamic_micro_batches(ls, budget, dp, width, round_to)
        mbs_sum += len(mbs)
        tokens_sum += sum(k * length for k, length in mbs)
        seqs_sum += -(-len(ls) // dp)
    return {"bins": max(1, round(mbs_sum / chunks)), "tokens": tokens_sum / chunks,
            "sequences": max(1.0, seqs_sum / chunks)}


def _dynamic_micro_batches(lengths: Sequence[int], budget: int, dp: int, width: int,
                           round_to: int = 64) -> list[list[int]]:
    """One chunk's micro-batches under dynamic batching (dynamic_plan), the same on every rank: [sequences,
    padded length] each."""
    ls = sorted(lengths)
    mbs: list[list[int]] = []
    for i in range(-(-len(ls) // dp)):
        longest = min(width, -(-max(ls[i * dp:(i + 1) * dp]) // round_to) * round_to)
        if mbs and (mbs[-1][0] + 1) * max(mbs[-1][1], longest) <= max(budget, longest):
            mbs[-1][0] += 1
            mbs[-1][1] = max(mbs[-1][1], longest)
        else:
            mbs.append([1, longest])
    return mbs


def logprob_scenario(scn: Scenario) -> Scenario:
    """The no-grad log-prob passes (old policy, reference, critic values) as the training engine's scenario:
    every sequence of the step in one pass, in micro-batches of rl.logprob_micro_batch sequences (NeMo RL
    `logprob_batch_size`; with packing `logprob_mb_tokens = max_total_sequence_length x logprob_batch_size`,
    examples/configs/grpo_math_1B.yaml @00294d9b), packed (or dynamically batched) like the training pass."""
    rl = scn.train.rl
    train = training_scenario(scn)
    data = train.model_dump()
    data["train"].update(global_batch=sequences_per_step(scn),
                         micro_batch=rl.logprob_micro_batch or train.train.micro_batch)
    padded = scenario_from_dict(data, "(RL log-prob pass)")
    return _packed(scn, padded, "(RL log-prob pass, packed)") if rl.packing or rl.dynamic_batching else padded


def rollout_scenario(scn: Scenario, capacity: int | None = None) -> Scenario:
    """One rollout engine replica (rollout_tp GPUs) serving its share of the step's sequences. With the GPU's
    usable `capacity`, vLLM's running cap and tokens per step are the offline LLM class's defaults
    (LLM_CLASS_BATCH), which the memory engine's profile run and the scheduler then use; verl's V0 engine
    (rl.engine_vllm_v0) gets vLLM 0.6.3's 256 and verl's 8192 (VERL_V0_BATCH), on any GPU."""
    rl = scn.train.rl
    rollout_gpus, _ = gpu_groups(scn)
    replicas = rollout_gpus // rl.rollout_tp
    per_replica = math.ceil(sequences_per_step(scn) / replicas)
    weights = "fp16" if scn.train.precision == "fp16" else "bf16"
    data = {"model": scn.model, "task": "infer",
            "hardware": {"gpu": scn.hardware.gpu, "count": rl.rollout_tp,
                         "gpus_per_node": scn.hardware.gpus_per_node, "network": scn.hardware.network},
            "parallel": {"tp": rl.rollout_tp},
            "infer": {"engine": rl.engine, "weights": weights, "kv_cache": weights, "prompt_len": rl.prompt_len,
                      "output_len": rl.max_new_tokens, "concurrency": per_replica,
                      "gpu_memory_utilization": rl.gpu_memory_utilization, "allow_longer_context": True,
                      "async_scheduling": rl.engine_async_scheduling, "cuda_graphs": rl.engine_cuda_graphs,
                      # the rollout samples (temperature 1.0) and asks for the sampled tokens' log-probs: NeMo RL
                      # `_build_sampling_params` passes SamplingParams(..., logprobs=0) (nemo_rl/models/generation/
                      # vllm.py @00bc8c3d39d6d934d6008063832f0cf81a7f4d03)
                      "sampling": "random", "logprobs": True,
                      # vLLM V0 (rl.engine_vllm_v0): verl hands SamplingParams(n=rollout.n) to the V0 LLMEngine, one
                      # sequence group per prompt (vllm_rollout.py L120-136 @44a65f9:
                      # rollout.n among the config keys copied into SamplingParams; logprobs=0, detokenize=False)
                      **({"vllm_v0": True, "parallel_samples": rl.group_size} if rl.engine_vllm_v0 else {}),
                      **({"python_version": rl.engine_python} if rl.engine_vllm_v0 and rl.engine_python else {})},
            "cost": scn.cost.model_dump()}
    if rl.engine == "vllm" and rl.engine_vllm_v0:
        data["infer"]["max_num_seqs"], data["infer"]["max_num_batched_tokens"] = VERL_V0_BATCH
    elif capacity is not None and rl.engine == "vllm":
        from .memory import vllm_large_gpu
        data["infer"]["max_num_seqs"], data["infer"]["max_num_batched_tokens"] = LLM_CLASS_BATCH[
            "big" if vllm_large_gpu(scn, capacity) else "small"]
    if scn.overhead_bytes is not None:
        data["overhead_bytes"] = scn.overhead_bytes
    return scenario_from_dict(data, "(RL rollout engine)")


def _frozen_models(scn: Scenario, model: ModelSpec, train: Scenario) -> dict[str, ModelSpec]:
    """The frozen models the step holds: reference (a copy under full fine-tuning; under LoRA the base
    with adapters disabled, TRL grpo_trainer.py L955-961) and the reward model."""
    rl, out = scn.train.rl, {}
    if rl.reference and scn.train.method == "full" and not rl.reference_on_host:
        out["reference"] = model
    if rl.reward_model:
        out["reward_model"] = reward_model_spec(scn)
    return out


def reward_model_spec(scn: Scenario) -> ModelSpec:
    from ..errors import InputError
    from ..models import get_model
    try:
        return get_model(scn.train.rl.reward_model)
    except InputError as err:
        raise err.about(f"train.rl.reward_model: {err.what}") from None


def _critic(scn: Scenario) -> bool:
    rl = scn.train.rl
    return rl.critic if rl.critic is not None else scn.train.objective == "ppo"


# ---- memory -----------------------------------------------------------------------------------------------
# How vLLM turns gpu_memory_utilization into its KV pool, by release (docs/posttrain.md, "How vLLM sizes its KV cache
# beside a trainer, by release"; each release read from its PyPI sdist, the tag's code):
# - "own": pool = utilization x total - the engine's own use (weights, profile peak, its non-torch growth) since its
#   start-up snapshot. V0 0.6.3 `Worker.determine_num_available_blocks` (peak = init free - free after the profile;
#   vllm/worker/worker.py L228-245); V0 0.7.3-0.8.5 and V1 from 0.9.1 `memory_profiling` (non_kv_cache_memory =
#   weights + torch_peak_increase + non_torch_increase since the baseline; 0.8.3 vllm/utils.py L2082-2155,
#   vllm/worker/worker.py L226-236; 0.9.1 vllm/v1/worker/gpu_worker.py L135-145, L218). gpuplan's serving rule.
# - "whole_gpu": pool = utilization x total - (torch's whole-process allocation peak + every non-torch byte on the
#   device). V1 0.7.0-0.9.0 `Worker.determine_available_memory` (0.8.3 vllm/v1/worker/gpu_worker.py L151-186; 0.9.0
#   L167-212): the trainer's tensors in the same process and any other tenant's memory count against the share.
# - "free": pool = utilization x the memory free after the profile run. verl's own V0 worker for vLLM <= 0.6.3
#   (verl@44a65f9 verl/third_party/vllm/vllm_v_0_6_3/worker.py L196-210, "NOTE(sgm) [VERL] use the remaining memory").
WHOLE_GPU_V1 = ((0, 7, 0), (0, 9, 1))       # V1 releases with the whole-GPU rule: [0.7.0, 0.9.1)
VERL_V0_WRAPPER_LAST = (0, 6, 3)            # verl's third_party/vllm wrappers: 0.3.1, 0.4.2, 0.5.4, 0.6.3
STARTUP_CHECK_V1 = (0, 9, 1)                # V1 init_device: free < utilization x total raises ValueError


def rollout_kv_rule(scn: Scenario) -> str:
    """"own", "whole_gpu" or "free": how the rollout engine's release sizes its KV pool (the table above)."""
    from ..versions import parse_version
    rl = scn.train.rl
    if rl.engine != "vllm" or rl.engine_release is None:
        return "own"
    v = parse_version(rl.engine_release, "train.rl.engine_release", full=True)
    if rl.engine_vllm_v0:
        return "free" if v <= VERL_V0_WRAPPER_LAST else "own"
    return "whole_gpu" if WHOLE_GPU_V1[0] <= v < WHOLE_GPU_V1[1] else "own"


def engine_start_resident(scn: Scenario, model: ModelSpec) -> float:
    """Bytes per GPU the trainer holds when a colocated rollout engine profiles its memory: none under split
    placement or when the engine starts first (rl.engine_started before_trainer); otherwise the trainer's built
    models: the policy's weights (its sharded master copy), the frozen reference and reward model and a critic's
    weights, on the fullest pipeline stage. Optimizer states and gradients do not exist yet: torch.optim creates a
    parameter's Adam state at its first step() and FSDP its gradients at the first backward. With
    offload_train_states the policy's and critic's weights are on the host (verl offloads them right after building
    them, before _build_rollout: fsdp_workers.py init_model @44a65f9)."""
    from .memory import _train_components
    from .posttrain import frozen_model_bytes
    rl = scn.train.rl
    if rl.placement != "colocated" or rl.engine_started == "before_trainer":
        return 0.0
    train = training_scenario(scn)
    frozen = _frozen_models(scn, model, train)
    best = 0.0
    for stage in stages(train.parallel.pp):
        held = sum(frozen_model_bytes(train, m, stage) for m in frozen.values())
        own = 0.0
        if not rl.offload_train_states:
            phases, _ = _train_components(train, model, stage)
            own = phases["optimizer_step"].get("weights", 0.0) * (2 if _critic(scn) else 1)
        best = max(best, held + own)
    return best


def _start_context(scn: Scenario) -> float:
    """Non-torch memory of the engine's process besides its library workspaces: the CUDA context and NCCL buffers
    (memory.Overhead) of the trainer's communicators when the engine starts in the trainer's process after it (verl),
    else of the engine's own tensor-parallel group."""
    from .memory import Overhead
    if scn.overhead_bytes is not None:
        return float(scn.overhead_bytes)
    rl, o = scn.train.rl, Overhead()
    inside = rl.placement == "colocated" and rl.engine_started == "after_trainer"
    return float(o.bytes(0, max(scn.hardware.count if inside else 1, rl.rollout_tp)) - o.workspaces)


def _release_pool(scn: Scenario, model: ModelSpec, capacity: int, mem: MemoryEstimate) -> MemoryEstimate:
    """The engine's memory estimate with its KV pool sized by its release's rule (rollout_kv_rule). The memory engine
    gives the "own" pool, utilization x total - own (own: weights + profile peak + workspaces); the other rules
    subtract what else is on the GPU when the engine profiles: the trainer's resident models
    (engine_start_resident) and the process's CUDA context and NCCL buffers, which the "own" rule's start-up
    snapshot already holds (gpuplan puts them in the 1 - utilization the engine leaves)."""
    from .memory import vllm_requested_bytes, DRIVER_RESERVE_BYTES
    rule = rollout_kv_rule(scn)
    pool_own = mem.limits.get("kv_pool_bytes")
    if rule == "own" or not pool_own:
        return mem
    inf = rollout_scenario(scn, capacity).infer
    requested = vllm_requested_bytes(inf, capacity)
    own = requested - pool_own
    others = engine_start_resident(scn, model) + _start_context(scn)
    if rule == "whole_gpu":
        pool = requested - own - others
    else:    # "free": utilization x (total - everything after the profile run)
        pool = scn.train.rl.gpu_memory_utilization * (capacity - DRIVER_RESERVE_BYTES - own - others)
    pool = max(0.0, pool)
    scale = pool / pool_own
    limits = dict(mem.limits, kv_pool_bytes=int(pool), reserved_bytes=int(own + pool))
    for key in ("kv_tokens", "max_concurrency"):
        if limits.get(key) is not None:
            limits[key] = int(limits[key] * scale)
    note = (f"vLLM {scn.train.rl.engine_release} sizes its KV pool by the '{rule}' rule: {pool / 2**30:.2f} GiB "
            f"(its own use alone would leave {pool_own / 2**30:.2f} GiB; docs/posttrain.md)")
    return dataclasses.replace(mem, limits=limits, notes=tuple(mem.notes) + (note,))


def rollout_engine_memory(scn: Scenario, model: ModelSpec, capacity: int) -> MemoryEstimate:
    """The rollout engine's memory estimate on one GPU, its KV pool sized by its release (rollout_kv_rule)."""
    from .memory import estimate_memory
    return _release_pool(scn, model, capacity, estimate_memory(rollout_scenario(scn, capacity), model, capacity))


def _engine_memory(scn: Scenario, model: ModelSpec, capacity: int) -> tuple[MemoryEstimate, dict[str, float]]:
    """The rollout engine on one GPU: its own memory estimate and the reservation split by component
    (weights, KV pool, CUDA graphs + profile-run activations; the engine's CUDA context is the GPU's)."""
    mem = rollout_engine_memory(scn, model, capacity)
    budget = capacity * scn.train.rl.gpu_memory_utilization
    pool = float(mem.limits.get("kv_pool_bytes") or 0)
    weights = float(mem.components.get("weights", 0))
    rest = max(0.0, budget - weights - pool)
    return mem, {"weights": weights, "kv_cache": pool, "temporary": rest}


def _check_rollout_kv(scn: Scenario, model: ModelSpec, capacity: int, engine_mem: MemoryEstimate,
                      engine: Mapping[str, float]) -> None:
    """The rollout engine must hold one whole response in its KV cache, or it stops at start-up: vLLM V1
    `check_enough_kv_cache_memory` raises "No available memory for the cache blocks" when nothing is left after the
    weights and profile run, and "To serve at least one request with the model's max seq len ..." when max_model_len
    (verl and TRL set it to prompt + response length) does not fit (vllm-project/vllm@001cabc
    vllm/v1/core/kv_cache_utils.py); SGLang likewise refuses an empty KV pool ("Not enough memory. Please try to
    increase --mem-fraction-static"). It used to be estimated with an infinite (or missing) step time and memory
    that "fits". An attention-free model keeps no KV cache and is not checked (vLLM skips it too)."""
    from ..errors import InputError
    from ..versions import parse_version
    from .memory import DRIVER_RESERVE_BYTES
    rl = scn.train.rl
    gib = 2.0 ** 30
    if (rl.engine == "vllm" and rl.engine_release is not None and not rl.engine_vllm_v0
            and parse_version(rl.engine_release, "train.rl.engine_release", full=True) >= STARTUP_CHECK_V1):
        # V1 from 0.9.1 refuses to start unless utilization x total is free (gpu_worker.init_device: "Free memory on
        # device ... on startup is less than desired GPU memory utilization"; 0.9.1 vllm/v1/worker/gpu_worker.py
        # L135-150, 0.11.0 L182-195)
        total = capacity - DRIVER_RESERVE_BYTES
        taken = engine_start_resident(scn, model) + (_start_context(scn) if rl.engine_started == "after_trainer"
                                                      and rl.placement == "colocated" else 0.0)
        if total - taken < rl.gpu_memory_utilization * total:
            raise InputError(
                f"train.rl.gpu_memory_utilization = {rl.gpu_memory_utilization}",
                f"asks vLLM {rl.engine_release} for {rl.gpu_memory_utilization * total / gib:.1f} GiB of each GPU, but "
                f"the trainer already holds {taken / gib:.1f} GiB when the engine starts, leaving "
                f"{(total - taken) / gib:.1f} GiB free: vLLM stops at start-up ('Free memory on device ... is less "
                "than desired GPU memory utilization').",
                "lower train.rl.gpu_memory_utilization to at most the free share, offload the trainer's states "
                "(rl.offload_train_states), or start the engine before the trainer (rl.engine_started).")
    if not model.kv_cache_bytes_per_token(2.0):
        return
    need = rl.prompt_len + rl.max_new_tokens
    have = int(engine_mem.limits.get("kv_tokens") or 0)
    if have >= need:
        return
    share = f"{rl.gpu_memory_utilization} of each GPU ({capacity * rl.gpu_memory_utilization / gib:.1f} GiB)"
    if have <= 0:
        why = (f"gives the {rl.engine} rollout engine {share}, which its weights ({engine['weights'] / gib:.1f} GiB per "
               f"GPU at rollout_tp={rl.rollout_tp}) and start-up workspace fill: no KV cache is left, and the engine "
               "stops at start-up (vLLM: 'No available memory for the cache blocks').")
    else:
        why = (f"gives the {rl.engine} rollout engine {share}: KV room for {have:,} tokens, less than one response of "
               f"rl.prompt_len + rl.max_new_tokens = {need:,} tokens; the engine stops at start-up (vLLM: 'To serve "
               "at least one request with the model's max seq len ...').")
    raise InputError(f"train.rl.gpu_memory_utilization = {rl.gpu_memory_utilization}", why,
                     "raise train.rl.gpu_memory_utilization, spread the engine's weights with a larger rl.rollout_tp, "
                     "or shorten rl.max_new_tokens.")


def rl_memory(scn: Scenario, model: ModelSpec, capacity_bytes: int) -> MemoryEstimate:
    """Per-GPU peak over the phases of one RL step (the fullest GPU: a training GPU, or under split
    placement a rollout GPU if that is fuller). `phases` names each phase's peak."""
    from .memory import _finish
    train = training_scenario(scn)
    engine_mem, engine_split = _engine_memory(scn, model, capacity_bytes)
    _check_rollout_kv(scn, model, capacity_bytes, engine_mem, engine_split)
    best: MemoryEstimate | None = None
    for stage in stages(train.parallel.pp):
        phases, notes, cpu, engine = rl_stage_phases(scn, model, capacity_bytes, stage)
        kv_tokens = engine_mem.limits.get("kv_tokens")
        est = _finish(phases, scn, capacity_bytes, notes, cpu,
                      limits={"rollout_kv_tokens": kv_tokens, "rollout_kv_pool_bytes": int(engine["kv_cache"]),
                              # the engine's weights on one GPU: with the KV pool, what a sleep-mode engine keeps
                              # allocated in torch's counters while it sleeps (scripts/validate_gathered.py)
                              "rollout_engine_weights_bytes": int(engine["weights"])})
        if best is None or est.peak_bytes_per_gpu > best.peak_bytes_per_gpu:
            best = est
    assert best is not None
    return best


def rl_stage_phases(scn: Scenario, model: ModelSpec, capacity_bytes: int, stage: str = "only"):
    """(phases {name: components}, notes, host bytes, the engine's reservation) of one pipeline stage of
    an RL step, before the runtime overhead is added (rl_memory; tests compare the training phases
    with traces)."""
    from .memory import _train_components
    from .posttrain import _forward_layer_bytes, frozen_model_bytes
    rl = scn.train.rl
    train = training_scenario(scn)
    frozen = _frozen_models(scn, model, train)
    _, engine = _engine_memory(scn, model, capacity_bytes)
    phases, notes = _train_components(train, model, stage)
    cpu = phases.pop("_cpu")["cpu"]
    notes = list(notes)
    held = sum(frozen_model_bytes(train, m, stage) for m in frozen.values())
    if rl.reference and rl.reference_on_host and scn.train.method == "full":
        # swapped into the policy's own parameters for its pass: host memory only (reference_swap_time)
        cpu += frozen_model_bytes(train, model, stage)
        notes.append("reference weights held in host memory and swapped into the policy's parameters for the "
                     "reference pass (NeMo RL use_reference_model)")
    for name, m in frozen.items():
        notes.append(f"{name} ({m.name}) held frozen in the training dtype on every training GPU: "
                     f"{frozen_model_bytes(train, m, stage) / 2**30:.2f} GiB")
    critic_w = critic_o = 0.0
    if _critic(scn):
        # the critic (verl default: the actor's architecture) keeps its weights and optimizer states
        # while the actor trains; its gradients exist only in its own update
        opt = phases["optimizer_step"]
        critic_w, critic_o = opt.get("weights", 0.0), opt.get("optimizer_states", 0.0)
        notes.append("ppo: a critic of the actor's size keeps its weights and optimizer states on the "
                     "training GPUs (verl critic defaults to the actor's model)")
    block = grpo_loss_block(scn, train, model, stage)
    for ph in phases.values():
        if block is not None and ph.get("logits"):
            ph["logits"] = block
        ph["weights"] = ph.get("weights", 0.0) + held + critic_w
        ph["optimizer_states"] = ph.get("optimizer_states", 0.0) + critic_o
    opt = phases["optimizer_step"]
    resident_w = opt.get("weights", 0.0)
    resident_o = opt.get("optimizer_states", 0.0)
    # the log-prob passes: no-grad forwards of the micro-batch over the resident states; logits in
    # the training dtype for the micro-batch's tokens
    t = train.train
    tokens = t.micro_batch * t.seq_len / train.parallel.cp
    low = 4 if t.precision == "fp32" else 2
    vocab = model.vocab_size / (train.parallel.tp if train.framework in ("megatron", "torchtitan") else 1)
    phases["logprob_forward"] = dict(weights=resident_w, optimizer_states=resident_o,
                                     activations=_forward_layer_bytes(train, model, tokens),
                                     logits=tokens * vocab * low)
    if rl.placement == "colocated":
        offload = rl.offload_train_states
        phases["rollout"] = dict(weights=(held + (0.0 if offload else resident_w - held)) + engine["weights"],
                                 optimizer_states=0.0 if offload else resident_o,
                                 kv_cache=engine["kv_cache"], temporary=engine["temporary"])
        notes.append(f"colocated: during rollout the {rl.engine} engine holds gpu_memory_utilization="
                     f"{rl.gpu_memory_utilization} of each GPU next to the trainer's resident states"
                     + (" (weights and optimizer states offloaded to the host)" if offload else "")
                     + f"; while training, its KV cache and weights are released (TRL sleep level 2, "
                     f"{TRL_REF}; verl free_cache_engine, {VERL_REF})")
        if offload:
            cpu += resident_w - held + resident_o
        if rl.engine_sleep_level == 1:
            cpu += engine["weights"]      # the sleeping engine's weight backup (engine_sleep_time)
            notes.append("the rollout engine sleeps at level 1: its weights are backed up in pinned host memory "
                         "while the trainer runs (vLLM CuMemAllocator.sleep)")
    else:
        phases["rollout"] = dict(engine)
        notes.append(f"split: {gpu_groups(scn)[0]} GPUs run the {rl.engine} engine (gpu_memory_utilization="
                     f"{rl.gpu_memory_utilization}); {gpu_groups(scn)[1]} GPUs train; phase 'rollout' is a rollout "
                     "GPU's memory, the others a training GPU's")
    notes.append(RL_MEMORY_UNVALIDATED)
    return phases, notes, cpu, engine


def grpo_loss_block(scn: Scenario, train: Scenario, model: ModelSpec, stage: str) -> float | None:
    """Bytes of the actor's loss block in TRL's GRPO training pass (grpo_trainer.py
    `_get_per_token_logps_and_entropies` L1435-1540 and `_compute_loss`, v1.9.0), in place of the SFT
    step's cross-entropy: logits only for the completion (`logits_to_keep = C + 1`), in fp32 (accelerate's
    native AMP, TRL's default bf16=True, returns outputs through convert_outputs_to_fp32), sliced to C and
    divided *in place* by the temperature. The backward of that in-place division
    on a view (autograd's CopySlices) holds the incoming gradient of the C + 1 logits, a fresh buffer
    of that size, a clone of the C-token slice and the division's output: 2 (C + 1) + 2 C logits per
    sequence — more than the forward end (logits, the saved per-row log-softmax, the entropy's
    flattening copy: 3 C). Traced (tests/test_trace_posttrain.py). None: not the last pipeline stage, or
    a chunked/fused loss (its own block is kept)."""
    t = train.train
    if stage not in ("last", "only") or t.loss != "full" or scn.train.objective != "grpo":
        return None
    rl = scn.train.rl
    C = rl.max_new_tokens
    out_bytes = 4      # fp32 logits: accelerate AMP's convert_outputs_to_fp32 (TRL bf16=True default), or fp32 training
    vocab = model.vocab_size / (train.parallel.tp if train.framework in ("megatron", "torchtitan") else 1)
    return t.micro_batch / train.parallel.cp * (2 * (C + 1) + 2 * C) * vocab * out_bytes


# ---- speed ------------------------------------------------------------------------------------------------
def response_lengths(mean: float | None, top: int, n: int, truncation_rate: float | None = None) -> list[int]:
    """n response lengths (tokens, ascending) with the stated mean, none past `top` (the engine stops every
    response at max_new_tokens). A source states the mean and the cap, not the shape; the distribution on
    [0, top] with the most entropy for a given mean is the truncated exponential, density ~ exp(-lam x) (lam < 0
    when the mean is past top / 2: lengths pile up toward the cap; lam = 0: uniform). Its n mid-quantiles
    F^-1((i + 1/2) / n) stand for the responses, so the same inputs give the same lengths. No mean: all at the cap.

    `truncation_rate` (rl.truncation_rate, NeMo RL's logged `truncation_rate`: the share of the batch stopped by the
    length limit, nemo_rl/experience/rollouts.py L483 @b1c86a8): k = round(rate x n) responses,
    at least one for a rate > 0, sit at the cap and the other n - k take the max-entropy lengths for the mean that
    leaves, (n x mean - k x top) / (n - k). Without it the truncated exponential's longest response of a short mean
    ends well short of the cap (mean 398 of 3,964, n 2,048: 3,241 tokens; docs/speed.md §3.36)."""
    if not mean or mean >= top:
        return [top] * n
    if truncation_rate:
        k = truncated_responses(truncation_rate, n)
        if k >= n:
            return [top] * n
        rest = (n * float(mean) - k * top) / (n - k)
        return response_lengths(max(1.0, rest), top, n - k) + [top] * k
    mean = max(float(mean), 1.0)
    r = mean / top                      # mean as a fraction of the cap, solve r(a) with a = lam x top

    def frac(a: float) -> float:        # mean / top of the truncated exponential; decreasing in a
        if abs(a) < 1e-6:
            return 0.5 - a / 12.0
        return 1.0 / a - 1.0 / math.expm1(a)
    lo, hi = -700.0, 700.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if frac(mid) > r:
            lo = mid
        else:
            hi = mid
    a = 0.5 * (lo + hi)
    out = []
    for i in range(n):
        u = (i + 0.5) / n
        if abs(a) < 1e-9:
            x = u
        else:                           # F(x) = (1 - e^(-a x)) / (1 - e^(-a)), x as a fraction of top
            x = -math.log1p(-u * -math.expm1(-a)) / a
        out.append(min(top, max(1, int(round(x * top)))))
    return out


def step_response_lengths(scn: Scenario) -> list[int]:
    """The step's prompts x group response lengths (response_lengths of rl.mean_response_len, rl.max_new_tokens and
    rl.truncation_rate), ascending."""
    rl = scn.train.rl
    return response_lengths(rl.mean_response_len, rl.max_new_tokens, sequences_per_step(scn), rl.truncation_rate)


def replica_lengths(scn: Scenario, replicas: int) -> list[int]:
    """The response lengths the slowest replica generates: the step's prompts x group lengths
    (response_lengths) dealt out to the replicas in turn from the longest down, the replica that gets the
    longest of all. A synchronous step waits for it."""
    n = sequences_per_step(scn)
    ls = step_response_lengths(scn)
    return sorted(ls[n - 1::-replicas]) if replicas > 1 else ls


# vLLM's defaults for the offline `LLM` class (UsageContext.LLM_CLASS), which NeMo RL's and verl's rollout workers
# construct (NeMo RL nemo_rl/models/generation/vllm.py `vllm.LLM(**llm_kwargs)`, v0.3.0 L349): on GPUs with
# >= 70 GiB other than A100, max_num_seqs 1024 and max_num_batched_tokens 16384, else 256 and 8192
# (vllm/engine/arg_utils.py EngineArgs._set_default_args_v1, vLLM 0.9-0.10; the `vllm serve` values are 1024/8192
# and 256/2048).
LLM_CLASS_BATCH = {"big": (1024, 16384), "small": (256, 8192)}
# verl's rollout on vLLM's V0 engine (rl.engine_vllm_v0: verl's own vLLM 0.4.2 / 0.5.4 / 0.6.3 wrappers): the running
# cap and tokens per step the engine gets. verl's vLLMRollout builds its `LLM` with max_num_batched_tokens (rollout
# config, 8192 by default) and enable_chunked_prefill, but not rollout.max_num_seqs (vllm_rollout.py L77, L101-115
# @44a65f956d72aa1bd88ad3ea24de33a309bb0c70; ppo_trainer.yaml L85 max_num_batched_tokens 8192, L87 max_num_seqs 1024,
# unused on this path), and verl's vllm_v_0_6_3/llm.py L85-134 passes **kwargs on to vLLM's EngineArgs, whose
# max_num_seqs defaults to 256 (vllm/engine/arg_utils.py L115, vLLM 0.6.3 wheel sha256 939ae902...; V0 has no
# usage-context defaults). So at most 256 sequences decode at once, whatever the GPU.
VERL_V0_BATCH = (256, 8192)


def in_process_cost(cost: Any, sv: Any) -> Any:
    """The rollout engine's step cost with its engine core in process (rl.engine_in_process): NeMo RL's
    synchronous vLLM worker sets VLLM_ENABLE_V1_MULTIPROCESSING=0 (nemo_rl/models/generation/vllm.py L149 @b1c86a8)
    and builds `vllm.LLM` (L349), whose LLMEngine then holds an InprocClient (vllm/v1/engine/core_client.py
    `EngineCoreClient.make_client`, vllm-project/vllm @364631ab) and steps it as `engine_core.get_output()` (schedule,
    forward, update) followed by `output_processor.process_outputs` (llm_engine.py `step`, vllm-project/vllm
    @001999d2). So the output side's work per decoded token adds to each step (load.cost.SerialOutput) instead of
    bounding it from a second process (load.cost.StreamCeiling, which step_cost applied). Its rate is the only
    published per-token figure of vLLM's output side, engine_host.VLLM's stream_token_s (one API-server process
    saturated at 14,961 streamed tokens/s, vLLM PR 13923), as the serving speed engine scales it to the host: it
    holds the OpenAI chunk formatting and HTTP write the offline path skips, and lacks the per-token `Logprob`
    that NeMo RL's `logprobs=0` adds (without decoded text: with no stop strings NeMo RL starts vLLM with
    skip_tokenizer_init, nemo_rl/models/generation/__init__.py L39-43 @b1c86a8, and vLLM then skips detokenisation;
    docs/speed.md §3.36)."""
    from .load.cost import SerialOutput, StreamCeiling
    base = cost.base if isinstance(cost, StreamCeiling) else cost
    token_s = float(getattr(sv, "stream_token_s", 0.0) or 0.0)
    if token_s <= 0:
        from .engine_host import engine_host
        from .speed import _host_speed
        token_s = engine_host("vllm").stream_token_s / _host_speed(sv.scn, sv.gpu)[0]
    return SerialOutput(base, token_s)


def rollout_time(scn: Scenario, model: ModelSpec, gpu: Any, P: Mapping[str, Any], network: Any,
                 capacity: int) -> dict[str, Any]:
    """Seconds to generate the step's prompts x group responses on the rollout replicas.

    The slowest replica's share (replica_lengths: the step waits for the longest response) is served by the
    engine's own scheduler, iteration by iteration (load.simulate: vLLM V1 continuous batching, KV blocks
    allocated as the responses grow, the newest preempted and recomputed when the pool is full, the running
    batch shrinking as responses finish) on the serving speed engine's step cost. Every request is there at
    t = 0 (`LLM.generate` over the worker's whole shard) and none passes an HTTP front end."""
    from dataclasses import replace
    import numpy as np
    from .load import Workload, simulate
    from .load.cost import step_cost
    from .load.engines import engine_policy
    from .speed import _Serving
    rl = scn.train.rl
    inf = rollout_scenario(scn, capacity)
    mem = rollout_engine_memory(scn, model, capacity)
    sv = _Serving(inf, model, gpu, P, None, network, mem)
    replicas = gpu_groups(scn)[0] // rl.rollout_tp
    # no time when the engine cannot run one response (as a serving replica without KV room has no TPOT): the
    # step has no finite length, and None (not inf, which is not JSON) says so on every surface
    if not sv.kv_capacity_tokens:
        return {"time": None, "batch": 0, "fits": False, "replicas": replicas,
                "why": "the rollout engine has no KV-cache room after its weights"}
    policy, _ = engine_policy(inf, sv, capacity)
    need = -(-(rl.prompt_len + rl.max_new_tokens) // policy.block_size)
    if need > policy.kv_blocks:       # one full-length response does not fit the KV pool
        return {"time": None, "batch": 0, "fits": False, "replicas": replicas,
                "why": (f"the rollout engine's KV cache ({policy.kv_blocks * policy.block_size:,} tokens) cannot "
                        f"hold one response of rl.prompt_len + rl.max_new_tokens = "
                        f"{rl.prompt_len + rl.max_new_tokens:,} tokens")}
    lengths = replica_lengths(scn, replicas)
    n_r = len(lengths)
    policy = replace(policy, max_num_seqs=min(policy.max_num_seqs, max(n_r, 1)))
    wl = Workload(np.zeros(n_r), np.full(n_r, rl.prompt_len, dtype=np.int64), np.array(lengths, dtype=np.int64))
    cost = step_cost(sv, policy.max_num_seqs, rl.prompt_len + rl.max_new_tokens,
                     max(policy.token_budget, rl.prompt_len))
    if rl.engine_in_process and rl.engine == "vllm":
        cost = in_process_cost(cost, sv)
    if rl.engine_vllm_v0:
        # V0's LLMEngine processes each step's outputs inside its own loop (`_process_model_outputs`, part of the
        # per-step host work engine_host.vllm_v0_host prices, serial with the forward): there is no second output
        # process whose streaming rate (V1's StreamCeiling) could bound the step
        from .load.cost import StreamCeiling
        cost = cost.base if isinstance(cost, StreamCeiling) else cost
    cost.frontend_s = 0.0              # offline LLM.generate: no HTTP front end
    cost.template_parse_s = 0.0        # nor its chat-template parse
    res = simulate(wl, policy, cost, timeline_points=400)
    running = max((pt[2] for pt in res.timeline), default=0)
    return {"time": float(np.nanmax(res.finish_s)), "batch": int(running), "fits": True,
            "kv_tokens": mem.limits.get("kv_tokens"), "per_replica": n_r, "replicas": replicas,
            "preemptions": int(res.preemptions), "longest": max(lengths), "iterations": int(res.iterations),
            "waves": 1}


def rule_reward_time(scn: Scenario) -> float:
    """Seconds to score the step's responses with a rule-based reward (no reward model), when the scenario gives
    the per-response rate (rl.rule_reward_s; none: 0, not priced). NeMo RL's math environment cuts the responses
    into rl.rule_reward_workers contiguous chunks (`chunk_list_to_workers`, nemo_rl/environments/utils.py) and each
    Ray worker scores its chunk one response after another (`HFVerifyWorker.verify`: math-verify's
    `math_metric` per response, nemo_rl/environments/math_environment.py @b1c86a8, v0.3.0); the driver waits for
    all (`ray.get`), inside the `generation` timer (`run_multi_turn_rollout` -> `calculate_rewards`,
    nemo_rl/experience/rollouts.py and nemo_rl/algorithms/grpo.py @b1c86a8). So the phase lasts the largest
    chunk, ceil(responses / workers), times the rate."""
    rl = scn.train.rl
    if rl.reward_model or not rl.rule_reward_s:
        return 0.0
    return math.ceil(sequences_per_step(scn) / rl.rule_reward_workers) * rl.rule_reward_s


def weight_sync_time(scn: Scenario, model: ModelSpec, gpu: Any, P: Mapping[str, Any], network: Any) -> float:
    """The 16-bit weights from trainer to engine.

    Colocated, every GPU assembles the *whole* model, tensor by tensor, and its engine loads its own shard
    (NeMo RL `refit_policy_generation` -> `get_weights_ipc_handles` -> refit_utils.gather_params, v0.3.0: per
    parameter, an all-gather of the tensor-parallel slices, a broadcast from the owning pipeline stage to the
    whole pipeline group and, for routed experts, an all-gather over the expert-parallel group, before the HF
    renaming and CUDA-IPC hand-off; verl's FSDP path gathers each full tensor over the shard group the same way).
    Under ZeRO-3 / FSDP the gathers move the parameters as the trainer stores them (fp32 under FSDP2 mixed
    precision, which NeMo RL's DTensor worker casts to 16 bits only after `full_tensor()`); otherwise, and for the
    broadcast to a split engine, 16 bits.
    Time: the tensor-parallel all-gather of a stage's non-expert weights, the pipeline broadcast of the model
    with each routed expert at one expert-parallel rank's share (a pipelined ring broadcast moves S bytes per
    rank in S / bandwidth), the expert all-gather, or under
    ZeRO-3 the all-gather over the shard group. The HBM copies after it (packing, the engine's load) are left out
    (tens of milliseconds at HBM rates).
    Split: the training group assembles the whole model the same way and its first rank broadcasts every tensor
    to all rollout GPUs, each of which receives the whole model and loads its shard (NeMo RL
    `broadcast_weights_for_collective`: Megatron-Bridge `export_hf_weights` into `packed_broadcast_producer(src=0)`
    over the model-update group, megatron_policy_worker.py @06beed91): a pipelined broadcast of the whole 16-bit
    model over the link that spans both groups."""
    from .comm import all_gather_time, group_link, p2p_time
    from .speed import _gpus_per_node
    rl, n = scn.train.rl, scn.hardware.count
    gpn = _gpus_per_node(scn, gpu)
    _, train_gpus = gpu_groups(scn)
    pa = scn.parallel
    from .memory import state_bytes
    whole = model.params_total * 2.0
    # a fully sharded trainer gathers its parameters as it stores them and casts to 16 bits after: NeMo RL's
    # DTensor worker takes `tensor.full_tensor()` of each fp32 FSDP2 shard (over the FSDP and TP mesh), then
    # `.to(self.dtype)` (dtensor_policy_worker.py get_weights_ipc_handles / broadcast_weights_for_collective,
    # v0.3.0); Megatron's (ZeRO <= 1 here) parameters are 16-bit already
    stored = model.params_total * (state_bytes(training_scenario(scn)).weight if pa.zero >= 3 else 2.0)
    experts = (sum(b.total for b in model.blocks if b.kind == "expert") * stored / model.params_total
               if model.is_moe and pa.ep > 1 else 0.0)
    gather = _megatron_gather(scn, gpu, P, network, gpn, stored, experts, train_gpus)
    if pa.zero >= 3:
        shard = max(1, train_gpus // (pa.tp * pa.pp))
        link = group_link(gpu, shard, train_gpus // pa.pp, gpn, network, P["comm"])
        gather += all_gather_time(stored / (pa.tp * pa.pp), shard, link)
    if rl.placement == "colocated":
        return gather
    # the broadcast's source is one training GPU: every byte leaves through that GPU's link to the other group
    link = group_link(gpu, 2, n, gpn, network, P["comm"])
    return gather + p2p_time(whole, link)


def _megatron_gather(scn: Scenario, gpu: Any, P: Mapping[str, Any], network: Any, gpn: int, whole: float,
                     experts: float, train_gpus: int) -> float:
    """Seconds for every GPU to hold the whole 16-bit model from its tensor/pipeline/expert shards
    (refit_utils.gather_params): TP all-gather of each stage's non-expert weights, PP broadcast of every
    tensor from its owning stage, EP all-gather of the routed experts. Megatron orders groups tp, cp, ep/dp,
    pp: a TP group spans tp GPUs, an EP group tp x ep, a PP group every training GPU.

    The pipeline broadcast carries each routed expert tensor as its owner holds it, one expert-parallel
    rank's share; the EP all-gather after it assembles the rest (gather_params broadcasts `full_param`, the
    local expert weight, over the pipeline group, then all-gathers the stacked result over the expert group,
    nemo_rl/models/megatron/refit_utils.py v0.3.0 b1c86a8; Megatron-Bridge's export at the v0.4 pin, 8aa287d,
    does the same: `broadcast_from_pp_rank` then `gather_from_ep_ranks`, param_mapping.py). So the broadcast
    moves the non-expert weights and experts / ep, not the whole model."""
    from .comm import all_gather_time, group_link
    pa = scn.parallel
    t = 0.0
    if pa.tp > 1:
        t += all_gather_time((whole - experts) / pa.pp, pa.tp, group_link(gpu, pa.tp, pa.tp, gpn, network, P["comm"]))
    if pa.pp > 1:
        link = group_link(gpu, pa.pp, train_gpus, gpn, network, P["comm"])
        broadcast = whole - experts + experts / max(1, pa.ep)
        t += broadcast / link.effective_bytes_per_s + (pa.pp - 1) * link.latency_s
    if pa.ep > 1 and experts:
        t += all_gather_time(experts, pa.ep, group_link(gpu, pa.ep, pa.tp * pa.ep, gpn, network, P["comm"]))
    return t


# HBM bytes per logit (one token x one entry of the GPU's vocabulary shard) of the trainer's log-prob block:
# (training pass, forward and backward; no-grad log-prob pass). 'fused' is gpuplan's calibrated cross-entropy
# (efficiency.json loss_bytes_per_logit, forward and backward), which train_performance already charges.
# NeMo RL's Megatron worker (read at v0.3.0 b1c86a8 and at the v0.4 table's 06beed91, Megatron-LM pins
# terrykong/Megatron-LM 2ff0f099 and 76065f17) computes every token's log-prob over the whole vocabulary shard in
# fp32, op by op, each op a pass over [tokens, V/tp]:
# - common to both: GPTModel returns `logits.transpose(0, 1).contiguous()` (a bf16 copy: 2 read + 2 written;
#   gpt_model.py L407 @2ff0f099, L634 @76065f17) and the bf16 -> fp32 cast (2 + 4: Float16Module's
#   float16_to_fp32 on the last stage, module.py L232-237 @2ff0f099 / L420-431 @76065f17, or with
#   defer_fp32_logits the loss's and DistributedLogprob's `.to(torch.float32)`): 10;
# - forward, `_compute_distributed_log_softmax` + DistributedLogprob.forward (nemo_rl/distributed/model_utils.py
#   L22-100): amax (4), subtract the max (4 + 4), exp (4 + 4), its sum (4), subtract the log-sum (4 + 4), then
#   v0.3.0 `log_softmax_output.clone()` (4 + 4) and `exp_()` (4 + 4) = 48; 06beed91 `log_probs.exp()` (4 + 4) = 40;
# - backward (training only; DistributedLogprob.backward L102-121 @b1c86a8, L101-140 @06beed91): v0.3.0
#   `one_hot(masked_target, V)` (int64: 8 written), `(~mask) * one_hot` (8 + 8), `.float()` (8 + 4),
#   `.sub_(softmax)` (4 + 4 + 4), `.mul_(grad)` (4 + 4) = 56; 06beed91 `softmax.neg()` (4 + 4), `.mul_` (4 + 4) and
#   a scatter of the chosen tokens = 16; the gradient's fp32 -> bf16 cast back (4 + 2) = 6.
# Training: 10 + 48 + 56 + 6 = 120 (v0.3.0), 10 + 40 + 16 + 6 = 72 (06beed91); no-grad (get_logprobs ->
# from_parallel_logits_to_logprobs_packed_sequences(..., inference_only=True), megatron_policy_worker.py L1062
# @b1c86a8, L1306 @06beed91): 10 + 48 = 58, 10 + 40 = 50. The transposed copy's gradient and the per-sequence
# loop's small ops (.item() syncs) are not counted.
# NeMo RL v0.3.0's DTensor (FSDP2) worker at tensor parallel 1 (dtensor_policy_worker.py `train` / `get_logprobs`
# @b1c86a8; transformers 4.52.4 in its uv.lock): under torch.autocast the HF lm_head returns bf16 logits and the
# root FSDP2 module casts the outputs to MixedPrecisionPolicy(output_dtype=float32) (nemo_rl/models/dtensor/
# parallelize.py L464-468; torch FSDPState `_post_forward`, "FSDP::cast_forward_outputs"): 2 + 4; the temperature
# division runs only without vLLM's V1 engine (NRL_VLLM_USE_V1 defaults to 1, nemo_rl/models/policy/utils.py
# L25-31): none. Training: ClippedPGLossFn's plain branch (loss_functions.py L160-170 @b1c86a8) takes
# `logits[:, :-1]`, `log_softmax` (4 + 4) and `gather` (the chosen entries only); backward: gather's zero tensor
# (4; scatter_add_ touches the chosen entries), log_softmax's (4 + 4 + 4), the `[:, :-1]` slice's (a zero tensor 4,
# the copy 4 + 4) and the cast back to bf16 (4 + 2): 6 + 8 + 4 + 12 + 12 + 6 = 48. No-grad (get_logprobs
# L1006-1018): the cast and `log_softmax(logits.to(float32))` = 6 + 8 = 14. scripts/trace_nemo_rl_dtensor_logprob_
# bytes.py runs these ops under the byte counter. At tp > 1 the loss takes the DTensor branch (not counted).
LOGPROB_BYTES = {"nemo-rl-0.3": (120.0, 58.0), "nemo-rl-0.4": (72.0, 50.0), "nemo-rl-dtensor-0.3": (48.0, 14.0)}


def packed_slice_bytes(seqs_per_pack: float) -> float:
    """Bytes per logit of a packed micro-batch that the training pass's per-sequence loss adds in its backward.
    With sequence packing NeMo RL's Megatron worker wraps the loss in SequencePackingLossWrapper
    (nemo_rl/models/megatron/common.py L346-352 @b1c86a8, L477 @06beed91), which calls it once per packed
    sequence on the slice `next_token_logits[:, start:end, :]` (nemo_rl/algorithms/loss_functions.py L658-691
    @b1c86a8, L869-892 @06beed91). The backward of each slice (torch slice_backward) materialises a zero tensor of
    the whole pack's fp32 logits (4 written per logit) and copies the slice's gradient into it (4 + 4 over the slice,
    8 over the pack in all), and autograd sums the k gradients into one buffer (k - 1 in-place adds, 4 + 4 + 4):
    4 k + 8 + 12 (k - 1) = 16 k - 4 for k sequences a pack (the zeros and the k - 1 full-size add_ were read off a
    profiler trace of that pattern, torch 2.13). A pack of one sequence is sliced whole, and torch's indexing returns
    a whole-range slice as an alias of the tensor (`applySlice` skips it: AliasBackward0, no slice_backward; torch
    2.13, checked in tests/test_posttrain.py): 0. So do unpacked micro-batches, which call the loss once. (NeMo RL's
    DTensor worker pads each pack to train_mb_tokens, so its single sequence would be a strict slice: 4 + 8; no row
    runs that.)"""
    k = float(seqs_per_pack)
    return 16.0 * k - 4.0 if k >= 2.0 else 0.0


def loss_bytes_charged(train: Scenario, P: Mapping[str, Any]) -> float:
    """Bytes per logit gpuplan's training pass charges for its loss (the forward-only pass its forward share): aten's
    cross entropy on upcast logits for eager hf and torchtitan stacks (elementwise.eager_loss_bytes_per_logit, 36),
    otherwise the fused or compiled loss's efficiency.json loss_bytes_per_logit (12)."""
    from . import elementwise
    mode = elementwise.stack_mode(train.framework, bool(getattr(train.train, "compile", False)),
                                  getattr(train, "tool", None), getattr(train.train, "loss", "full"))
    eager = elementwise.eager_loss_bytes_per_logit(train.framework, mode)
    return float(eager) if eager is not None else float(P["loss_bytes_per_logit"])


def logprob_block_extra(impl: str, scn: Scenario, model: ModelSpec, gpu: Any, P: Mapping[str, Any],
                        tokens: float, grad: bool, charged_bytes: float, seqs_per_pack: float = 0.0) -> float:
    """Seconds a GPU of the last pipeline stage of the pass `scn` spends on its log-prob block beyond what
    gpuplan's pass already charges: (LOGPROB_BYTES[impl], plus packed_slice_bytes for a packed training pass,
    - charged_bytes) per logit over `tokens` (one data-parallel rank's, split over context parallelism) x the
    vocabulary shard (vocab / tp), at the GPU's memory rate. 0 for 'fused' (rl.logprob_impl)."""
    from .speed import memory_rate
    if impl not in LOGPROB_BYTES:
        return 0.0
    pa = scn.parallel
    per_logit = LOGPROB_BYTES[impl][0 if grad else 1] - charged_bytes
    if grad and seqs_per_pack:
        per_logit += packed_slice_bytes(seqs_per_pack)
    logits = tokens / pa.cp * model.vocab_size / pa.tp
    return max(0.0, per_logit) * logits / memory_rate(P, gpu)


# Copies into freshly allocated pageable host memory (torch `.to("cpu")` of a CUDA tensor without pinning): the CUDA
# driver stages them through its own pinned buffer and every destination page is faulted in on first touch, far below
# the host link. NeMo RL's `offload_before_refit` moves the optimizer states this way, tensor by tensor; an Nsight
# trace of it on one H100 (NVIDIA-NeMo/RL issue 3976, 2026-09-17: colocated GRPO, Megatron distributed optimizer)
# measured 510 Device -> Pageable copies, 4.94 GB in 2.75 s of copy time (1.8 GB/s), where one simple 1 GiB pageable
# copy ran at 16.1 GB/s and a pinned one at 55 GB/s on the same host. (SGLang PR 32032 measured the same kind of
# offload, module.to("cpu"), at 2.8 GB/s on an H200.) The way back, `v.to("cuda")` from those pages, allocates no
# host memory: priced at the issue's simple pageable copy, 16.1 GB/s (no per-tensor trace of it was published).
PAGEABLE_OUT_BYTES_PER_S = 1.8e9
PAGEABLE_BACK_BYTES_PER_S = 16.1e9


def offload_bytes(scn: Scenario, model: ModelSpec, capacity: int) -> tuple[float, float]:
    """Colocated with rl.offload_train_states: (pinned, pageable) bytes of the trainer's states a GPU moves to the
    host once, one way: its resident weights and optimizer states, less the rollout engine's own backup (level-1
    sleep) and a reference kept on the host. rl.offload_pageable says which part goes to pageable memory."""
    phases, _, host_bytes, engine = rl_stage_phases(scn, model, capacity)
    if scn.train.rl.engine_sleep_level == 1:
        host_bytes -= engine["weights"]     # the engine's own backup: engine_sleep_time, not the trainer's states
    if scn.train.rl.reference and scn.train.rl.reference_on_host and scn.train.method == "full":
        from .posttrain import frozen_model_bytes
        host_bytes -= frozen_model_bytes(training_scenario(scn), model)   # stays on the host: not moved
    mode = scn.train.rl.offload_pageable
    pageable = (host_bytes if mode == "all" else
                min(host_bytes, phases["optimizer_step"].get("optimizer_states", 0.0)) if mode == "optimizer_states"
                else 0.0)
    return host_bytes - pageable, pageable


def offload_time(scn: Scenario, model: ModelSpec, capacity: int, gpu: Any) -> tuple[float, float]:
    """Colocated with rl.offload_train_states: (out, back) seconds to move the trainer's resident weights and
    optimizer states to the host and back, once each. NeMo RL does it every step: out during the refit
    (`offload_before_refit`: optimizer states; `offload_after_refit`: parameters; grpo.py timer
    `prepare_for_generation`, @06f6343) and back before the passes (`prepare_for_lp_inference`: parameters;
    `prepare_for_training`: optimizer states; timers `logprob_inference_prep`, `training_prep`), hence the two
    phases state_offload and state_onload. Megatron's gradient buffer is freed and re-zeroed, not copied, and its
    parameters go to a pinned buffer (param_and_grad_buffer.py offload_to_cpu / reload_from_cpu,
    terrykong/Megatron-LM @2ff0f099 and @76065f17: `param_data.cpu().pin_memory()` once, then `copy_(...,
    non_blocking=True)`): the host link's rate. The optimizer states go per tensor with `state[k] = v.to("cpu")`
    (megatron_policy_worker.py offload_before_refit, v0.3.0 and @06beed91), and NeMo RL's DTensor worker also moves
    the model with `model.to("cpu")` (dtensor_policy_worker.py move_to_cpu): fresh pageable memory every step
    (rl.offload_pageable), at PAGEABLE_OUT_BYTES_PER_S out and PAGEABLE_BACK_BYTES_PER_S back, never above the
    host link. verl's param/optimizer offload moves the same states."""
    pinned, pageable = offload_bytes(scn, model, capacity)
    bw = float(getattr(gpu, "pcie_bandwidth_bytes_per_s", 0.0) or 0.0)
    if bw <= 0:
        return 0.0, 0.0
    out = pinned / bw + pageable / min(bw, PAGEABLE_OUT_BYTES_PER_S)
    back = pinned / bw + pageable / min(bw, PAGEABLE_BACK_BYTES_PER_S)
    return out, back


def engine_sleep_time(scn: Scenario, model: ModelSpec, capacity: int, gpu: Any) -> float:
    """rl.engine_sleep_level 1 (colocated): seconds to copy the rollout engine's weight shard over the GPU's host
    link once, one way. vLLM's level-1 sleep backs up every allocation tagged "weights" into pinned host memory
    (cudaMemcpy device to host) and discards the rest; wake_up copies them back (vllm/v1/worker/gpu_worker.py
    Worker.sleep, vllm/device_allocator/cumem.py CuMemAllocator.sleep / wake_up). NeMo RL @06f6343 sleeps at
    level 1 in `finish_generation` (inside its timer `generation`) and wakes the weights in the refit
    (`prepare_for_generation(tags=["weights"])`), only to overwrite them with the trainer's: phases engine_sleep and
    engine_wake."""
    weights = _engine_memory(scn, model, capacity)[1]["weights"]
    bw = float(getattr(gpu, "pcie_bandwidth_bytes_per_s", 0.0) or 0.0)
    return weights / bw if bw > 0 else 0.0


# verl's hybrid engine on vLLM's V0 engine (rl.engine_vllm_v0, colocated: verl's vllm_v_0_4_2 / 0_5_4 / 0_6_3 wrappers)
# moves the engine's weights through pageable host memory every step, inside verl's `gen` timer (read at
# volcengine/verl@44a65f956d72aa1bd88ad3ea24de33a309bb0c70):
# * the rollout sharding manager's __exit__ calls `offload_model_weights` (sharding_manager/fsdp_vllm.py L120-121),
#   which points every engine parameter at a CPU tensor made once with `torch.empty_like(params, device="cpu")`
#   (third_party/vllm/vllm_v_0_6_3/worker.py L283-291): plain pageable memory, reused every step, no copy;
# * __enter__ loads the FSDP state_dict (`sync_model_weights`, fsdp_vllm.py L86-92): for each tensor
#   `full_tensor()` (the all-gather weight_sync_time prices) and vLLM's weight_loader, which narrows the tensor to this
#   rank's shard and `copy_`s it into the CPU parameter: a device-to-pageable copy of the engine's shard; then
#   `load_dtensor_weights` ends with `vllm_model.cuda()` (dtensor_weight_loaders.py L363-368), a pageable-to-device
#   copy of the same bytes back into fresh device tensors;
# * generate_sequences rebuilds the KV cache with free_cache_engine (vllm_rollout.py L159-160, L248-249: the worker's
#   `_init_cache_engine`, worker.py L235-242), and vLLM 0.6.3's CacheEngine allocates every block with
#   `torch.zeros`: the GPU pool and the CPU swap space, `swap_space` 4 GiB (verl's LLM default, vllm_v_0_6_3/llm.py
#   L100; num_cpu_blocks = swap_space_bytes // block bytes, worker.py L213) of pinned host memory per rank
#   (vllm/worker/cache_engine.py L67-85, vLLM 0.6.3 wheel).
# Rates: both copies touch pageable pages that exist already (the CPU parameters are reused from the second step),
# so both run at PAGEABLE_BACK_BYTES_PER_S, the simple pageable copy of NVIDIA-NeMo/RL issue 3976 (no MI300X
# pageable figure was found); the GPU pool is zeroed at the GPU's memory rate; the 4 GiB of pinned swap space (torch's
# caching host allocator returns the same pinned block each step: no new pinning) is zeroed by one host thread at
# HOST_ZERO_BYTES_PER_S, `Tensor.zero_()` of 1 GiB already touched timed on this project's development machine (AMD
# EPYC Genoa, the reference host's generation, torch 2.13 CPU, one thread: best of 5, 24.1 GB/s).
VLLM_V0_SWAP_SPACE_BYTES = 4 * 2**30
HOST_ZERO_BYTES_PER_S = 24.1e9


def engine_reload_time(scn: Scenario, model: ModelSpec, capacity: int, gpu: Any,
                       P: Mapping[str, Any]) -> dict[str, float]:
    """rl.engine_vllm_v0, colocated (verl's hybrid engine on vLLM <= 0.6.3): seconds a GPU spends each step moving its
    engine's weight shard to the reused pageable CPU parameters and back (`weights_out`, `weights_back`) and zeroing
    the rebuilt KV cache, the GPU pool and the pinned CPU swap space (`kv_init`); see the comment above."""
    out = {"weights_out": 0.0, "weights_back": 0.0, "kv_init": 0.0}
    rl = scn.train.rl
    if not (rl.engine_vllm_v0 and rl.placement == "colocated" and rl.engine == "vllm"):
        return out
    from .speed import memory_rate
    eng = _engine_memory(scn, model, capacity)[1]
    bw = float(getattr(gpu, "pcie_bandwidth_bytes_per_s", 0.0) or 0.0)
    rate = min(bw, PAGEABLE_BACK_BYTES_PER_S) if bw > 0 else PAGEABLE_BACK_BYTES_PER_S
    out["weights_out"] = out["weights_back"] = eng["weights"] / rate
    out["kv_init"] = eng["kv_cache"] / memory_rate(P, gpu) + VLLM_V0_SWAP_SPACE_BYTES / HOST_ZERO_BYTES_PER_S
    return out


def reference_swap_time(scn: Scenario, model: ModelSpec, gpu: Any) -> float:
    """rl.reference_on_host: the reference pass copies the policy's 16-bit weights to the host, the reference's
    in, and after the pass the policy's back: three copies of a GPU's weight shard over its host link (NeMo RL
    megatron_policy_worker.py `use_reference_model`: state_dict to CPU, load_state_dict(reference_state_dict),
    then the saved state dict back; @0f4e4696)."""
    from .posttrain import frozen_model_bytes
    train = training_scenario(scn)
    shard = max(frozen_model_bytes(train, model, st) for st in stages(train.parallel.pp))
    bw = float(getattr(gpu, "pcie_bandwidth_bytes_per_s", 0.0) or 0.0)
    return 3.0 * shard / bw if bw > 0 else 0.0


def host_loop_seconds(scn: Scenario, train: Scenario, lp_scn: Scenario, gpu: Any, P: Mapping[str, Any],
                      optimizer_steps_: int, longest: int | None) -> dict[str, Any]:
    """rl.host_loop: host seconds the RL framework's own Python adds to the training pass (`actor_update`) and to
    each log-prob pass (`per_logprob_pass`), on the row's host (estimate/nemo_rl_host.py). 'nemo-rl-0.3' / '-0.4': the
    driver's sharding per pass (every trainer), and with the Megatron worker the exposed host work of each packed
    micro-batch of the slowest rank (`train` / `lp_scn`: the packed scenarios, micro_batch sequences a pack, global
    batch = packs x micro_batch x dp)."""
    rl = scn.train.rl
    out = {"host_loop": rl.host_loop, "actor_update": 0.0, "per_logprob_pass": 0.0}
    if rl.host_loop == "none":
        return out
    loop = rl.host_loop
    from . import nemo_rl_host
    from .host_issue import BARE_OP_CPU_S, HF_FORWARD_OP_CPU_S, reference_op_s
    from .speed import _engine, _family, _host_speed
    from ..hardware.hosts import host_eager_op_s
    hw = scn.hardware
    speed, host_name = _host_speed(scn, gpu)
    eager_op = host_eager_op_s(getattr(hw, "host_cpu", None), getattr(hw, "host_single_thread_score", None))
    # a device op's launch beyond its CPU share (host_issue.py): the reference host's eager op less its CPU time
    ref_op = reference_op_s(float(_engine(P, "hf", _family(gpu))["host_issue_layer_s"]))
    launch = (eager_op - BARE_OP_CPU_S) if eager_op is not None else max(ref_op - HF_FORWARD_OP_CPU_S, 0.0) / speed
    seqs = sequences_per_step(scn)
    width = rl.prompt_len + (longest if longest else rl.max_new_tokens)
    drv_train = nemo_rl_host.driver_s("train", seqs, width, speed, loop)
    drv_lp = nemo_rl_host.driver_s("logprob", seqs, width, speed, loop)
    worker_train = worker_lp = 0.0
    if scn.framework == "megatron":
        pa = train.parallel
        padded = pa.tp * pa.cp > 1 or pa.pp > 1     # pad factor tp (2 cp tp with CP) or a pipeline's fixed length
        per_pack = train.train.micro_batch
        packs = train.train.global_batch / (per_pack * train.dp)
        worker_train = optimizer_steps_ * packs * nemo_rl_host.train_micro_batch_s(per_pack, padded, speed, launch, loop)
        lp_pack = lp_scn.train.micro_batch
        lp_packs = lp_scn.train.global_batch / (lp_pack * lp_scn.dp)
        worker_lp = lp_packs * nemo_rl_host.logprob_micro_batch_s(lp_pack, padded, speed, launch, loop)
    out.update(actor_update=drv_train + worker_train, per_logprob_pass=drv_lp + worker_lp, driver_train=drv_train,
               driver_logprob=drv_lp, worker_train=worker_train, worker_logprob=worker_lp, host=host_name,
               launch_s=launch, width=width)
    return out


def rl_performance(scn: Scenario, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                   network: Any = None, memory: Any = None) -> PerformanceEstimate:
    """Step time of one RL step: per-phase seconds in `breakdown` (rl_*) and `details['phases_s']`,
    the bounding phase in `details['bound_by']`."""
    from .calibration import packaged
    from .posttrain import forward_seconds_per_token
    from .speed import _network, forward_only_time, train_performance
    P = params if params is not None else packaged()
    net = network if network is not None else _network(scn, gpu)
    rl = scn.train.rl
    # packed sequences: the passes compute on the generated tokens, not on every sequence padded to the maximum
    train = packed_training_scenario(scn) if rl.packing or rl.dynamic_batching else training_scenario(scn)
    base = train_performance(train, model, gpu, params=P, network=net)
    k = optimizer_steps(scn)            # the pass is k optimizer steps of the mini-batch
    # the tokens trained on: what was generated when packed (a pipeline's pack padding is not counted), else
    # every sequence padded to the maximum
    tokens = (sequences_per_step(scn) * (rl.prompt_len + response_len(scn)) if rl.packing or rl.dynamic_batching
              else base.details["tokens_per_step"] * k)
    lp_scn = logprob_scenario(scn)
    lp = forward_only_time(lp_scn, model, gpu, network=net, params=P)
    # the trainer's own log-prob block beyond gpuplan's cross-entropy (rl.logprob_impl), per data-parallel rank:
    # beyond what the pass already charges for its loss, the eager upcast cross entropy's 36 bytes a logit on an eager
    # hf / torchtitan stack (speed._elementwise_time), else efficiency.json's loss_bytes_per_logit
    charged = loss_bytes_charged(train, P)
    # packed: the pack's sequences (packed_training_scenario: micro_batch sequences of the pack) each get a loss call
    train_block = k * logprob_block_extra(rl.logprob_impl, train, model, gpu, P,
                                          base.details["tokens_per_step"] / train.dp, True, charged,
                                          train.train.micro_batch if rl.packing else 0.0)
    lp_block = logprob_block_extra(rl.logprob_impl, lp_scn, model, gpu, P, lp["tokens"] / lp_scn.dp, False,
                                   charged * lp["forward_share"])
    capacity = int(getattr(gpu, "usable_memory_bytes", 0) or 0)
    roll = rollout_time(scn, model, gpu, P, net, capacity)
    # the framework's own host work around the passes (rl.host_loop; estimate/nemo_rl_host.py)
    host = host_loop_seconds(scn, train, lp_scn, gpu, P, k, roll.get("longest"))
    lp_time = lp["time"] + lp_block + host["per_logprob_pass"]
    phases: dict[str, float | None] = {"rollout": roll["time"]}
    if rl.old_logprob_pass:
        phases["actor_logprob"] = lp_time
    if rl.reference:
        phases["reference_logprob"] = lp_time
    if rl.reward_model:
        phases["reward"] = forward_seconds_per_token(base, train, model, reward_model_spec(scn)) * tokens
    elif rl.rule_reward_s:   # a rule-based reward scored on the host after the rollout (rule_reward_time)
        phases["rule_reward"] = rule_reward_time(scn)
    if _critic(scn):       # a value head: no vocabulary-wide log-prob block
        phases["critic_values"] = lp["time"]
        phases["critic_update"] = k * base.step_time_s
    phases["actor_update"] = k * base.step_time_s + train_block + host["actor_update"]
    phases["weight_sync"] = weight_sync_time(scn, model, gpu, P, net)
    if rl.placement == "colocated" and rl.offload_train_states:
        phases["state_offload"], phases["state_onload"] = offload_time(scn, model, capacity, gpu)
    if rl.placement == "colocated" and rl.engine_sleep_level == 1:
        phases["engine_sleep"] = phases["engine_wake"] = engine_sleep_time(scn, model, capacity, gpu)
    if rl.placement == "colocated" and rl.engine_vllm_v0:
        phases["engine_reload"] = sum(engine_reload_time(scn, model, capacity, gpu, P).values())
    if rl.reference and rl.reference_on_host and scn.train.method == "full":
        phases["reference_swap"] = reference_swap_time(scn, model, gpu)
    # the rule-based reward belongs to the rollout side: the driver scores each rollout before it is trained on
    train_side = sum(v for k, v in phases.items() if k not in ("rollout", "rule_reward", "weight_sync"))
    step: float | None
    if not roll["fits"]:              # no rollout, so no step (rollout_time says why)
        step, bound = None, "rollout"
        how = "the rollout cannot run: no step time"
    elif rl.placement == "split" and rl.async_steps >= 1:
        roll_side = phases["rollout"] + phases.get("rule_reward", 0.0)
        step = max(roll_side, train_side) + phases["weight_sync"]
        bound = "rollout" if roll_side >= train_side else "training side"
        how = (f"split, rollouts {rl.async_steps} step(s) ahead: step = max(rollout, training side "
               f"{train_side:.3g} s) + weight sync")
    else:
        step = sum(phases.values())
        bound = max(phases, key=phases.get)
        how = ("colocated: the phases take turns on every GPU, step = their sum" if rl.placement == "colocated"
               else "split, synchronous: the rollout and training GPUs take turns, step = the sum")
    n = scn.hardware.count
    generated = sequences_per_step(scn) * response_len(scn)
    head = (f"{scn.train.objective} step: {sequences_per_step(scn)} responses ({rl.prompts_per_step} prompts x "
            f"group {rl.group_size}); rollout on {roll.get('replicas')} {rl.engine} replica(s) of tp={rl.rollout_tp}")
    if roll["fits"]:
        head += (f", up to {roll.get('batch')} sequences at once per replica (vLLM-style continuous batching, "
                 f"simulated); the step waits for the longest response, {roll.get('longest')} tokens "
                 f"({roll.get('preemptions', 0)} preemption(s))")
    notes = [head, how + f"; bounded by {bound}",
             "per-phase seconds: " + ", ".join(f"{k} {'-' if v is None else format(v, '.3g')}"
                                               for k, v in phases.items())]
    if not roll["fits"]:
        notes.append(f"{roll['why']}: raise rl.gpu_memory_utilization or rl.rollout_tp, or shorten "
                     "rl.max_new_tokens")
    bd = {f"rl_{k}": float(v) for k, v in phases.items() if v is not None}
    details = dict(base.details)
    details.update({"objective": scn.train.objective, "placement": rl.placement, "tokens_per_step": tokens,
                    "optimizer_steps": k,
                    "sequences_per_step": sequences_per_step(scn), "rollout_batch_per_replica": roll.get("batch"),
                    "rollout_waves": roll.get("waves"), "rollout_replicas": roll.get("replicas"),
                    "rollout_gpus": gpu_groups(scn)[0], "training_gpus": gpu_groups(scn)[1],
                    "generated_tokens_per_step": generated, "bound_by": bound,
                    "logprob_block_s": {"logprob_impl": rl.logprob_impl, "actor_update": train_block,
                                        "per_logprob_pass": lp_block},
                    "host_loop_s": host,
                    "phases_s": {k: None if v is None else float(v) for k, v in phases.items()}})
    # MFU over the whole step: the training and log-prob FLOPs the trainer does (rollout FLOPs excluded)
    # (a pipeline's pack padding is computed, not counted: the training tokens over the pass's tokens)
    useful = tokens / (base.details["tokens_per_step"] * k)
    mfu = (base.mfu * useful * k * base.step_time_s / step * (train.hardware.count / n)
           if base.mfu and step else None)
    return PerformanceEstimate(step_time_s=step, tokens_per_s_per_gpu=tokens / step / n if step else None,
                               mfu=mfu, hfu=None, time_to_train_s=None, breakdown=bd, notes=tuple(notes),
                               details=details)

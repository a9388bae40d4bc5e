"""Post-training objectives (issue 20): preference, distillation, reward, RL.

Expected numbers are hand arithmetic on published parameter counts (the safetensors totals on the
models' Hugging Face pages): Llama 3.1 8B 8,030,261,248; Llama 3.1 70B 70,553,706,496; Qwen2.5 7B
7,615,616,512; Llama 3.1's untied lm_head 128,256 x 4,096 = 525,336,576.
"""
from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.pipeline import evaluate
from gpuplan.scenario import scenario_from_dict

LLAMA_8B = 8_030_261_248
LLAMA_70B = 70_553_706_496
QWEN_7B = 7_615_616_512
LLAMA_HEAD = 128_256 * 4_096


def _pref(objective: str, *, method: str = "full", gpus: int = 8, zero: int = 3, mb: int = 1, gb: int = 64,
          model: str = "llama-3.1-8b", **train):
    return {"model": model, "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": gpus},
            "parallel": {"zero": zero},
            "train": {"objective": objective, "method": method, "seq_len": 2048, "micro_batch": mb,
                      "global_batch": gb, "recompute": "full", **train}}


def _rl(**rl):
    base = {"prompts_per_step": 64, "group_size": 8, "prompt_len": 512, "max_new_tokens": 1024,
            "mean_response_len": 600}
    base.update(rl)
    return {"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": {"zero": 3},
            "train": {"objective": "grpo", "micro_batch": 4, "recompute": "full", "rl": base}}


# ---- preference objectives ---------------------------------------------------------------------------------
def test_dpo_full_reference_is_params_times_weight_bytes_sharded():
    """DPO holds a frozen copy stored like the policy's parameters (TRL loads it with the policy's
    model_init_kwargs): fp32 under HF/FSDP master weights; ORPO (same 2x policy pass) holds none. Under FSDP
    over 8 GPUs the copy is sharded: 8,030,261,248 x 4 / 8 = 4,015,130,624 bytes per GPU; without master
    weights 2 bytes: 2,007,565,312."""
    dpo = evaluate(_pref("dpo")).memory
    orpo = evaluate(_pref("orpo")).memory
    assert abs((_held(dpo, "optimizer_step") - _held(orpo, "optimizer_step")) - 4_015_130_624) <= 1
    dpo = evaluate(_pref("dpo", master_weights=False)).memory
    orpo = evaluate(_pref("orpo", master_weights=False)).memory
    assert abs((_held(dpo, "optimizer_step") - _held(orpo, "optimizer_step")) - 2_007_565_312) <= 1
    assert any("reference copy" in n for n in dpo.notes)


def _held(mem, phase: str) -> int:
    """A phase's allocated bytes (its peak less the plan's runtime overhead, which every phase shares)."""
    return mem.phases[phase] - mem.components["runtime_overhead"]


def test_dpo_full_reference_unsharded_on_one_gpu():
    dpo = evaluate(_pref("dpo", gpus=1, zero=0, gb=2)).memory
    orpo = evaluate(_pref("orpo", gpus=1, zero=0, gb=2)).memory
    assert abs((_held(dpo, "optimizer_step") - _held(orpo, "optimizer_step")) - LLAMA_8B * 4) <= 1   # fp32 copy


def test_reference_forward_and_metrics_phases_by_hand():
    """Logit unit u = 4,096 tokens (2 x 2,048) x 128,256 = 525,336,576 elements; TRL's logits are fp32.
    backward: 16 B per logit (the logits + three fp32 gradient buffers of selective_log_softmax's fp32 branch).
    reference_forward: the policy's fp32 logits (4 B) + the reference's bf16 logits and their fp32 copy
    (6 B) + one layer's working set, 4,096 x (4 h + 3 i) x 2 B = 486,539,264 (h 4,096, i 14,336):
    (4 + 6 - 16) u + 486,539,264 = -2,665,480,192 against backward.
    loss_metrics: policy and reference fp32 logits (4 + 4) u, the entropy's flattening copy of the
    2 x 2,047 shifted rows, 4 x 4,094 x 128,256 = 2,100,322,304, and three 128-row fp32 chunks
    (3 x 128 x 128,256 x 4 = 197,001,216): 8 u + 2,100,322,304 + 197,001,216 - 16 u = -1,905,371,136."""
    dpo = evaluate(_pref("dpo")).memory
    assert abs(dpo.phases["reference_forward"] - dpo.phases["backward"] + 2_665_480_192) <= 2
    assert abs(dpo.phases["loss_metrics"] - dpo.phases["backward"] + 1_905_371_136) <= 2


def test_dpo_lora_adds_no_reference_copy():
    dpo = evaluate(_pref("dpo", method="lora", gpus=1, zero=0, gb=8)).memory
    orpo = evaluate(_pref("orpo", method="lora", gpus=1, zero=0, gb=8)).memory
    assert dpo.components["weights"] == orpo.components["weights"]
    assert "reference_forward" in dpo.phases and "reference_forward" not in orpo.phases


def test_precomputed_reference_holds_nothing():
    pre = evaluate(_pref("dpo", reference="precomputed")).memory
    orpo = evaluate(_pref("orpo")).memory
    same = ("weights", "gradients", "optimizer_states", "activations", "temporary")
    assert {k: pre.components[k] for k in same} == {k: orpo.components[k] for k in same}
    assert "reference_forward" not in pre.phases


@pytest.mark.parametrize("objective", ["dpo", "ipo", "orpo", "simpo", "reward"])
def test_paired_objectives_double_the_tokens(objective):
    """64 pairs x 2 sequences x 2,048 tokens = 262,144 policy tokens per step (SFT: 131,072)."""
    perf = evaluate(_pref(objective)).performance
    assert perf.details["tokens_per_step"] == 262_144
    assert evaluate(_pref("sft")).performance.details["tokens_per_step"] == 131_072


def test_kto_is_unpaired_but_runs_kl_and_reference_forwards():
    """TRL KTO: one completion per example with gradients; a no-grad KL pass of the policy and the
    reference over the batch and the KL batch (2 sequences)."""
    perf = evaluate(_pref("kto")).performance
    assert perf.details["tokens_per_step"] == 131_072
    ph = perf.details["phases_s"]
    assert ph["reference_forward"] == pytest.approx(2 * ph["policy_kl_forward"], rel=1e-12)


def test_dpo_policy_pass_is_the_sft_step_of_twice_the_sequences():
    dpo = evaluate(_pref("dpo"))
    sft2 = evaluate(_pref("sft", mb=2, gb=128))
    assert dpo.memory.components["activations"] == sft2.memory.components["activations"]
    assert dpo.performance.details["phases_s"]["policy_pass"] == pytest.approx(sft2.performance.step_time_s, rel=1e-12)


def test_reference_forward_costs_a_third_of_a_non_recomputed_step():
    """Without recompute the full fine-tuning step is 3 forwards of FLOPs (6N + 3A); the reference's
    no-grad forward over the same tokens is 1: a third of the compute time."""
    est = evaluate(_pref("dpo", recompute="none", gb=8, mb=1))
    ph = est.performance.details["phases_s"]
    compute = est.performance.breakdown["compute"]
    assert ph["reference_forward"] == pytest.approx(compute / 3, rel=1e-9)


def test_reward_model_has_no_vocabulary_logits_and_no_lm_head_gradients():
    """Full fine-tuning with torch AMP keeps fp32 gradients (4 B); the score head replaces the
    untied 525,336,576-parameter lm_head: 2,101,346,304 bytes fewer gradients."""
    rew = evaluate(_pref("reward", gpus=1, zero=0, gb=2)).memory
    orpo = evaluate(_pref("orpo", gpus=1, zero=0, gb=2)).memory
    assert rew.components["logits"] == 0
    # optimizer step: fp32 weights (4 B), gradients (4 B), AdamW states (8 B) and the foreach
    # temporary (4 B) per parameter: 20 B x the lm_head's parameters
    assert abs((_held(orpo, "optimizer_step") - _held(rew, "optimizer_step")) - LLAMA_HEAD * 20) <= 4


def test_distill_holds_the_teacher_sharded():
    """Llama 3.1 70B teacher, bf16, sharded over 8 GPUs: 70,553,706,496 x 2 / 8 = 17,638,426,624 bytes."""
    dist = evaluate(_pref("distill", teacher="llama-3.1-70b")).memory
    sft = evaluate(_pref("sft")).memory
    assert abs((_held(dist, "optimizer_step") - _held(sft, "optimizer_step")) - 17_638_426_624) <= 1
    # the teacher's logits and log-probs: 2,048 tokens x 128,256 x (2 + 2) bytes on top of the student's
    assert dist.phase == sft.phase == "backward"
    assert abs((dist.components["logits"] - sft.components["logits"]) - 2048 * 128_256 * 4) <= 1


# ---- RL --------------------------------------------------------------------------------------------------------
def test_grpo_rollout_batch_is_prompts_times_group():
    colo = evaluate(_rl()).performance.details
    split = evaluate(_rl(placement="split", rollout_gpus=4)).performance.details
    assert colo["sequences_per_step"] == split["sequences_per_step"] == 64 * 8
    assert colo["rollout_replicas"] == 8 and colo["rollout_batch_per_replica"] == 64
    assert split["rollout_replicas"] == 4 and split["rollout_batch_per_replica"] == 128
    # the training pass: 512 sequences of 512 + 1024 tokens
    assert colo["tokens_per_step"] == 512 * 1536
    assert (colo["training_gpus"], split["training_gpus"], split["rollout_gpus"]) == (8, 4, 4)


def test_colocated_step_is_the_sum_of_its_phases_split_async_the_max():
    colo = evaluate(_rl()).performance
    ph = colo.details["phases_s"]
    assert colo.step_time_s == pytest.approx(sum(ph.values()), rel=1e-12)
    split = evaluate(_rl(placement="split", rollout_gpus=4, async_steps=1)).performance
    ph = split.details["phases_s"]
    train_side = sum(v for k, v in ph.items() if k not in ("rollout", "weight_sync"))
    assert split.step_time_s == pytest.approx(max(ph["rollout"], train_side) + ph["weight_sync"], rel=1e-12)
    sync = evaluate(_rl(placement="split", rollout_gpus=4)).performance
    assert sync.step_time_s == pytest.approx(sum(sync.details["phases_s"].values()), rel=1e-12)


def test_packed_passes_compute_on_the_generated_tokens():
    """rl.packing (NeMo RL sequence_packing): 512 sequences of 512 + 600 tokens = 569,344 tokens per step,
    not 512 x 1,536 = 786,432. With every response at the cap (mean 1,024) the packs are hand arithmetic: a pack
    of micro_batch x max tokens = 4 x 1,536 = 6,144 holds four 1,536-token sequences (each a 'small' item,
    6,144 / 6 < 1,536 <= 6,144 / 3, so first-fit-decreasing packs them four to a bin): 128 bins, 16 per rank
    of 8, each of 4 sequences. Memory keeps the padded micro-batch (a full pack holds as many tokens)."""
    padded, packed = evaluate(_rl()), evaluate(_rl(packing=True))
    assert packed.performance.details["tokens_per_step"] == 512 * (512 + 600)
    assert padded.performance.details["tokens_per_step"] == 512 * 1536
    from gpuplan.estimate.rl import packed_training_scenario
    t = packed_training_scenario(scenario_from_dict(_rl(packing=True, mean_response_len=1024), "t")).train
    assert (t.seq_len, t.micro_batch, t.global_batch) == (1536, 4, 512)
    ph_pad, ph_pack = padded.performance.details["phases_s"], packed.performance.details["phases_s"]
    assert ph_pack["actor_update"] < ph_pad["actor_update"] and ph_pack["rollout"] == ph_pad["rollout"]
    assert packed.memory.peak_bytes_per_gpu == padded.memory.peak_bytes_per_gpu


def test_packer_is_modified_first_fit_decreasing():
    """NeMo RL's packer (Johnson & Garey's MFFD), by hand. Capacity 24: large > 12, medium (8, 12], small (4, 8],
    tiny <= 4. Lengths [13, 8, 6, 5, 3]: 13 opens a bin (room 11); no medium; the bin takes the shortest small
    (5) and the longest small that fits beside it (6, not 8: 5 + 8 > 11); 8 and 3 go to a new bin. Plain
    first-fit-decreasing would give [13, 8, 3], [6, 5]. Capacity 10, [7, 5, 4, 3, 2, 2, 6]: 7 and 6 open bins;
    the 6-bin (room 4) takes the medium 4 (5 does not fit); 2 + 2 > 3 leaves the 7-bin to the greedy pass, which
    gives it 3; 5, 2, 2 share a new bin."""
    from gpuplan.estimate.rl import _mffd
    assert _mffd([13, 8, 6, 5, 3], 24) == [[0, 3, 2], [1, 4]]
    assert _mffd([7, 5, 4, 3, 2, 2, 6], 10) == [[0, 3], [6, 2], [1, 4, 5]]


def test_bins_are_evened_over_the_ranks_and_the_slowest_rank_bounds_the_pass():
    """NeMo RL @06beed91 makes the bin count a multiple of the ranks: 3 bins over 2 ranks need a fourth, which
    takes the last sequence of the bin with the most sequences ([1, 4, 5] gives up 5). Dealt in turn, rank 0
    holds bins [7, 3] and [5, 2] (17 tokens, 4 sequences), rank 1 [6, 4] and [2] (12): without a pipeline the
    pass lasts rank 0's 17 tokens in 2 packs; with one, every pack is padded to its rank's longest (10), so both
    ranks compute 2 x 10 = 20."""
    from gpuplan.estimate.rl import _even_bins, _mffd, slowest_rank
    lengths = [7, 5, 4, 3, 2, 2, 6]
    assert _even_bins(_mffd(lengths, 10), 2) == [[0, 3], [6, 2], [1, 4], [5]]
    assert slowest_rank(lengths, 10, 2) == {"bins": 2, "tokens": 17.0, "sequences": 4.0}
    assert slowest_rank(lengths, 10, 2, pipeline=True)["tokens"] == 20.0


def test_mini_batches_are_separate_optimizer_steps():
    """512 sequences in mini-batches of 128 are 4 optimizer steps (100: ceil(512 / 100) = 6; 1,000: one step of
    all 512); the tokens trained are the same 512 x 1,536, and each step pays its own fill, sync and update."""
    one = evaluate(_rl()).performance.details
    four = evaluate(_rl(mini_batch=128)).performance.details
    assert (one["optimizer_steps"], four["optimizer_steps"]) == (1, 4)
    assert evaluate(_rl(mini_batch=100)).performance.details["optimizer_steps"] == 6
    assert evaluate(_rl(mini_batch=1000)).performance.details["optimizer_steps"] == 1
    assert one["tokens_per_step"] == four["tokens_per_step"] == 512 * 1536
    assert four["phases_s"]["actor_update"] > one["phases_s"]["actor_update"]


def test_grpo_reference_and_old_logprob_passes_are_optional():
    full = evaluate(_rl()).performance.details["phases_s"]
    bare = evaluate(_rl(reference=False, old_logprob_pass=False)).performance.details["phases_s"]
    assert "reference_logprob" in full and "actor_logprob" in full
    assert "reference_logprob" not in bare and "actor_logprob" not in bare
    assert full["actor_update"] == bare["actor_update"]


def test_rule_based_reward_is_the_largest_worker_chunk_times_the_rate():
    """A rule-based reward with a stated rate (rl.rule_reward_s): NeMo RL's math environment cuts the responses into
    num_workers contiguous chunks and each worker scores its chunk serially, so 64 prompts x 8 = 512 responses over
    the default 8 workers take 64 x 0.015 s = 0.96 s; over 5 workers ceil(512 / 5) = 103 x 0.015 = 1.545 s. The
    colocated step (phases one after the other) grows by exactly that; no rate: no phase. With a reward model
    the model's forward is the reward (no rule-based phase)."""
    bare = evaluate(_rl()).performance
    ph = evaluate(_rl(rule_reward_s=0.015)).performance
    assert "rule_reward" not in bare.details["phases_s"]
    assert ph.details["phases_s"]["rule_reward"] == pytest.approx(0.96)
    assert ph.step_time_s - bare.step_time_s == pytest.approx(0.96)
    five = evaluate(_rl(rule_reward_s=0.015, rule_reward_workers=5)).performance
    assert five.details["phases_s"]["rule_reward"] == pytest.approx(1.545)
    rm = evaluate(_rl(rule_reward_s=0.015, reward_model="qwen2.5-7b")).performance.details["phases_s"]
    assert "rule_reward" not in rm and "reward" in rm


def test_rule_based_reward_is_on_the_rollout_side_of_a_split_step():
    """Split, one step ahead: the step is max(rollout + reward scoring, training side) + weight sync; the
    scoring never counts on the training side."""
    split = {"placement": "split", "rollout_gpus": 4, "async_steps": 1}
    ph = evaluate(_rl(rule_reward_s=0.015, **split)).performance
    p = ph.details["phases_s"]
    train_side = sum(v for k, v in p.items() if k not in ("rollout", "rule_reward", "weight_sync"))
    assert ph.step_time_s == pytest.approx(max(p["rollout"] + p["rule_reward"], train_side) + p["weight_sync"])


def test_ppo_adds_critic_phases():
    ph = evaluate({**_rl(), "train": {**_rl()["train"], "objective": "ppo"}}).performance.details["phases_s"]
    assert ph["critic_update"] == ph["actor_update"] and ph["critic_values"] > 0


def test_colocated_rollout_holds_engine_and_trainer_states():
    """Colocated, the rollout phase holds the engine's reservation (0.5 of the GPU) beside the trainer's
    resident states; offloading them frees the fp32 weights (4 B) and AdamW states (8 B) per parameter,
    sharded over 8 GPUs: 7,615,616,512 x 4 / 8 = 3,807,808,256 and x 8 / 8 = 7,615,616,512 bytes."""
    est = evaluate(_rl())
    mem = est.memory
    assert mem.phase == "rollout"
    assert mem.phases["rollout"] > 0.5 * est.gpu.usable_memory_bytes
    off = evaluate(_rl(offload_train_states=True)).memory
    assert off.phase == "rollout"
    assert abs((mem.components["weights"] - off.components["weights"]) - 3_807_808_256) <= 1
    assert abs((mem.components["optimizer_states"] - off.components["optimizer_states"]) - 7_615_616_512) <= 1
    assert mem.components["kv_cache"] == off.components["kv_cache"] > 0


def test_colocated_offload_moves_the_states_out_and_back_over_pcie():
    """With offload_train_states the trainer's fp32 weights and AdamW states (3,807,808,256 + 7,615,616,512
    bytes, above) leave before the rollout (state_offload) and return before training (state_onload): 11,423,424,768
    bytes each way over the H100 SXM's PCIe 5.0 x16 host link (16 lanes x 4 GB/s = 64 GB/s) = 0.178491 s; the step
    pays both; without offload no such phase."""
    est = evaluate(_rl(offload_train_states=True)).performance
    ph = est.details["phases_s"]
    assert ph["state_offload"] == pytest.approx(11_423_424_768 / 64e9, rel=1e-6)
    assert ph["state_onload"] == pytest.approx(11_423_424_768 / 64e9, rel=1e-6)
    assert est.step_time_s == pytest.approx(sum(ph.values()), rel=1e-9)
    plain = evaluate(_rl()).performance.details["phases_s"]
    assert "state_offload" not in plain and "state_onload" not in plain


def test_pageable_offload_prices_each_part_at_its_own_rate():
    """NeMo RL copies the optimizer states into fresh pageable memory (`v.to("cpu")`): with offload_pageable
    optimizer_states, the 7,615,616,512 B of AdamW states per GPU (above) go out at 1.8 GB/s (NeMo RL issue 3976's
    Nsight trace on an H100) and back at 16.1 GB/s, the 3,807,808,256 B of fp32 weights at the host link's 64 GB/s:
    out 3,807,808,256 / 64e9 + 7,615,616,512 / 1.8e9 = 0.059497 + 4.230898 = 4.290395 s, back 0.059497 + 0.473019 = 0.532516 s. With
    all (NeMo RL's DTensor worker, model.to("cpu")) every byte does: 11,423,424,768 / 1.8e9 = 6.346347 s out,
    / 16.1e9 = 0.709529 s back. The memory is the same either way."""
    opt = evaluate(_rl(offload_train_states=True, offload_pageable="optimizer_states"))
    ph = opt.performance.details["phases_s"]
    assert ph["state_offload"] == pytest.approx(4.290395, rel=1e-6)
    assert ph["state_onload"] == pytest.approx(0.532516, rel=1e-5)
    assert opt.performance.step_time_s == pytest.approx(sum(ph.values()), rel=1e-9)
    every = evaluate(_rl(offload_train_states=True, offload_pageable="all")).performance.details["phases_s"]
    assert every["state_offload"] == pytest.approx(6.346347, rel=1e-6)
    assert every["state_onload"] == pytest.approx(0.709529, rel=1e-5)
    assert opt.memory.peak_bytes_per_gpu == evaluate(_rl(offload_train_states=True)).memory.peak_bytes_per_gpu


def test_pageable_offload_needs_an_offload():
    with pytest.raises(InputError) as err:
        scenario_from_dict(_rl(offload_pageable="optimizer_states"), "t")
    assert "offload_pageable" in str(err.value) and "offload_train_states" in str(err.value)


def test_reference_on_host_is_swapped_not_held():
    """NeMo RL keeps the reference in host memory and swaps it into the policy's parameters for its pass: the
    GPU holds no reference copy (7,615,616,512 x 2 B / 8 ranks = 1,903,904,128 B less) and the step pays three
    copies of that shard over PCIe 5.0 x16 (64 GB/s): 3 x 1,903,904,128 / 64e9 = 0.0892455 s. The offload phase
    does not move the reference (it stays on the host)."""
    held, host = evaluate(_rl()), evaluate(_rl(reference_on_host=True))
    assert held.memory.phase == host.memory.phase == "rollout"
    assert abs(held.memory.components["weights"] - host.memory.components["weights"] - 1_903_904_128) <= 1
    ph = host.performance.details["phases_s"]
    assert ph["reference_swap"] == pytest.approx(3 * 1_903_904_128 / 64e9, rel=1e-6)
    assert "reference_swap" not in held.performance.details["phases_s"]
    both = evaluate(_rl(reference_on_host=True, offload_train_states=True)).performance.details["phases_s"]
    assert both["state_offload"] == pytest.approx(11_423_424_768 / 64e9, rel=1e-6)


def test_lora_grpo_has_no_reference_copy():
    base = _rl()
    lora = {**base, "train": {**base["train"], "method": "lora"}}
    mem = evaluate(lora).memory
    assert not any("reference (" in n for n in mem.notes)


# ---- validation ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("train, words", [
    ({"objective": "grpo", "rl": {"group_size": 1}}, "at least 2"),
    ({"objective": "distill"}, "needs train.teacher"),
    ({"objective": "dpo", "teacher": "llama-3.1-70b"}, "teacher is used only"),
    ({"objective": "orpo", "reference": "copy"}, "ORPO has no reference"),
    ({"objective": "simpo", "reference": "precomputed"}, "SimPO has no reference"),
    ({"objective": "dpo", "reference": "none"}, "precomputed"),
    ({"objective": "dpo", "reference": "base", "method": "full"}, "adapters disabled"),
    ({"objective": "dpo", "rl": {}}, "rl settings apply"),
    ({"objective": "grpo", "rl": {"placement": "split"}}, "rollout_gpus"),
    ({"objective": "grpo", "rl": {"placement": "split", "rollout_gpus": 8}}, "rollout_gpus"),
    ({"objective": "grpo", "rl": {"critic": True}}, "only ppo"),
    ({"objective": "grpo", "rl": {"async_steps": 1}}, "placement: split"),
    ({"objective": "grpo", "rl": {"rollout_tp": 3}}, "does not divide"),
    ({"objective": "grpo", "rl": {"max_new_tokens": 100, "mean_response_len": 200}}, "exceeds"),
])
def test_contradictions_are_clear_errors(train, words):
    with pytest.raises(InputError) as err:
        scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune",
                            "hardware": {"gpu": "h100-sxm", "count": 8}, "train": train})
    assert words in str(err.value)


def test_unknown_teacher_names_the_field():
    with pytest.raises(InputError) as err:
        evaluate(_pref("distill", teacher="llama-3.1-70bb"), allow_hub=False)
    assert "train.teacher" in str(err.value)


def test_sft_default_is_unchanged():
    a = evaluate(_pref("sft"))
    data = _pref("sft")
    del data["train"]["objective"]
    b = evaluate(data)
    assert a.memory.components == b.memory.components
    assert a.performance.step_time_s == b.performance.step_time_s


def test_teacher_with_another_vocabulary_is_refused():
    """TRL GKD raises when the vocabularies differ (Llama 3.1: 128,256 tokens; Qwen2.5: 152,064)."""
    with pytest.raises(InputError) as err:
        evaluate(_pref("distill", teacher="qwen2.5-7b"))
    assert "152,064" in str(err.value) and "128,256" in str(err.value)


def test_rl_sequence_past_the_context_is_noted():
    est = evaluate(_rl(prompts_per_step=2, group_size=2, prompt_len=120_000, max_new_tokens=20_000,
                       mean_response_len=10_000))
    assert any("exceeds qwen2.5-7b's context" in w for w in est.warnings)


def test_dpo_loss_block_is_four_fp32_logit_tensors():
    """TRL's DPO gets fp32 logits (accelerate AMP's convert_outputs_to_fp32) and takes selective_log_softmax's
    fp32 branch; its backward holds the logits, the stacked per-row gradients, gather's zero-filled gradient and
    the scatter_add: 4 x 4 B per logit, 2 x 2,048 tokens x 128,256 x 16 B = 8,405,385,216 bytes (traced,
    tests/test_trace_posttrain.py)."""
    pre = evaluate(_pref("dpo", reference="precomputed")).memory      # no reference logits beside it
    assert pre.phase == "backward"
    assert abs(pre.components["logits"] - 2 * 2048 * 128_256 * 16) <= 1
    # ORPO adds the NLL on the chosen half: its fp32 log-softmax, 4 B per logit on half the tokens (traced)
    assert abs(evaluate(_pref("orpo")).memory.components["logits"] - 2 * 2048 * 128_256 * 18) <= 1
    # KTO: one unpaired sequence per example, the same 16 B per logit
    kto = evaluate(_pref("kto", reference="precomputed")).memory
    assert abs(kto.components["logits"] - 2048 * 128_256 * 16) <= 1
    assert any("refuses per_device_train_batch_size 1" in n for n in kto.notes)
    assert not any("refuses" in n for n in evaluate(_pref("kto", mb=2, gb=64)).memory.notes)


@pytest.mark.parametrize("name, phases", [
    ("dpo-full-8b", ["policy_pass", "reference_forward", "logprob_block"]),
    ("dpo-lora-8b", ["policy_pass", "reference_forward", "logprob_block"]),
    ("grpo-7b-colocated", ["rollout", "actor_logprob", "reference_logprob", "actor_update", "weight_sync"]),
    ("grpo-7b-split", ["rollout", "actor_logprob", "reference_logprob", "actor_update", "weight_sync"]),
])
def test_examples_print_per_phase_memory_and_time(name, phases):
    from pathlib import Path

    from gpuplan.report import estimate_report
    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.yaml"
    est = evaluate(str(path))
    assert list(est.performance.details["phases_s"]) == phases
    text = estimate_report(est)
    assert "phase by phase" in text and "step bounded by" in text
    for ph in phases:
        assert ph in text


# ---- Megatron's gradient buffer dtype (train.grad_reduce_dtype) -------------------------------------------
def _megatron_sft(**train):
    return {"model": "llama-3.1-8b", "task": "finetune", "framework": "megatron",
            "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"zero": 1},
            "train": {"seq_len": 2048, "micro_batch": 1, "global_batch": 64, "recompute": "full", **train}}


@pytest.mark.parametrize("dtype, per_param", [("auto", 4), ("fp32", 4), ("bf16", 2)])
def test_megatron_gradient_buffer_follows_grad_reduce_dtype(dtype, per_param):
    """Megatron DDP (distributed_data_parallel.py) allocates the gradient buffer in fp32 when
    grad_reduce_in_fp32 is on, else in the parameters' dtype; the distributed optimizer (ZeRO-1) does not
    shard it: Llama 3.1 8B x 4 or x 2 bytes on every GPU."""
    mem = evaluate(_megatron_sft(grad_reduce_dtype=dtype)).memory
    assert mem.components["gradients"] == LLAMA_8B * per_param


def test_grad_reduce_dtype_leaves_weights_and_optimizer_alone():
    a = evaluate(_megatron_sft()).memory
    b = evaluate(_megatron_sft(grad_reduce_dtype="bf16")).memory
    assert a.components["weights"] == b.components["weights"] == LLAMA_8B * 2
    assert a.components["optimizer_states"] == b.components["optimizer_states"]
    assert a.components["gradients"] - b.components["gradients"] == LLAMA_8B * 2


@pytest.mark.parametrize("extra, words", [
    ({"framework": "hf"}, "framework: megatron"),
    ({"precision": "fp16"}, "grad_reduce_dtype: fp16"),
    ({"precision": "fp32"}, "fp32 parameters"),
])
def test_grad_reduce_dtype_contradictions_are_clear_errors(extra, words):
    _refused_megatron_field("grad_reduce_dtype", "bf16", extra, words)


def _refused_megatron_field(field, value, extra, words):
    """A Megatron SFT scenario with `field: value` and one contradicting change (`extra`: the framework, or a train
    field) is refused with an error naming the field and the contradiction."""
    data = _megatron_sft(**{field: value})
    if "framework" in extra:
        data["framework"] = extra["framework"]
    else:
        data["train"].update(extra)
    with pytest.raises(InputError) as err:
        scenario_from_dict(data, "t")
    assert field in str(err.value) and words in str(err.value)


def test_grad_reduce_dtype_unknown_value_names_the_field():
    with pytest.raises(InputError) as err:
        scenario_from_dict(_megatron_sft(grad_reduce_dtype="float32"), "t")
    assert "grad_reduce_dtype" in str(err.value) and "fp32" in str(err.value)


def test_master_weight_remainders_halve_the_master_copy():
    """Megatron's precision-aware optimizer with store_param_remainders keeps the 16 low bits of each fp32 master
    weight (the bf16 parameter holds the high 16): the distributed optimizer's states per GPU drop from 12 to 10
    bytes a parameter, 8,030,261,248 x 2 / 8 = 2,007,565,312 bytes less; weights and gradients unchanged. (NeMo RL
    issue 3976's offload moved 4.94 GB for Qwen2.5-0.5B's 494 M parameters: 10 bytes each.)"""
    a = evaluate(_megatron_sft()).memory
    b = evaluate(_megatron_sft(master_weight_remainders=True)).memory
    assert a.components["optimizer_states"] - b.components["optimizer_states"] == 2_007_565_312
    assert a.components["weights"] == b.components["weights"] and a.components["gradients"] == b.components["gradients"]


@pytest.mark.parametrize("extra, words", [({"framework": "hf"}, "framework is hf"),
                                          ({"precision": "fp32"}, "precision fp32")])
def test_master_weight_remainders_outside_megatron_bf16_is_a_clear_error(extra, words):
    _refused_megatron_field("master_weight_remainders", True, extra, words)


# ---- the rollout engine's sleep level (rl.engine_sleep_level) ----------------------------------------------
def test_engine_sleep_level_1_copies_the_engine_weights_out_and_back():
    """vLLM's level-1 sleep backs the weights up to pinned host memory and wake_up copies them back: Qwen2.5 7B's
    7,615,616,512 x 2 B = 15,231,233,024 B per GPU (rollout TP 1) each way over PCIe 5.0 x16 (64 GB/s) =
    0.237988 s per phase; the host holds the backup; the trainer's own offload (11,423,424,768 B, above) is
    unchanged; level 2 (the default) copies nothing."""
    est = evaluate(_rl(engine_sleep_level=1, offload_train_states=True))
    ph = est.performance.details["phases_s"]
    assert ph["engine_sleep"] == pytest.approx(15_231_233_024 / 64e9, rel=1e-6)
    assert ph["engine_wake"] == pytest.approx(15_231_233_024 / 64e9, rel=1e-6)
    assert ph["state_offload"] == pytest.approx(11_423_424_768 / 64e9, rel=1e-6)
    assert est.performance.step_time_s == pytest.approx(sum(ph.values()), rel=1e-9)
    base = evaluate(_rl(offload_train_states=True))
    assert "engine_sleep" not in base.performance.details["phases_s"]
    assert est.memory.cpu_bytes - base.memory.cpu_bytes == 15_231_233_024


def test_engine_sleep_level_is_for_colocated_placements():
    with pytest.raises(InputError) as err:
        scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
                            "train": {"objective": "grpo", "rl": {"placement": "split", "rollout_gpus": 4,
                                                                  "engine_sleep_level": 1}}}, "t")
    assert "engine_sleep_level" in str(err.value) and "colocated" in str(err.value)


# ---- RL rollout lengths, log-prob passes, pipeline packing (NeMo RL mechanisms) ----------------------------------
def test_response_lengths_uniform_at_half_the_cap_by_hand():
    """The truncated exponential with mean top / 2 is the uniform distribution: the mid-quantiles of 4 draws on
    [0, 1000] are 125, 375, 625, 875 (hand); no mean stated: every response runs to the cap."""
    from gpuplan.estimate.rl import response_lengths
    assert response_lengths(500, 1000, 4) == [125, 375, 625, 875]
    assert response_lengths(None, 1000, 3) == [1000, 1000, 1000]
    assert response_lengths(1200, 1000, 2) == [1000, 1000]


@pytest.mark.parametrize("mean", [200, 795, 3283])
def test_response_lengths_keep_the_mean_and_the_cap(mean):
    """Mid-quantiles of many draws average to the stated mean (within 0.5 %), none passes the cap, and the
    shape leans the way the mean says: below top / 2 the median is under the mean (a
    long tail), above it the median is over the mean (lengths pile up toward the cap)."""
    from statistics import median
    from gpuplan.estimate.rl import response_lengths
    top = 3964
    ls = response_lengths(mean, top, 8192)
    assert ls == sorted(ls) and max(ls) <= top and min(ls) >= 1
    assert sum(ls) / len(ls) == pytest.approx(mean, rel=0.005)
    if mean == 200:   # the cap is 20 means away: an exponential, whose top mid-quantile is mean x ln(2n) (hand:
        assert max(ls) == pytest.approx(200 * 9.704, abs=2)    # ln 16,384 = 9.704, 1,941 tokens)
    else:             # the cap is within reach: the longest of 8,192 responses is within 5 % of it
        assert max(ls) > 0.95 * top
    assert (median(ls) < mean) if mean < top / 2 else (median(ls) > mean)


def test_slowest_replica_gets_the_longest_response():
    """64 prompts x 8 = 512 responses over 8 rollout replicas: the slowest replica holds 64 of them, among them
    the longest of all, every 8th from the top."""
    from gpuplan.estimate.rl import replica_lengths, response_lengths
    scn = scenario_from_dict(_rl(), "t")
    all_ls = response_lengths(600, 1024, 512)
    mine = replica_lengths(scn, 8)
    assert len(mine) == 64 and max(mine) == max(all_ls)
    assert mine == sorted(all_ls[511::-8])


def test_rollout_waits_for_the_longest_response():
    """Offline generation (every request there at t = 0): 8 responses per replica of 512-token prompts fit one
    prefill iteration (4,096 tokens < vLLM's LLM-class budget of 16,384), which also samples each first token;
    the engine then runs until the longest response is done: as many iterations as the longest response's
    tokens. A longer cap with the same mean lengthens the rollout."""
    from gpuplan.estimate.calibration import packaged
    from gpuplan.estimate.rl import rollout_time
    from gpuplan.estimate.speed import _network
    from gpuplan.pipeline import resolve
    scn = scenario_from_dict(_rl(prompts_per_step=8), "t")
    r = resolve(scn)
    cap = int(r.gpu.usable_memory_bytes)
    out = rollout_time(scn, r.model, r.gpu, packaged(), _network(scn, r.gpu), cap)
    assert out["per_replica"] == 8 and out["preemptions"] == 0
    assert out["iterations"] == out["longest"]
    longer = scenario_from_dict(_rl(prompts_per_step=8, max_new_tokens=2048), "t")
    assert rollout_time(longer, r.model, r.gpu, packaged(), _network(longer, r.gpu), cap)["time"] > out["time"]


def test_in_process_engine_adds_the_output_side_per_decoded_token():
    """vLLM with its engine core in process (rl.engine_in_process, NeMo RL's synchronous worker): each step's output
    processing follows the engine step, so the rollout lasts longer by the output side's seconds per token times
    every token decoded after the prefill step (which samples each response's first token): 8 responses per
    replica, sum(len - 1) tokens, at vLLM PR 13923's 80.55 s / 1,205,048 tokens (H100 SXM's usual host, speed 1.0).
    With 8 sequences a step (0.5 ms of output work against a ~7 ms step) the separate-process ceiling never binds,
    so the difference is exactly that."""
    from gpuplan.estimate.calibration import packaged
    from gpuplan.estimate.rl import replica_lengths, rollout_time
    from gpuplan.estimate.speed import _network
    from gpuplan.pipeline import resolve
    mp = scenario_from_dict(_rl(prompts_per_step=8), "t")
    ip = scenario_from_dict(_rl(prompts_per_step=8, engine_in_process=True), "t")
    r = resolve(mp)
    cap = int(r.gpu.usable_memory_bytes)
    a = rollout_time(mp, r.model, r.gpu, packaged(), _network(mp, r.gpu), cap)
    b = rollout_time(ip, r.model, r.gpu, packaged(), _network(ip, r.gpu), cap)
    assert a["preemptions"] == b["preemptions"] == 0 and a["iterations"] == b["iterations"]
    decoded = sum(n - 1 for n in replica_lengths(mp, 8))
    assert b["time"] - a["time"] == pytest.approx(decoded * 80.55 / 1_205_048, rel=1e-6)


def test_in_process_engine_is_vllm_only():
    with pytest.raises(InputError, match="engine_in_process"):
        scenario_from_dict(_rl(engine="sglang", engine_in_process=True), "t")


def test_serial_output_adds_where_the_stream_ceiling_bounds():
    """load.cost: a separate output process bounds a step (max), an in-process one adds to it (sum)."""
    from gpuplan.estimate.load.cost import SerialOutput, StreamCeiling

    class Flat:
        frontend_s = 0.0

        def step(self, decodes, context, prefill_tokens, attention_s):
            return 0.010

        def decode_sum(self, decodes, context, k):
            return 0.010 * k

        def attention(self, tokens, offset):
            return 0.0
    assert StreamCeiling(Flat(), 50e-6).step(100, 0, 0, 0) == pytest.approx(0.010)
    assert StreamCeiling(Flat(), 50e-6).step(300, 0, 0, 0) == pytest.approx(0.015)
    assert SerialOutput(Flat(), 50e-6).step(100, 0, 0, 0) == pytest.approx(0.015)
    assert SerialOutput(Flat(), 50e-6).decode_sum(100, 0, 4) == pytest.approx(0.060)
    assert SerialOutput(Flat(), 50e-6).step(0, 0, 512, 0) == pytest.approx(0.010)


def test_forward_only_pass_is_a_third_of_the_compute_without_recompute():
    """One GPU, no model parallelism, no recompute: a forward is (2N + A) of the 3 (2N + A) FLOPs the training
    step executes, so the forward-only pass is exactly a third of the step's compute, with no pipeline fill."""
    from gpuplan.estimate.speed import forward_only_time, train_performance
    from gpuplan.pipeline import resolve
    scn = scenario_from_dict({"model": "qwen2.5-7b", "task": "finetune", "framework": "megatron",
                              "hardware": {"gpu": "h100-sxm", "count": 1},
                              "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, "recompute": "none"}}, "t")
    r = resolve(scn)
    fo = forward_only_time(scn, r.model, r.gpu)
    base = train_performance(scn, r.model, r.gpu)
    assert fo["bubble"] == 0 and fo["comm"] == 0 and fo["microbatches"] == 8
    assert fo["time"] == pytest.approx(base.breakdown["compute"] / 3, rel=1e-9)


def test_logprob_pass_uses_its_own_micro_batch():
    """rl.logprob_micro_batch (NeMo RL logprob_batch_size): the log-prob scenario covers all 512 sequences in
    micro-batches of that many padded sequences; packed with every response at the cap, a pack of 8 x 1,536 = 12,288
    tokens holds 8 sequences of 1,536 (each a 'tiny' item, <= 12,288 / 6): 64 packs, 8 per rank of 8."""
    from gpuplan.estimate.rl import logprob_scenario
    t = logprob_scenario(scenario_from_dict(_rl(logprob_micro_batch=8), "t")).train
    assert (t.micro_batch, t.global_batch, t.seq_len) == (8, 512, 1536)
    t = logprob_scenario(scenario_from_dict(_rl(logprob_micro_batch=8, packing=True, mean_response_len=1024),
                                            "t")).train
    assert (t.micro_batch, t.global_batch, t.seq_len) == (8, 512, 1536)
    t = logprob_scenario(scenario_from_dict(_rl(), "t")).train
    assert t.micro_batch == 4


def test_dynamic_batching_pads_each_micro_batch_to_its_longest():
    """NeMo RL dynamic batching, by hand: [100, 150, 300, 310, 900, 1,000, 1,900, 2,000] sorted and strided over 2
    ranks; positions' longest 150, 310, 1,000, 2,000, rounded up to 64: 192, 320, 1,024, 2,048 (capped at the
    batch's width, 2,000). With a 2,048-token budget: 2 x 320 = 640 fits, 3 x 1,024 does not, 2 x 2,000 does not:
    micro-batches [2 of 320], [1 of 1,024], [1 of 2,000]: 3,664 tokens a rank, whose sequences hold 3,200 and 3,460."""
    from gpuplan.estimate.rl import _dynamic_micro_batches
    ls = [100, 150, 300, 310, 900, 1000, 1900, 2000]
    assert _dynamic_micro_batches(ls, 2048, 2, 2000) == [[2, 320], [1, 1024], [1, 2000]]


def test_packing_and_dynamic_batching_are_exclusive():
    with pytest.raises(InputError, match="dynamic_batching"):
        scenario_from_dict(_rl(packing=True, dynamic_batching=True), "t")


def test_dynamic_batching_trains_on_the_generated_tokens_in_padded_micro_batches():
    """Every response at the cap: 1,536-token sequences, 64 a rank, four to a 6,144-token micro-batch (positions'
    longest 1,536 rounds to 1,536), 16 micro-batches of 4 x 1,536: the same shape as packing."""
    from gpuplan.estimate.rl import packed_training_scenario
    t = packed_training_scenario(scenario_from_dict(_rl(dynamic_batching=True, mean_response_len=1024), "t")).train
    assert (t.seq_len, t.micro_batch, t.global_batch) == (1536, 4, 512)
    d = evaluate(_rl(dynamic_batching=True)).performance.details
    assert d["tokens_per_step"] == 512 * (512 + 600)


def test_pipeline_packs_are_padded_to_the_longest_pack():
    """With pipeline parallelism NeMo RL pads every pack to its rank's longest (pad_full_seq_to). Hand: every
    response at the cap, 8 GPUs at pp 2 are 4 data-parallel ranks; 512 sequences of 1,536 tokens pack four to a
    6,144-token bin (as without a pipeline): 128 bins, 32 per rank, all full, so the padding adds nothing and
    each rank runs 32 micro-batches of 4 x 1,536: a global batch of 32 x 4 x 4 = 512."""
    from gpuplan.estimate.rl import packed_training_scenario
    d = _rl(packing=True, mean_response_len=1024)
    d["parallel"] = {"zero": 1, "pp": 2}
    d["framework"] = "megatron"
    t = packed_training_scenario(scenario_from_dict(d, "t")).train
    assert (t.micro_batch, t.seq_len, t.global_batch) == (4, 1536, 512)


def test_colocated_refit_assembles_the_whole_model_on_every_gpu():
    """NeMo RL's refit (refit_utils.gather_params) gives every GPU the whole 16-bit model: with data parallelism
    only each GPU already holds it (no traffic); at pp 2 on one node each parameter is broadcast over the
    pipeline group: 7,615,616,512 x 2 bytes over the NVLink group's effective rate, plus one latency step."""
    from gpuplan.estimate.comm import group_link
    from gpuplan.estimate.calibration import packaged
    dp_only = _rl()
    dp_only["parallel"] = {"zero": 1}
    assert evaluate(dp_only).performance.details["phases_s"]["weight_sync"] == 0
    pp2 = _rl()
    pp2["parallel"] = {"zero": 1, "pp": 2}
    est = evaluate(pp2)
    link = group_link(est.gpu, 2, 8, 8, None, packaged()["comm"])
    assert est.performance.details["phases_s"]["weight_sync"] == pytest.approx(
        QWEN_7B * 2 / link.effective_bytes_per_s + link.latency_s, rel=1e-9)


def test_fully_sharded_refit_gathers_the_stored_fp32_parameters():
    """NeMo RL's DTensor worker gathers each FSDP2 shard with full_tensor() in its stored fp32 and casts to bf16
    after: under ZeRO-3 on one node of 8 (torch AMP: fp32 parameters) every GPU receives 7/8 of 7,615,616,512 x 4
    bytes over NVLink, plus seven latency steps: twice the 16-bit gather's bytes."""
    from gpuplan.estimate.comm import group_link
    from gpuplan.estimate.calibration import packaged
    est = evaluate(_rl())
    link = group_link(est.gpu, 8, 8, 8, None, packaged()["comm"])
    assert est.performance.details["phases_s"]["weight_sync"] == pytest.approx(
        QWEN_7B * 4 * 7 / 8 / link.effective_bytes_per_s + 7 * link.latency_s, rel=1e-9)


def test_split_refit_broadcasts_the_whole_model_from_one_training_gpu():
    """Split placement (NeMo RL broadcast_weights_for_collective): training rank 0 broadcasts every 16-bit tensor
    to the rollout GPUs, each of which receives the whole model: 7,615,616,512 x 2 bytes through the link between
    two GPUs of the node (data parallelism only on the training side: nothing to gather first)."""
    from gpuplan.estimate.comm import group_link
    from gpuplan.estimate.calibration import packaged
    d = _rl(placement="split", rollout_gpus=4)
    d["parallel"] = {"zero": 1}
    est = evaluate(d)
    link = group_link(est.gpu, 2, 8, 8, None, packaged()["comm"])
    assert est.performance.details["phases_s"]["weight_sync"] == pytest.approx(
        QWEN_7B * 2 / link.effective_bytes_per_s + link.latency_s, rel=1e-9)


def test_refit_pipeline_broadcast_carries_one_expert_rank_share_of_the_experts():
    """A MoE refit (refit_utils.gather_params v0.3.0; Megatron-Bridge broadcast_from_pp_rank then
    gather_from_ep_ranks): each routed expert tensor crosses the pipeline group as its owner holds it, one
    expert-parallel rank's share, and the expert all-gather assembles the rest. Qwen3-30B-A3B on one node of 8,
    pp 2 ep 4, data parallel otherwise: the broadcast moves (non-expert + experts / 4) x 2 bytes, not the whole model,
    and the all-gather the routed experts' 2 bytes each over the 4-GPU expert group."""
    from gpuplan.estimate.comm import all_gather_time, group_link
    from gpuplan.estimate.calibration import packaged
    from gpuplan.models import get_model
    m = get_model("qwen3-30b-a3b")
    experts = sum(b.total for b in m.blocks if b.kind == "expert") * 2.0
    whole = m.params_total * 2.0
    assert 0.9 * whole < experts < whole        # the routed experts are most of the model
    # rollout_tp 2: at tp 1 the engine's 56.9 GiB of weights leave no KV cache in its 0.5 share of an 80 GB GPU, and
    # vLLM refuses to start (estimate/rl.py _check_rollout_kv); the refit time does not depend on it
    d = _rl(rollout_tp=2)
    d.update(model="qwen3-30b-a3b", framework="megatron")
    d["parallel"] = {"zero": 1, "pp": 2, "ep": 4}
    est = evaluate(d)
    eff = packaged()["comm"]
    pp_link = group_link(est.gpu, 2, 8, 8, None, eff)
    ep_link = group_link(est.gpu, 4, 4, 8, None, eff)
    hand = ((whole - experts + experts / 4) / pp_link.effective_bytes_per_s + pp_link.latency_s
            + all_gather_time(experts, 4, ep_link))
    got = est.performance.details["phases_s"]["weight_sync"]
    assert got == pytest.approx(hand, rel=1e-6)


# ---- NeMo RL's log-prob block (rl.logprob_impl) --------------------------------------------------------------
def test_nemo_rl_logprob_bytes_per_logit_by_hand():
    """Bytes per logit of NeMo RL's Megatron log-prob block, op by op (fp32 is 4 bytes, bf16 2, int64 8; read +
    written): GPTModel's transposed copy 2 + 2, the fp32 cast 2 + 4; the log-softmax amax 4, subtract 4 + 4, exp 4 + 4,
    sum 4, subtract the log-sum 4 + 4; v0.3.0 then clone 4 + 4 and exp_ 4 + 4, 06beed91 exp 4 + 4. Backward: v0.3.0
    one_hot 8, mask product 8 + 8, float 8 + 4, sub_ 4 + 4 + 4, mul_ 4 + 4; 06beed91 neg 4 + 4, mul_ 4 + 4; the
    gradient's cast back 4 + 2."""
    from gpuplan.estimate.rl import LOGPROB_BYTES
    common = (2 + 2) + (2 + 4)
    fwd = 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4)
    v03_fwd, v04_fwd = fwd + (4 + 4) + (4 + 4), fwd + (4 + 4)
    v03_bwd = 8 + (8 + 8) + (8 + 4) + (4 + 4 + 4) + (4 + 4) + (4 + 2)
    v04_bwd = (4 + 4) + (4 + 4) + (4 + 2)
    assert LOGPROB_BYTES["nemo-rl-0.3"] == (common + v03_fwd + v03_bwd, common + v03_fwd) == (120, 58)
    assert LOGPROB_BYTES["nemo-rl-0.4"] == (common + v04_fwd + v04_bwd, common + v04_fwd) == (72, 50)


def _megatron_rl(impl: str) -> dict:
    data = _rl(mean_response_len=None, logprob_impl=impl)
    data.update(framework="megatron", parallel={"tp": 2, "zero": 1})
    data["train"]["recompute"] = "none"
    return data


def test_nemo_rl_logprob_block_adds_its_bytes_beyond_the_fused_loss():
    """Qwen2.5-7B (vocabulary 152,064) on 8 H100 SXM, Megatron TP 2: 4 data-parallel ranks; 64 x 8 = 512 responses
    all at the 1,024-token cap, 1,536 tokens each, so a rank trains on 128 x 1,536 = 196,608 tokens and a GPU holds
    their logits over 152,064 / 2 = 76,032 entries. At 0.8 x 3.35 TB/s the training pass adds (72 - 12) bytes per
    logit (06beed91's block less the calibrated cross-entropy), the no-grad pass (no recompute: a third of the
    step, so a third of the 12) (50 - 4)."""
    fused, nemo = _logprob_block_deltas(_megatron_rl, "nemo-rl-0.4", 196_608 * 76_032, 72 - 12, 50 - 4)
    assert nemo["rollout"] == fused["rollout"]


def _logprob_block_deltas(build, impl: str, logits: int, train_bytes: float, nograd_bytes: float):
    """The phases of the scenario `build(impl)` against `build("fused")`: the training pass adds `train_bytes` and
    each no-grad log-prob pass `nograd_bytes` per logit, at 0.8 x 3.35 TB/s (H100 SXM); returns both phase dicts."""
    from gpuplan.pipeline import evaluate
    fused = evaluate(scenario_from_dict(build("fused"), "t")).performance.details["phases_s"]
    other = evaluate(scenario_from_dict(build(impl), "t")).performance.details["phases_s"]
    rate = 0.8 * 3.35e12
    assert other["actor_update"] - fused["actor_update"] == pytest.approx(train_bytes * logits / rate, rel=1e-6)
    for phase in ("actor_logprob", "reference_logprob"):
        assert other[phase] - fused[phase] == pytest.approx(nograd_bytes * logits / rate, rel=1e-6)
    return fused, other


def test_nemo_rl_logprob_impl_needs_megatron():
    data = _rl(logprob_impl="nemo-rl-0.3")
    with pytest.raises(InputError) as err:
        scenario_from_dict(data, "t")
    assert "logprob_impl" in str(err.value) and "megatron" in str(err.value)


def test_packed_training_adds_the_per_sequence_slice_backward():
    """Packed, every response at the cap: 1,536-token sequences, four to a 4 x 1,536 = 6,144-token pack, so
    SequencePackingLossWrapper calls the loss on 4 slices of each pack; their backward writes 4 full-pack fp32 zero
    tensors (16 bytes a logit), copies each slice's gradient (8 over the pack) and adds 3 of them into the first
    (3 x 12): 16 x 4 - 4 = 60 bytes a logit on top of 06beed91's 72, against the 12 gpuplan charged. A rank trains on
    32 packs = 196,608 tokens, 76,032 logits each (Qwen2.5-7B at TP 2), at 0.8 x 3.35 TB/s."""
    from gpuplan.estimate.rl import packed_slice_bytes
    from gpuplan.pipeline import evaluate
    assert packed_slice_bytes(4) == 4 * 4 + 8 + 3 * 12 == 60
    assert packed_slice_bytes(1) == 0           # one sequence: sliced whole, an alias (next test)
    fused, nemo = (_megatron_rl(impl) for impl in ("fused", "nemo-rl-0.4"))
    for d in (fused, nemo):
        d["train"]["rl"]["packing"] = True
    fused = evaluate(scenario_from_dict(fused, "t")).performance.details["phases_s"]
    nemo = evaluate(scenario_from_dict(nemo, "t")).performance.details["phases_s"]
    logits = 196_608 * 76_032
    assert nemo["actor_update"] - fused["actor_update"] == pytest.approx((72 + 60 - 12) * logits / (0.8 * 3.35e12),
                                                                         rel=1e-6)


def test_slice_backward_materialises_the_whole_pack_per_slice():
    """The pattern packed_slice_bytes prices, run under torch's profiler: a loss on each of k slices of one fp32
    logits tensor makes k zero tensors of the whole tensor's shape (slice_backward) and sums the k gradients with
    k - 1 in-place adds of that shape."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    T, V, k = 64, 1000, 4
    x = torch.randn(1, T, V, dtype=torch.bfloat16, requires_grad=True)
    logits = x.float()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loss = sum(torch.log_softmax(logits[:, i * 16:(i + 1) * 16, :], dim=-1)[..., 0].sum() for i in range(k))
        loss.backward()
    full = [[1, T, V]]
    zeros = [e for e in prof.events() if e.name == "aten::zero_" and e.input_shapes[:1] == full]
    adds = [e for e in prof.events() if e.name == "aten::add_" and e.input_shapes[:1] == full]
    assert (len(zeros), len(adds)) == (k, k - 1)


def test_a_whole_pack_slice_is_an_alias_without_slice_backward():
    """A pack of one sequence: SequencePackingLossWrapper slices it [:, 0:T, :], the whole range, which torch's
    indexing returns as an alias (AliasBackward0): its backward writes no zero tensor, so packed_slice_bytes(1) is 0;
    a strict slice [:, 0:T-1, :] does (SliceBackward0, one zero tensor of the whole shape)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    T, V = 16, 100
    logits = torch.randn(1, T, V, requires_grad=True).float() * 1.0
    assert type(logits[:, 0:T, :].grad_fn).__name__ == "AliasBackward0"
    assert type(logits[:, 0:T - 1, :].grad_fn).__name__ == "SliceBackward0"
    for stop, zeros_expected in ((T, 0), (T - 1, 1)):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            torch.log_softmax(logits[:, 0:stop, :], dim=-1)[..., 0].sum().backward(retain_graph=True)
        backs = [e for e in prof.events() if e.name == "aten::slice_backward"]
        assert len(backs) == zeros_expected


# ---- NeMo RL's DTensor (FSDP2) worker's log-prob block ---------------------------------------------------------
def test_nemo_rl_dtensor_logprob_bytes_by_hand():
    """NeMo RL v0.3.0's DTensor worker at tp 1, per logit (fp32 4 bytes, bf16 2; read + written): FSDP2's fp32 cast of
    the bf16 logits 2 + 4; log_softmax 4 + 4; gather reads the chosen entries only. Backward: gather's zero tensor 4,
    log_softmax's 4 + 4 + 4, the [:, :-1] slice's zero tensor 4 and copy 4 + 4, the cast back 4 + 2. No-grad: the cast
    and the log_softmax."""
    from gpuplan.estimate.rl import LOGPROB_BYTES
    fwd = (2 + 4) + (4 + 4)
    bwd = 4 + (4 + 4 + 4) + (4 + 4 + 4) + (4 + 2)
    assert LOGPROB_BYTES["nemo-rl-dtensor-0.3"] == (fwd + bwd, fwd) == (48, 14)


def test_nemo_rl_dtensor_trace_matches_the_hand_count():
    """scripts/trace_nemo_rl_dtensor_logprob_bytes.py runs the worker's ops on CPU tensors under the byte counter:
    with 64-token sequences the [:, :-1] slice drops one row in 64 of what the log-softmax, its backward, gather's
    zeros and the slice's copy touch (8 + 12 + 4 + 8 = 32 bytes a logit), so k sequences a pack move
    48 - 32 / 64 + packed_slice_bytes(k), to within the per-token ops (a few bytes a token: ~1e-3 a logit at
    V = 4,096)."""
    pytest.importorskip("torch")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from trace_nemo_rl_dtensor_logprob_bytes import block_bytes
    from gpuplan.estimate.rl import packed_slice_bytes
    for k in (1, 3):
        assert block_bytes(k, True) == pytest.approx(48 - 32 / 64 + packed_slice_bytes(k), abs=0.01)
    assert block_bytes(2, False) == pytest.approx(14, abs=0.01)


def _dtensor_rl(impl: str) -> dict:
    data = _rl(mean_response_len=None, logprob_impl=impl)
    data.update(framework="torchtitan", parallel={"zero": 3})
    data["train"]["recompute"] = "none"
    return data


def test_nemo_rl_dtensor_logprob_block_adds_its_bytes_beyond_the_fused_loss():
    """Qwen2.5-7B (vocabulary 152,064) on 8 H100 SXM under FSDP2, tp 1: 8 data-parallel ranks; 64 x 8 = 512 responses
    all at the 1,024-token cap, 1,536 tokens each, so a rank trains on 64 x 1,536 = 98,304 tokens over the whole
    vocabulary. The eager torchtitan pass already charges aten's cross entropy on upcast logits, 36 bytes a logit
    (upcast 2 + 4, log_softmax 4 + 4, nll_loss backward's zeros 4, log_softmax backward 4 + 4 + 4, the cast back 4 + 2),
    a no-grad pass its forward third, 12; at 0.8 x 3.35 TB/s the training pass adds (48 - 36) bytes a logit, each
    no-grad pass (14 - 12). (Until 2026-12-04 the block subtracted the fused loss's 12 and 4 here, counting 24 and 8
    bytes a logit twice.)"""
    _logprob_block_deltas(_dtensor_rl, "nemo-rl-dtensor-0.3", 98_304 * 152_064, 48 - 36, 14 - 36 / 3)


def test_loss_bytes_charged_by_the_stack():
    """What the block subtracts is what the pass charged: 36 for eager hf / torchtitan, the fused 12 for Megatron
    and for a compiled torchtitan step."""
    from gpuplan.estimate.calibration import packaged
    from gpuplan.estimate.rl import loss_bytes_charged
    P = packaged()
    assert loss_bytes_charged(scenario_from_dict(_dtensor_rl("fused"), "t"), P) == 36.0
    comp = _dtensor_rl("fused")
    comp["train"]["compile"] = True
    assert loss_bytes_charged(scenario_from_dict(comp, "t"), P) == 12.0
    assert loss_bytes_charged(scenario_from_dict(_megatron_rl("fused"), "t"), P) == 12.0


def test_nemo_rl_dtensor_logprob_impl_needs_fsdp2_at_tp_1():
    for framework, par in (("megatron", {"zero": 1}), ("torchtitan", {"zero": 3, "tp": 2})):
        data = _dtensor_rl("nemo-rl-dtensor-0.3")
        data.update(framework=framework, parallel=par)
        with pytest.raises(InputError) as err:
            scenario_from_dict(data, "t")
        assert "nemo-rl-dtensor-0.3" in str(err.value) and "tp" in str(err.value)


# ---- TRL's DPO log-prob block (speed) -------------------------------------------------------------------------
def _trl_dpo(**over):
    train = {"objective": "dpo", "seq_len": 1024, "micro_batch": 4, "recompute": "full", **over.pop("train", {})}
    return scenario_from_dict({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm", "count": 1},
                               "train": train, **over})


def test_trl_dpo_step_prices_its_log_prob_block_beyond_the_sft_loss():
    """TRL's DPOTrainer (framework hf) adds its log-prob block over the 2 x 4 x 1,024 = 8,192 policy tokens x
    Llama 3.2's 128,256-entry vocabulary: 144 bytes per logit with the reference forward, 114 with precomputed
    log-probs, at the H200's bandwidth share of eager kernels; open-instruct-style stacks (torchtitan) and a fused loss add none."""
    from gpuplan.estimate.elementwise import bandwidth_share
    from gpuplan.hardware import get_gpu
    logits = 8_192 * 128_256
    rate = get_gpu("h200-sxm").mem_bandwidth_bytes_per_s * bandwidth_share("eager", "loss")
    ref = evaluate(_trl_dpo()).performance.details["phases_s"]
    assert ref["logprob_block"] == pytest.approx(144 * logits / rate, rel=1e-9)
    pre = evaluate(_trl_dpo(train={"reference": "precomputed"})).performance.details["phases_s"]
    assert pre["logprob_block"] == pytest.approx(114 * logits / rate, rel=1e-9) and "reference_forward" not in pre
    lora = evaluate(_trl_dpo(train={"method": "lora"})).performance.details["phases_s"]     # the base as reference
    assert lora["logprob_block"] == pytest.approx(144 * logits / rate, rel=1e-9)
    for other in (_trl_dpo(framework="torchtitan"), _trl_dpo(train={"loss": "chunked"}),
                  _trl_dpo(train={"objective": "orpo"})):
        assert "logprob_block" not in evaluate(other).performance.details["phases_s"]


def test_trl_dpo_log_prob_bytes_match_an_op_by_op_count():
    """The hand count (estimate/posttrain.py TRL_DPO_LOGPROB_EXTRA) against scripts/trace_dpo_logprob_bytes.py,
    which runs TRL's step (trace/_posttrain.dpo_loss) and HF's loss on CPU tensors under a byte counter."""
    pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path
    from gpuplan.estimate.posttrain import TRL_DPO_LOGPROB_EXTRA
    path = Path(__file__).resolve().parents[1] / "scripts" / "trace_dpo_logprob_bytes.py"
    spec = importlib.util.spec_from_file_location("trace_dpo_logprob_bytes", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    traced = mod.extra_bytes_per_logit()
    for kind in ("reference", "precomputed"):
        assert traced[kind] == pytest.approx(TRL_DPO_LOGPROB_EXTRA[kind], rel=0.03)


def test_a_split_rl_step_shows_each_gpu_group_in_the_header_and_the_plan_line():
    # examples/grpo-7b-split.yaml: 8 GPUs, 4 of them run the vLLM engine, so the trainer's data parallelism is 4,
    # not the 8 a layout over every GPU would give
    import yaml
    from gpuplan import api
    from gpuplan.explain import describe
    from gpuplan.report import estimate_report
    from pathlib import Path
    d = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "grpo-7b-split.yaml").read_text())
    est = api.estimate(d)
    head = estimate_report(est).splitlines()[0]
    assert "8x h100-sxm: 4 train (dp=4 tp=1 pp=1 zero=3) + 4 rollout (vllm tp=1 x4)" in head
    assert "4 train (dp=4" in describe(est) and "dp=8" not in describe(est)

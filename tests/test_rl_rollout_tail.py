"""The RL rollout's tail (docs/speed.md §3.36, issue 20): the step waits for its longest response, and with a short
mean the max-entropy lengths end well short of the cap; `rl.truncation_rate` (NeMo RL's logged share of responses
stopped by the length limit) puts that share at the cap. And the 70B TP 4 decode step the tail runs at is not
under-priced: it is checked against vLLM's own kernels as NVIDIA's aiconfigurator timed them on an H100.

Expected values come from the closed-form distribution, the configs' numbers and the published kernel tables, not
from the code under test."""
import math

import pytest

from gpuplan import api, pipeline
from gpuplan.errors import InputError
from gpuplan.estimate import rl as rlm
from gpuplan.estimate.speed import serving_model
from gpuplan.scenario import scenario_from_dict

# NeMo RL v0.3 blog, Llama 3.1 70B (posttrain.csv NB03): 64 prompts x 32, mean response 398 tokens, responses capped
# at max_total_sequence_length 4,096 - the 132-token prompt (grpo_math_70B_megatron.yaml @06f63430)
N, MEAN, CAP = 64 * 32, 398, 4096 - 132


def _mid_quantile_max(mean: float, top: float, n: int) -> float:
    """The largest of n mid-quantiles of the truncated exponential on [0, top] with this mean (by bisection on
    mean/top = 1/a - 1/(e^a - 1), then x = -ln(1 - u (1 - e^-a)) / a)."""
    r, lo, hi = mean / top, 1e-9, 200.0
    for _ in range(200):
        a = 0.5 * (lo + hi)
        if 1.0 / a - 1.0 / math.expm1(a) > r:
            lo = a
        else:
            hi = a
    u = (n - 0.5) / n
    return -math.log1p(-u * -math.expm1(-a)) / a * top


def test_max_entropy_tail_of_a_short_mean_ends_short_of_the_cap():
    ls = rlm.response_lengths(MEAN, CAP, N)
    assert max(ls) == round(_mid_quantile_max(MEAN, CAP, N))       # 3,241 tokens
    assert CAP - max(ls) > 700                                       # ~720 decode iterations short of the cap


@pytest.mark.parametrize("rate,k", [(1 / N, 1), (1e-6, 1), (0.005, 10), (0.02, 41)])
def test_truncation_rate_puts_its_share_at_the_cap_and_keeps_the_mean(rate, k):
    ls = rlm.response_lengths(MEAN, CAP, N, rate)
    assert len(ls) == N and ls == sorted(ls)
    assert ls.count(CAP) == k                                        # round(rate x n), at least one
    assert sum(ls) / N == pytest.approx(MEAN, abs=0.5)               # the stated mean holds
    assert max(ls[:-k]) < CAP


def test_truncation_rate_beyond_the_mean_is_refused():
    with pytest.raises(InputError, match="truncation_rate"):
        scenario_from_dict(_nb03(truncation_rate=0.2), "t")          # 410 x 3,964 tokens > 2,048 x 398


def _nb03(**rl):
    return {"model": "llama-3.1-70b", "task": "finetune",
            "hardware": {"gpu": "h100-sxm", "count": 64, "gpus_per_node": 8},
            "parallel": {"tp": 4, "pp": 4},
            "train": {"objective": "grpo", "method": "full", "micro_batch": 1, "recompute": "none",
                      "rl": {"prompts_per_step": 64, "group_size": 32, "prompt_len": 132, "max_new_tokens": CAP,
                             "mean_response_len": MEAN, "engine": "vllm", "placement": "colocated",
                             "rollout_tp": 4, "gpu_memory_utilization": 0.6, "engine_async_scheduling": False,
                             "engine_in_process": True, **rl}}}


def test_a_truncated_response_sets_the_rollout_tail():
    base = api.estimate(_nb03()).performance.details
    trunc = api.estimate(_nb03(truncation_rate=1 / N)).performance.details
    assert rlm.replica_lengths(scenario_from_dict(_nb03(truncation_rate=1 / N), "t"), 16)[-1] == CAP
    # ~723 more decode iterations, each at least one read of a GPU's 35 GB weight shard (70.6e9 params x 2 bytes
    # / 4) at the H100 SXM datasheet's 3.35 TB/s
    floor = (CAP - round(_mid_quantile_max(MEAN, CAP, N))) * 70.6e9 * 2 / 4 / 3.35e12
    assert trunc["phases_s"]["rollout"] - base["phases_s"]["rollout"] > floor            # > 7.6 s


# vLLM's kernels on an H100 SXM as NVIDIA's aiconfigurator timed them (vLLM 0.14.0 tables,
# aic-core/src/aiconfigurator_core/systems/data/h100_sxm/{gemm,attention,comm}/vllm/0.14.0/*.parquet
# @095f58a51c4ca8e61b66ec108d86f223f8d559ce), bf16, m = 1 (one decoding sequence), Llama 3.1 70B's shapes at TP 4:
GEMM_US = {"qkv (n 2560, k 8192)": 18.92, "o_proj (n 8192, k 2048)": 13.76,
           # gate_up n 14336: the table's n 12288 and 16384 rows (71.97, 88.69 us) interpolated in n
           "gate_up (n 14336, k 8192)": 71.97 + (88.69 - 71.97) * (14336 - 12288) / (16384 - 12288),
           "down (n 8192, k 7168)": 40.48}
ATTENTION_US = 14.32          # generation_attention_perf: batch 1, 16 heads / 2 KV heads, head_dim 128, context 2,047
ALLREDUCE_US = 4.88           # custom_allreduce_perf vLLM_custom_graph: 4 GPUs, 8,192 bf16 elements (one token)
LM_HEAD_US = 88.69 + (359.51 - 88.69) * (32064 - 16384) / (65536 - 16384)   # n 128256/4 = 32064, k 8192


def test_70b_tp4_decode_step_is_not_under_priced():
    """The 70B rollout tail runs ~2,000 decode steps at 1-2 sequences: if gpuplan's step were below what vLLM's own
    kernels take, that would be the 70B gap. It is not: the priced GPU time (less the engine's fixed step overhead)
    covers the measured GEMMs, attention and two custom all-reduces a layer, x 80, and the lm_head; what it holds
    beyond them (element-wise kernels, embedding, sampler: not in the tables) stays under a quarter more."""
    r = pipeline.resolve({"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 4},
                          "parallel": {"tp": 4}, "infer": {"engine": "vllm", "weights": "bf16", "kv_cache": "bf16",
                                                           "prompt_len": 132, "output_len": 3964}})
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                       memory=pipeline.memory(r))
    d = sv.decode_step(1, 2048)
    measured = (80 * (sum(GEMM_US.values()) + ATTENTION_US + 2 * ALLREDUCE_US) + LM_HEAD_US) * 1e-6   # 14.4 ms
    priced = d["gpu_time"] - d["overhead"]
    assert measured <= priced <= 1.25 * measured

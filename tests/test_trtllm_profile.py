"""TensorRT-LLM's own start-up profile, which sizes its KV pool (docs/model.md §4, docs/speed.md §3.28).

What the PyTorch backend does, read in its source (NVIDIA/TensorRT-LLM):
* tensorrt_llm/_torch/pyexecutor/_util.py @d8ae02caed59708512e5aa578a09bb09f365bfed KvCacheCreator:
  `_create_dummy_context_requests` fills `max_num_tokens` with prompts of min(max_num_tokens, max_seq_len - 1)
  tokens and one output token each (repeated tp_size times under attention DP, so every rank gets its own
  max_num_tokens); `estimate_max_tokens` / `_cal_max_tokens`: pool = free_gpu_memory_fraction x (the CUDA total -
  the torch peak - memory outside torch + the temporary KV of the run). No sampler over max_num_seqs is run.
* fused_moe_cutlass.py @000a01de66f0eab4ab05640711f0253f50f5209c: under attention DP `moe_max_num_tokens =
  max_num_tokens x world_size`, the all-gathered tokens go through the fused MoE in one chunk.
* moe_kernels.cu @ac73e3116fb44f06ec9873d68b114a3fc11c19a7 getWorkspaceDeviceBufferSizes: per expanded row
  (tokens x top-k) max(h*T, h*G, i*T) + max(2i*G, h*G, i*T) bytes and three 4-byte maps, T the permuted
  activation's bytes (1 for FP8 per-tensor), G the unfused GEMM output's (bf16, 2).
Expected values are hand arithmetic from Qwen3-235B-A22B's config.json (hidden 4096, moe_intermediate 1536, top-8,
vocab 151936) and Llama-3.1-8B's.
"""
import pytest

from gpuplan.estimate.memory import (_trtllm_profile_bytes, estimate_memory, trtllm_moe_workspace_bytes,
                                     trtllm_profile_tokens)
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict


def _dep8(**infer):
    return scenario_from_dict({
        "model": "qwen3-235b-a22b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
        "parallel": {"tp": 1, "dp": 8, "ep": 8},
        "infer": {"engine": "trtllm", "weights": "fp8", "kv_cache": "fp8", "prompt_len": 128, "output_len": 4096,
                  "concurrency": 1500, "gpu_memory_utilization": 0.9, **infer}})


# one expanded row of Qwen3-235B's FP8 CUTLASS MoE, expert intermediate 1536 on its EP rank: inputs max(4096*1,
# 4096*2, 1536*1) = 8192, outputs max(2*1536*2, 4096*2, 1536*1) = 8192, maps 12; per token beside it the gathered
# FP8 input 4096, the bf16 output 8192 and 8 int32 ids + 8 fp32 scales 64
ROW = 8 * (8192 + 8192 + 12) + (4096 + 8192 + 64)                  # 143,520 bytes per gathered token


def test_moe_workspace_counts_every_expanded_row():
    assert ROW == 143_520
    assert trtllm_moe_workspace_bytes(get_model("qwen3-235b-a22b"), 16384, "fp8", 1536) == 16384 * ROW


def test_attention_dp_profiles_the_gathered_tokens_of_every_rank():
    # trtllm-bench's own max_num_tokens for the H100 128/4096 DEP8 row (I281) is 2048; the fused MoE sees 8 x 2048
    scn = _dep8(max_num_seqs=512, max_num_batched_tokens=2048)
    model = get_model("qwen3-235b-a22b")
    cap = get_gpu("h100-sxm").usable_memory_bytes
    assert trtllm_profile_tokens(scn, model, cap) == 2048
    local = 2048 * 4 * 4096 * 2                                      # residual, norm, attention projections
    assert _trtllm_profile_bytes(scn, model, cap) == pytest.approx(local + 16384 * ROW)   # 2,418,540,544
    # four times the tokens: the gathered workspace grows four times, the pool falls by 0.9 x the difference
    big = _dep8(max_num_seqs=512, max_num_batched_tokens=8192)
    lim = lambda s: estimate_memory(s, model, cap).limits["kv_pool_bytes"]   # noqa: E731
    assert lim(scn) - lim(big) == pytest.approx(0.9 * 3 * (local + 16384 * ROW), rel=1e-6)


def test_bench_and_serve_token_budgets_are_tensorrt_llms_own():
    model = get_model("qwen3-235b-a22b")
    cap = get_gpu("h100-sxm").usable_memory_bytes
    # trtllm-bench's heuristic (trtllm_bench.bench_settings; 2048 on the H100 DEP8 128/4096 row), not vLLM's 8192
    assert trtllm_profile_tokens(_dep8(), model, cap) == 2048
    # a service under load runs trtllm-serve with BuildConfig's 8192 even on an A100 (vLLM's default there: 2048)
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb"},
                              "infer": {"engine": "trtllm", "load": {"rate_per_s": 1.0, "requests": 10}}})
    assert trtllm_profile_tokens(scn, get_model("llama-3.1-8b"), get_gpu("a100-sxm-80gb").usable_memory_bytes) == 8192


def test_pool_does_not_depend_on_how_many_requests_wait():
    # the dummy requests are fixed by max_num_tokens; TensorRT-LLM samples no max_num_seqs batch while profiling
    def pool(conc):
        scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                                  "infer": {"engine": "trtllm", "weights": "fp8", "prompt_len": 128,
                                            "output_len": 128, "concurrency": conc}})
        return estimate_memory(scn, get_model("llama-3.1-8b"), get_gpu("h100-sxm").usable_memory_bytes
                               ).limits["kv_pool_bytes"]
    assert pool(8) == pool(4096)
